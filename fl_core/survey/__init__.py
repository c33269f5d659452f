"""Surveys: one analysis family over many models, one row per model: the study the papers did by hand
(:mod:`fl_core.survey.models` lists the models, :mod:`fl_core.survey.analysis` computes the rows,
:mod:`fl_core.survey.plots` draws them; ``python -m fl_core survey`` maps the rows over an engine's workers)."""

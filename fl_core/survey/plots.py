"""The survey figure: each model's two headline numbers side by side, coloured by architecture family."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fl_core.figures import color, readable, title_lines
from fl_core.survey.analysis import COLUMNS, HEADLINES, SurveyResult

PANEL_TITLE_CHARS = 26
"""A panel title's line length: two panels side by side in a 1024-px projector's page column."""


def survey_figure(result: SurveyResult) -> go.Figure:
    """One panel per headline number of the survey's family (:data:`~fl_core.survey.analysis.HEADLINES`), a dot per
    model that succeeded (rows in the survey's order, labelled by model), coloured by its architecture family."""
    family = result.settings.family
    names = HEADLINES[family]
    rows = [row for row in result.rows if row.error is None]
    families = list(dict.fromkeys(row.model_family for row in rows))
    workers = result.worker_names
    fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=["<br>".join(title_lines(COLUMNS[family][name], PANEL_TITLE_CHARS))
                                        for name in names])
    for panel, name in enumerate(names, start=1):
        for index, model_family in enumerate(families):
            members = [row for row in rows if row.model_family == model_family]
            fig.add_trace(go.Scatter(
                x=[row.values[name] for row in members], y=[row.label for row in members], mode="markers",
                marker={"size": 10, "color": color(index)}, name=model_family, legendgroup=model_family,
                showlegend=panel == 1, customdata=[[row.spec, workers[row.worker], row.seconds] for row in members],
                hovertemplate="%{y}<br>" + name + " = %{x:.3f}<br>%{customdata[0]}<br>%{customdata[1]}, "
                              "%{customdata[2]:.1f} s<extra></extra>"), row=1, col=panel)
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=[row.label for row in rows])
    failed = len(result.failed)
    fig.update_layout(title=f"{family} survey of {len(result.rows)} models" + (f" ({failed} failed)" if failed else ""),
                      height=max(320, 28 * len(rows) + 140), legend_title_text="family",
                      showlegend=True)  # also for one family: plotly draws it anyway, where readable did not place it
    return readable(fig)

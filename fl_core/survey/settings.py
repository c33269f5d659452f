"""The survey's settings (light: no torch, so the command line and the family registry read them at once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from fl_core.families import family_names
from fl_core.io.sources import BUNDLED
from fl_core.settings import MAX_IMAGES, Settings, setting

FAMILIES = family_names(surveyed=True)
"""What a survey can measure on every model: the registered families with a survey measure
(:mod:`fl_core.families`)."""


@dataclass(frozen=True)
class SurveySettings(Settings):
    """What a survey measures on every model (defaults here only; the CLI's options and the page's widgets derive
    from it).

    Attributes:
        family: the analysis: ``energy`` (energy profile and linear-theory fit), ``whitening`` (C(δ)/C(0) at
            ``distance``), ``masterkeys`` (master-key composition of the depthwise filters) or ``weights`` (weight
            statistics of every convolution).
        images: image source of the patch statistics (energy, whitening).
        max_images: use at most this many images (none: all).
        distance: the whitening distance δ in pixels (the paper quotes 10).
        seeds: random-init seeds of the energy baseline and the whitening reference.
        max_models: the most models one survey may hold (a pattern that matches more is refused).
    """

    family: str = setting("energy", choices=FAMILIES)
    images: str = BUNDLED
    max_images: int | None = setting(None, minimum=1, maximum=MAX_IMAGES)
    distance: int = setting(10, minimum=1, maximum=64)
    seeds: int = setting(10, minimum=1, maximum=100)
    max_models: int = setting(500, minimum=1, maximum=5000)


class SurveyOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`SurveySettings`, e.g. ``analyze_survey(models, family='whitening')``: its fields
    (nested ones by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    family: str
    images: str
    max_images: int | None
    distance: int
    seeds: int
    max_models: int

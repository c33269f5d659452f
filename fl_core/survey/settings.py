"""The survey's settings (light: no torch, so the command line and the family registry read them at once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from fl_core.errors import ArgumentError, value_text
from fl_core.families import FAMILIES as REGISTERED
from fl_core.families import family_names
from fl_core.io.sources import BUNDLED
from fl_core.settings import MAX_IMAGES, Settings, setting

FAMILIES = family_names(surveyed=True)
"""What a survey can measure on every model: the registered families with a survey measure
(:mod:`fl_core.families`)."""


def measure_label(family: str) -> str:
    """The name of a family's survey measure (its registration's ``label``, else the family's name)."""
    measure = REGISTERED[family].survey
    return (measure.label if measure else "") or family


FAMILY_HELP = "the analysis measured on every model: " + "; ".join(
    f"{name} ({measure_label(name)})" for name in FAMILIES)
"""The help of ``family``, from the registered survey measures."""


@dataclass(frozen=True)
class SurveySettings(Settings):
    """What a survey measures on every model (defaults here only; the CLI's options and the page's widgets derive
    from it).

    Attributes:
        family: the analysis measured on every model: one of the registered families with a survey measure
            (:func:`fl_core.families.family_names`), e.g. ``energy``, ``whitening``, ``masterkeys`` or ``weights``.
        images: image source of the patch statistics (energy, whitening).
        max_images: use at most this many images (none: all).
        distance: the whitening distance δ in pixels (the paper quotes 10).
        seeds: random-init seeds of the energy baseline and the whitening reference.
        max_models: the most models one survey may hold (a pattern that matches more is refused).
        family_settings: the family's own settings object, passed to its measure (``None``: its defaults, with the
            survey's seeds and distance where the family has such settings); the command line sets its fields with
            ``--set NAME=VALUE``.
    """

    family: str = setting("energy", choices=FAMILIES, help=FAMILY_HELP)
    images: str = BUNDLED
    max_images: int | None = setting(None, minimum=1, maximum=MAX_IMAGES)
    distance: int = setting(10, minimum=1, maximum=64)
    seeds: int = setting(10, minimum=1, maximum=100)
    max_models: int = setting(500, minimum=1, maximum=5000)
    family_settings: Settings | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        expected = REGISTERED[self.family].settings_class()
        if self.family_settings is not None and (expected is None or not isinstance(self.family_settings, expected)):
            wanted = f"a {expected.__name__} or None" if expected else f"None ({self.family} has no settings)"
            raise ArgumentError(f"family_settings of a {self.family} survey must be {wanted}, not "
                                f"{value_text(self.family_settings)}")


class SurveyOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`SurveySettings`, e.g. ``analyze_survey(models, family='whitening')``: its fields
    (nested ones by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    family: str
    images: str
    max_images: int | None
    distance: int
    seeds: int
    max_models: int
    family_settings: Settings | None

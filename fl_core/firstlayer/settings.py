"""The first-layer families' settings (light: no torch, so the command line and the family registry read them at
once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from fl_core.settings import Settings, setting


@dataclass(frozen=True)
class EnergySettings(Settings):
    """How energy profiles are measured (defaults here only; the CLI's options, the page's widgets and the cache keys
    derive from it).

    Attributes:
        layer: convolution name (default, or "first": each model's first convolution; a deeper layer is an extension
            beyond the paper, its patches that layer's own inputs).
        seeds: random-init seeds for the baseline (seeds 0..n−1).
    """

    layer: str | None = None
    seeds: int = setting(10, minimum=1, maximum=1000)


class EnergyOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`EnergySettings`, e.g. ``analyze_energy(models, seeds=3)``: its fields (nested
    ones by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    layer: str | None
    seeds: int



@dataclass(frozen=True)
class WhiteningSettings(Settings):
    """How the whitening curves are measured (defaults here only; the CLI's options, the page's widgets and the cache
    keys derive from it).

    Attributes:
        max_distance: largest distance δ in pixels.
        seeds: random-init seeds (≥ 10 recommended; seeds 0..n−1).
    """

    max_distance: int = setting(20, minimum=0, maximum=1024)
    seeds: int = setting(10, minimum=1, maximum=1000)


class WhiteningOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`WhiteningSettings`, e.g. ``analyze_whitening(models, max_distance=12)``: its
    fields (nested ones by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    max_distance: int
    seeds: int

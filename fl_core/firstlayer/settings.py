"""The first-layer families' settings (light: no torch, so the command line and the family registry read them at
once)."""

from __future__ import annotations

from dataclasses import dataclass

from fl_core.settings import setting


@dataclass(frozen=True)
class EnergySettings:
    """How energy profiles are measured (defaults here only; the CLI's options, the page's widgets and the cache keys
    derive from it).

    Attributes:
        layer: convolution name (default, or "first": each model's first convolution; a deeper layer is an extension
            beyond the paper, its patches that layer's own inputs).
        seeds: random-init seeds for the baseline (seeds 0..n−1).
    """

    layer: str | None = None
    seeds: int = setting(10, minimum=1, maximum=1000)



@dataclass(frozen=True)
class WhiteningSettings:
    """How the whitening curves are measured (defaults here only; the CLI's options, the page's widgets and the cache
    keys derive from it).

    Attributes:
        max_distance: largest distance δ in pixels.
        seeds: random-init seeds (≥ 10 recommended; seeds 0..n−1).
    """

    max_distance: int = setting(20, minimum=0, maximum=1024)
    seeds: int = setting(10, minimum=1, maximum=1000)

"""The filter-norm family's settings (light: no torch, so the command line and the family registry read them at
once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from fl_core.settings import Settings, setting


@dataclass(frozen=True)
class FilterNormsSettings(Settings):
    """What :func:`~fl_core.filternorms.analysis.analyze_filter_norms` computes.

    Attributes:
        zero_tol: a filter is near zero when ‖w_k‖ ≤ zero_tol · max_j ‖w_j‖ of its layer.
        min_filters: convolutions with fewer filters are left out.
    """

    zero_tol: float = setting(1e-3, minimum=0.0, maximum=1.0)
    min_filters: int = setting(1, minimum=1, maximum=100_000)


class FilterNormsOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`FilterNormsSettings`, e.g. ``analyze_filter_norms(model, zero_tol=0.01)``."""

    zero_tol: float
    min_filters: int

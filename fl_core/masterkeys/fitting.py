"""Scale (σ) estimation for the idealized master-key-filter models: fitting methods A-D of B.5.

Reference: docs/methods.md, "Fitting methods A–D2" (B.5; Lindeberg, Babaiee & Kiasari, arXiv:2509.12746).
Method names follow ``modify_dwconvs_initial.py --method``:

- ``A``: continuous variance transfer, σ = √(2V_w) (smoothing axis) or √(2V_w/3) (differentiated axis).
- ``B``: match the weighted discrete variance V_w of the model to that of the learned filter, per axis.
- ``C1``/``C2``: minimise the l1 distance to the normalised filter, anisotropic / isotropic.
- ``D1``/``D2``: the same with the l2 distance.

Filter 7 is always fitted jointly in (σ, α): l1 for C1/C2, l2 for A, B, D1 and D2. Every search is a
vectorised grid (coarse, then finer around the minimum); the 1-D searches end with parabolic refinement.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from fl_core.masterkeys.scalespace import (
    DIFFERENTIATED_DIRECTION,
    FILTER7_ALPHA_L2,
    SIGMA_REF,
    Filter7Form,
    centred_cosine,
    idealized_filter,
    idealized_filter_batch,
    load_published_filters,
    normalize_learned_filter,
    parabolic_minimum,
    weighted_filter_variance,
)
from fl_core.masterkeys.settings import FIT_METHODS, FitMethod
from fl_core.results import Result, with_model_columns

if TYPE_CHECKING:
    import pandas as pd


GRID_SAMPLES = 200  # B.5: 200 (×200) samples per grid stage
SIGMA_RANGE = (0.0, 3.0)  # linear σ grid of the anisotropic and filter-7 searches
LOG_SIGMA_RANGE = (0.02, 3.0)  # log σ grid of the 1-D searches (method B, isotropic l1/l2)
ALPHA_RANGE = (0.0, 2.0)  # α grid of the filter-7 search
METHOD_B_FINE_SAMPLES = 100  # B.5: 100 log-spaced σ in the narrow bracket
ZOOM_CELLS = 4  # a finer 2-D grid spans this many cells of the previous one on each side of its minimum
ZOOM_STAGES = 2  # finer 2-D grids after the coarse one
PUBLISHED_SOURCE = "the 8 published filters"
PUBLISHED_LABEL = "published master keys"
"""The label of the published filters' fits in tables (no model: their spec is empty, as the whitening reference
curves')."""


def _distance(difference: np.ndarray, norm: Literal["l1", "l2"]) -> np.ndarray:
    """l1 (Σ|d|) or l2 (√Σd²) norm over the last two axes."""
    if norm == "l1":
        return np.abs(difference).sum(axis=(-2, -1))
    return np.sqrt(np.square(difference).sum(axis=(-2, -1)))


def _zoom_grid(grid: np.ndarray, i: int, samples: int) -> np.ndarray:
    """A finer linear grid spanning ``ZOOM_CELLS`` cells of ``grid`` on each side of ``grid[i]``."""
    return np.linspace(grid[max(i - ZOOM_CELLS, 0)], grid[min(i + ZOOM_CELLS, len(grid) - 1)], samples)


def _log_search(objective, samples: int = GRID_SAMPLES, fine_samples: int = GRID_SAMPLES) -> float:
    """argmin of a vectorised 1-D objective over σ: a log grid, a narrow log bracket, then a parabola."""
    grid = np.geomspace(*LOG_SIGMA_RANGE, samples)
    i = int(np.argmin(objective(grid)))
    fine = np.geomspace(grid[max(i - ZOOM_CELLS, 0)], grid[min(i + ZOOM_CELLS, samples - 1)], fine_samples)
    return parabolic_minimum(fine, objective(fine))


def _grid_search_2d(objective, first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    """argmin of a vectorised objective(first[:, None], second[None, :]): a coarse 2-D grid, then finer ones.

    Each finer grid spans ``ZOOM_CELLS`` cells around the previous minimum: flat l1 valleys put the coarse
    minimum up to two cells away from the true one.
    """
    for stage in range(ZOOM_STAGES + 1):
        values = objective(first[:, None], second[None, :])
        i, j = np.unravel_index(int(np.argmin(values)), values.shape)
        if stage < ZOOM_STAGES:
            first, second = _zoom_grid(first, i, GRID_SAMPLES), _zoom_grid(second, j, GRID_SAMPLES)
    return float(first[i]), float(second[j])


def fit_scale_method_a(normalized: np.ndarray, index: int) -> tuple[float, float]:
    """Method A (B.5): invert the continuous relations for the weighted variance V_w (σ_ref = 1).

    Smoothing axis: V = σ²/2, so σ = √(2V); differentiated axis: V = 3σ²/2, so σ = √(2V/3).

    Args:
        normalized: learned filter normalised as in B.3 (only |h| matters).
        index: model type 1-6 or 8.

    Returns:
        (σx, σy).
    """
    variance = weighted_filter_variance(normalized, index)
    differentiated = DIFFERENTIATED_DIRECTION.get(index)
    sigma_x = np.sqrt(2 * variance[0, 0] / (3 if differentiated == "x" else 1))
    sigma_y = np.sqrt(2 * variance[1, 1] / (3 if differentiated == "y" else 1))
    return float(sigma_x), float(sigma_y)


def fit_scale_method_b(normalized: np.ndarray, index: int) -> tuple[float, float]:
    """Method B (B.5): per axis, σ with V_w,aa(|h_model(σ)| · w) = V_w,aa(|h| · w), same weight w both sides.

    The other axis of the model is held at σ_ref (the weighted variance of a separable model along one axis
    does not depend on it). Search: the squared difference on a log grid, then on 100 log-spaced σ in the
    bracket around its minimum, then parabolic refinement.

    Args:
        normalized: learned filter normalised as in B.3.
        index: model type 1-6 or 8.

    Returns:
        (σx, σy).
    """
    size = np.shape(normalized)[-1]
    target = weighted_filter_variance(normalized, index)

    def squared_difference(axis: int, sigma: np.ndarray) -> np.ndarray:
        other = np.full_like(sigma, SIGMA_REF)
        sigma_x, sigma_y = (sigma, other) if axis == 0 else (other, sigma)
        models = idealized_filter_batch(index, sigma_x, sigma_y, size=size)
        model_variance = weighted_filter_variance(models, index)
        return (model_variance[..., axis, axis] - target[axis, axis]) ** 2

    return tuple(  # type: ignore[return-value]
        _log_search(functools.partial(squared_difference, axis), fine_samples=METHOD_B_FINE_SAMPLES)
        for axis in (0, 1)
    )


def fit_scale_by_distance(
    normalized: np.ndarray, index: int, norm: Literal["l1", "l2"], isotropic: bool
) -> tuple[float, float]:
    """Methods C and D (B.5): σ minimising ‖h_model(σx, σy) - h_normalised‖ in l1 or l2.

    Anisotropic (C1, D1): a 200×200 linear (σx, σy) grid over [0, 3]², then two finer 200×200 grids around
    the minimum. Isotropic (C2, D2): σx = σy on a log grid, a finer log bracket, then a parabola.

    Returns:
        (σx, σy).
    """
    size = np.shape(normalized)[-1]
    target = np.asarray(normalized, dtype=float)

    def distance(sigma_x: np.ndarray, sigma_y: np.ndarray) -> np.ndarray:
        return _distance(idealized_filter_batch(index, sigma_x, sigma_y, size=size) - target, norm)

    if isotropic:
        sigma = _log_search(lambda s: distance(s, s))
        return sigma, sigma
    grid = np.linspace(*SIGMA_RANGE, GRID_SAMPLES)
    return _grid_search_2d(distance, grid, grid)


def fit_filter7(normalized: np.ndarray, norm: Literal["l1", "l2"]) -> tuple[float, float]:
    """Joint (σ, α) fit of δ - α∇²₅T(σ) to a normalised filter 7 (B.5): 200×200 grids, coarse then finer.

    Returns:
        (σ, α); for the published filter 7, l2 gives (0.67538, 0.52563) and l1 (0.65377, 0.52161).
    """
    size = np.shape(normalized)[-1]
    target = np.asarray(normalized, dtype=float)

    def distance(sigma: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        return _distance(idealized_filter_batch(7, sigma, alpha=alpha, size=size) - target, norm)

    return _grid_search_2d(
        distance, np.linspace(*SIGMA_RANGE, GRID_SAMPLES), np.linspace(*ALPHA_RANGE, GRID_SAMPLES)
    )


@dataclasses.dataclass(frozen=True)
class ScaleFit(Result):
    """Fitted scale-space model of one learned filter.

    Attributes:
        index: model type 1..8 (table B.2).
        method: fitting method, one of ``FIT_METHODS``.
        sigma_x: σ along x.
        sigma_y: σ along y (= sigma_x for filter 7 and the isotropic methods).
        alpha: α of δ - α∇²₅T for filter 7, else ``None``.
        cosine_similarity: centred cosine between the model and the *raw* learned filter (negative for the
            published filters 2 and 3, whose sign is opposite to the models).
        residual_l2: ‖h_model - h_normalised‖₂ with h normalised as in B.3.
    """

    index: int
    method: str
    sigma_x: float
    sigma_y: float
    alpha: float | None
    cosine_similarity: float
    residual_l2: float

    def model(
        self, size: int = 7, filter7_form: Filter7Form = "impulse", sum_to_one: bool = False
    ) -> np.ndarray:
        """The idealized filter at the fitted parameters (see :func:`fl_core.masterkeys.scalespace.idealized_filter`).

        For ``filter7_form="gaussian"`` the experiment's γ = 0.5 is used instead of the fitted α.
        """
        alpha = self.alpha if filter7_form == "impulse" else None
        return idealized_filter(self.index, self.sigma_x, self.sigma_y, alpha, size, filter7_form, sum_to_one)


@dataclasses.dataclass(frozen=True)
class ScaleSpaceResult(Result):
    """Scale fits of a set of filters by one method; ``to_dict()`` is the ``scalespace`` CLI JSON.

    Attributes:
        method: fitting method.
        filters: one :class:`ScaleFit` per filter, in index order.
        source: what was fitted ("the 8 published filters", or a model's per-key mean filters).
        label, spec: the model whose filters were fitted (the published filters: ``published master keys`` and no
            spec).
    """

    method: str
    filters: tuple[ScaleFit, ...]
    source: str = PUBLISHED_SOURCE
    label: str = PUBLISHED_LABEL
    spec: str = ""

    _figures: ClassVar[dict[str, str]] = {
        "sigma": "fl_core.masterkeys.plots:sigma_by_method_figure",
        "models": "fl_core.masterkeys.plots:models_figure",
    }

    def figure_inputs(self, kind: str) -> tuple:
        return ({self.method: self},) if kind == "sigma" else (self.models(), self)

    def to_frame(self) -> pd.DataFrame:
        """One row per filter, led by the model's label and spec: index, method, sigma_x, sigma_y, alpha,
        cosine_similarity, residual_l2."""
        import pandas as pd

        frame = pd.DataFrame([dataclasses.asdict(fit) for fit in self.filters]).astype({"alpha": float})
        return with_model_columns(frame, self.label, self.spec)

    def models(self, size: int = 7) -> np.ndarray:
        """The idealized filter of every fit at its fitted σ (and α), (n, size, size) in :attr:`filters` order."""
        return np.stack([fit.model(size) for fit in self.filters])


def _check_method(method: str) -> None:
    if method not in FIT_METHODS:
        raise ValueError(f"Unknown scale fitting method {method!r}; choose one of {', '.join(FIT_METHODS)}.")


def fit_scale(filter_: np.ndarray, index: int, method: FitMethod = "B") -> ScaleFit:
    """Fit the idealized model of type ``index`` to a learned filter with one of the methods of B.5.

    The filter is first normalised as in B.3 (:func:`fl_core.masterkeys.scalespace.normalize_learned_filter`).

    Args:
        filter_: learned filter (k, k), k odd, rows top to bottom.
        index: model type 1..8 (table B.2).
        method: ``"A"``, ``"B"``, ``"C1"``, ``"C2"``, ``"D1"`` or ``"D2"``.
    """
    _check_method(method)
    raw = np.asarray(filter_, dtype=float)
    normalized = normalize_learned_filter(raw, index).normalized
    norm: Literal["l1", "l2"] = "l1" if method in ("C1", "C2") else "l2"
    alpha: float | None = None
    if index == 7:
        sigma_x, alpha = fit_filter7(normalized, norm)
        sigma_y = sigma_x
    elif method == "A":
        sigma_x, sigma_y = fit_scale_method_a(normalized, index)
    elif method == "B":
        sigma_x, sigma_y = fit_scale_method_b(normalized, index)
    else:
        sigma_x, sigma_y = fit_scale_by_distance(normalized, index, norm, isotropic=method in ("C2", "D2"))
    return model_fit_at(raw, index, sigma_x, sigma_y, alpha, method)


def model_fit_at(filter_: np.ndarray, index: int, sigma_x: float, sigma_y: float | None = None,
                 alpha: float | None = None, method: str = "manual") -> ScaleFit:
    """The model of type ``index`` at given σ (and α) scored against a learned filter (e.g. from a σ slider).

    Returns:
        A :class:`ScaleFit` with the centred cosine to the raw filter and the l2 residual to the B.3-normalised one.
    """
    raw = np.asarray(filter_, dtype=float)
    sigma_y = sigma_x if sigma_y is None else sigma_y
    normalized = normalize_learned_filter(raw, index).normalized
    model = idealized_filter(index, sigma_x, sigma_y, alpha, size=raw.shape[-1])
    return ScaleFit(
        index=index,
        method=method,
        sigma_x=float(sigma_x),
        sigma_y=float(sigma_y),
        alpha=None if index != 7 else float(FILTER7_ALPHA_L2 if alpha is None else alpha),
        cosine_similarity=float(centred_cosine(model, raw)),
        residual_l2=float(np.sqrt(np.square(model - normalized).sum())),
    )


def fit_filters(filters: Mapping[int, np.ndarray], method: FitMethod = "B", source: str = "",
                label: str = PUBLISHED_LABEL, spec: str = "") -> ScaleSpaceResult:
    """Fit the model of each master key type (1..8) to its filter, e.g. a model's per-key mean filters.

    Args:
        filters: model type -> (k, k) learned filter.
        method: fitting method.
        source: what the filters are (kept in the result).
        label, spec: the model they come from (default: the published filters).
    """
    _check_method(method)
    fits = tuple(fit_scale(filters[index], index, method) for index in sorted(filters))
    return ScaleSpaceResult(method=method, filters=fits, source=source, label=label, spec=spec)


@functools.lru_cache(maxsize=len(FIT_METHODS))
def fit_published_filters(method: FitMethod = "B") -> ScaleSpaceResult:
    """Fit all 8 published master key filters with one method (the σ table of B.5); cached per method."""
    filters = load_published_filters()
    return fit_filters({i + 1: filters[i] for i in range(len(filters))}, method, PUBLISHED_SOURCE)


def idealized_templates(
    method: FitMethod = "B", size: int = 7, filter7_form: Filter7Form = "impulse", sum_to_one: bool = False
) -> np.ndarray:
    """The 8 idealized models at the σ (and α) fitted to the published filters by ``method``; (8, size, size).

    Use with :func:`fl_core.masterkeys.scalespace.affine_fit_to_templates` to swap idealized filters into a network.
    ``filter7_form="gaussian"`` with ``sum_to_one=True`` gives the experiment code's templates (T - 0.5∇²₅T,
    Gaussians renormalised to sum 1).
    """
    fits = fit_published_filters(method).filters
    return np.stack([fit.model(size, filter7_form, sum_to_one) for fit in fits])

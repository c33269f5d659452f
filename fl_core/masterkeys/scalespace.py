"""Discrete scale-space primitives and the idealized models of the 8 master key filters.

Implements sections B.1-B.4 and B.6 (template assignment) of docs/methods.md, "Scale-space models"
(Lindeberg, Babaiee & Kiasari, arXiv:2509.12746 / JMIV 2026; filters of Babaiee et al., arXiv:2509.11711).

Coordinate convention (Lindeberg's): a ``(k, k)`` array with ``N = (k - 1) / 2`` has its origin at the centre,
x runs to the right and **y runs upward**, so row ``r`` is ``y = N - r`` and column ``c`` is ``x = c - N``.
Every function accepts leading batch dimensions (``(..., k, k)``) so that grid searches stay vectorised.
The σ fits (methods A-D) live in :mod:`fl_core.masterkeys.fitting`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from scipy.ndimage import correlate1d
from scipy.special import ive

from fl_core.errors import AnalysisError, DataError
from fl_core.io import ASSETS_DIR
from fl_core.results import Result

PUBLISHED_FILTERS_PATH = ASSETS_DIR / "master_key_8filters.txt"

DifferenceKind = Literal["central", "forward", "backward", "second"]
Filter7Form = Literal["impulse", "gaussian"]

DIFFERENCE_MASKS: dict[str, tuple[float, float, float]] = {
    "central": (-0.5, 0.0, 0.5),  # δ f(x) = (f(x+1) - f(x-1)) / 2
    "forward": (0.0, -1.0, 1.0),  # δ₊ f(x) = f(x+1) - f(x)
    "backward": (-1.0, 1.0, 0.0),  # δ₋ f(x) = f(x) - f(x-1)
    "second": (1.0, -2.0, 1.0),  # δ_xx f(x) = f(x+1) - 2 f(x) + f(x-1)
}

# Table B.2: difference operator along (x, y) of models 1-6 and 8; model 7 is built separately.
MODEL_OPERATORS: dict[int, tuple[str, str]] = {
    1: ("smooth", "forward"),  # δ_{y+} T
    2: ("backward", "smooth"),  # δ_{x-} T
    3: ("smooth", "backward"),  # δ_{y-} T
    4: ("forward", "smooth"),  # δ_{x+} T
    5: ("central", "smooth"),  # δ_x T
    6: ("smooth", "central"),  # δ_y T
    8: ("smooth", "smooth"),  # T
}

FILTER7_ALPHA_L2 = 0.52563  # B.5: joint l2 fit of δ - α ∇²₅ T to published filter 7 (σ = 0.67538)
FILTER7_GAMMA_EXPERIMENT = 0.5  # B.2: γ7 of T - γ7 ∇²₅ T in the authors' experiment code
SIGMA_REF = 1.0  # B.4: scale of the weighting model for filters 1-6 and 8
SIGMA_REF_FILTER7 = 1.0 / np.sqrt(2.0)  # B.4: scale of the weighting Gaussian for filter 7
NORMALIZATION_EPS = 1e-9  # a normalising response below this fraction of Σ|h| means "no response"


def load_published_filters(path: str | Path | None = None) -> np.ndarray:
    """Load the 8 published 7×7 master key filters (Babaiee et al. 2025; file of Lindeberg, CC BY 4.0).

    The file holds ``#`` comments, ``Filter k:`` lines, blank lines and 56 rows of 7 numbers (CRLF or LF).

    Args:
        path: file to read; defaults to ``fl_core/assets/master_key_8filters.txt``.

    Returns:
        Array of shape (8, 7, 7), row 0 = top row (y = +3), column 0 = left column (x = -3).

    Raises:
        DataError: the file is missing or does not hold 8 × 7 × 7 numbers.
    """
    source = Path(path) if path is not None else PUBLISHED_FILTERS_PATH
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"Cannot read the master key filter file {source}: {exc}. Check the path.") from exc
    rows = [
        line.split()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "Filter"))
    ]
    try:
        values = np.array([[float(v) for v in row] for row in rows], dtype=float)
    except ValueError as exc:
        raise DataError(
            f"{source} holds a non-numeric filter row ({exc}); expected the 8Filters.txt format."
        ) from exc
    if values.shape != (56, 7):
        raise DataError(
            f"{source} holds rows of shape {values.shape}, expected 56 rows of 7 numbers (8 filters of 7×7)."
        )
    return values.reshape(8, 7, 7)


def discrete_gaussian(sigma: float | np.ndarray, radius: int, sum_to_one: bool = False) -> np.ndarray:
    """Discrete analogue of the Gaussian T(n; s) = e^{-s} I_n(s), s = σ², for n = -radius..radius (B.1).

    Computed with ``scipy.special.ive`` (= e^{-s} I_n(s)), vectorised over σ. pyscsp's
    ``make1Ddiscgaussfilter`` computes the same ``ive`` values but also drops tail taps whose mass is below
    ε = 1e-8 and only takes a scalar σ, so ``ive`` is used directly; pyscsp is the oracle of the tests (equal taps
    to 1e-13, tests/masterkeys/test_scalespace.py). T(n; 0) is the unit impulse.

    Args:
        sigma: standard deviation(s) σ ≥ 0; an array gives a batch of kernels.
        radius: half-width; the kernel has 2·radius + 1 taps.
        sum_to_one: renormalise the truncated kernel to sum 1 (the experiment path, B.6); ``False`` keeps the
            truncated taps as they are (the model-fitting path of ``filteranal``, B.2).

    Returns:
        Array of shape ``np.shape(sigma) + (2 * radius + 1,)``.
    """
    s = np.square(np.asarray(sigma, dtype=float))[..., None]
    kernel = ive(np.abs(np.arange(-radius, radius + 1)), s)
    if sum_to_one:
        kernel = kernel / kernel.sum(axis=-1, keepdims=True)
    return kernel


def difference_1d(
    values: np.ndarray, kind: DifferenceKind, axis: int = -1, mode: str = "reflect"
) -> np.ndarray:
    """Apply a 1-D difference operator as a correlation along ``axis`` in the direction of increasing index.

    ``central``: δ = [-½, 0, ½]; ``forward``: δ₊ = [0, -1, 1] (δ₊T is centred at -½); ``backward``:
    δ₋ = [-1, 1, 0] (δ₋T is centred at +½); ``second``: δ_xx = [1, -2, 1] (B.1).

    Args:
        values: array of any shape.
        kind: which operator.
        axis: the axis to difference along.
        mode: border handling of ``scipy.ndimage.correlate1d``; ``"reflect"`` as in ``filteranal`` (B.2).
    """
    return correlate1d(np.asarray(values, dtype=float), DIFFERENCE_MASKS[kind], axis=axis, mode=mode)


def difference_x(image: np.ndarray, kind: DifferenceKind, mode: str = "reflect") -> np.ndarray:
    """Difference operator along x (columns, to the right) of ``(..., rows, cols)`` arrays (B.1)."""
    return difference_1d(image, kind, axis=-1, mode=mode)


def difference_y(image: np.ndarray, kind: DifferenceKind, mode: str = "reflect") -> np.ndarray:
    """Difference operator along y **upward** (rows run downward) of ``(..., rows, cols)`` arrays (B.1).

    δ_{y+} f = f(y+1) - f(y) therefore subtracts the pixel *below* from the pixel *above*; δ_{y+}T is centred
    half a pixel below the array centre and δ_{y-}T half a pixel above it.
    """
    flipped = np.flip(np.asarray(image, dtype=float), axis=-2)
    return np.flip(difference_1d(flipped, kind, axis=-2, mode=mode), axis=-2)


def laplacian_5point(image: np.ndarray, mode: str = "constant") -> np.ndarray:
    """Five-point Laplacian ∇²₅ = δ_xx + δ_yy, mask [[0,1,0],[1,-4,1],[0,1,0]] (B.1).

    The default zero padding (``"constant"``) matches ``filteranal.keyfiltertempl7``, which applies the mask
    with ``scipy.signal.correlate(..., "same")``.
    """
    along_x = difference_1d(image, "second", axis=-1, mode=mode)
    return along_x + difference_1d(image, "second", axis=-2, mode=mode)


def _operator_factor(sigma: np.ndarray, kind: str, radius: int, sum_to_one: bool, y_axis: bool) -> np.ndarray:
    """1-D factor of a separable model: an operator applied to T(·; σ), along x or in array-row order."""
    kernel = discrete_gaussian(sigma, radius, sum_to_one)
    if kind != "smooth":
        kernel = difference_1d(kernel, kind)  # type: ignore[arg-type]
    # Along y the kernel is indexed by increasing y; array rows run the other way.
    return kernel[..., ::-1] if y_axis else kernel


def _radius_of_size(size: int) -> int:
    """Half-width N of an odd kernel size 2N + 1 ≥ 3."""
    if size < 3 or size % 2 == 0:
        raise ValueError(f"Kernel size must be odd and at least 3, got {size}.")
    return (size - 1) // 2


def idealized_filter_batch(
    index: int,
    sigma_x: float | np.ndarray,
    sigma_y: float | np.ndarray | None = None,
    alpha: float | np.ndarray | None = None,
    size: int = 7,
    filter7_form: Filter7Form = "impulse",
    sum_to_one: bool = False,
) -> np.ndarray:
    """Idealized models of table B.2 for broadcastable arrays of parameters (see :func:`idealized_filter`).

    ``alpha`` only applies to filter 7 and is ignored for the others.

    Returns:
        Array of shape ``broadcast(sigma_x, sigma_y[, alpha for filter 7]) + (size, size)``.
    """
    radius = _radius_of_size(size)
    sx = np.asarray(sigma_x, dtype=float)
    sy = sx if sigma_y is None else np.asarray(sigma_y, dtype=float)
    if index == 7:
        form_default = FILTER7_ALPHA_L2 if filter7_form == "impulse" else FILTER7_GAMMA_EXPERIMENT
        coefficient = np.asarray(form_default if alpha is None else alpha, dtype=float)[..., None, None]
        smooth_y = _operator_factor(sy, "smooth", radius, sum_to_one, y_axis=True)
        smooth_x = _operator_factor(sx, "smooth", radius, sum_to_one, y_axis=False)
        gaussian = smooth_y[..., :, None] * smooth_x[..., None, :]
        if filter7_form == "impulse":
            base = np.zeros((size, size))
            base[radius, radius] = 1.0
        elif filter7_form == "gaussian":
            base = gaussian
        else:
            raise ValueError(f"filter7_form must be 'impulse' or 'gaussian', got {filter7_form!r}.")
        return base - coefficient * laplacian_5point(gaussian)
    if index not in MODEL_OPERATORS:
        raise ValueError(f"Master key filter index must be 1..8, got {index}.")
    kind_x, kind_y = MODEL_OPERATORS[index]
    factor_x = _operator_factor(sx, kind_x, radius, sum_to_one, y_axis=False)
    factor_y = _operator_factor(sy, kind_y, radius, sum_to_one, y_axis=True)
    return factor_y[..., :, None] * factor_x[..., None, :]


def idealized_filter(
    index: int,
    sigma_x: float,
    sigma_y: float | None = None,
    alpha: float | None = None,
    size: int = 7,
    filter7_form: Filter7Form = "impulse",
    sum_to_one: bool = False,
) -> np.ndarray:
    """Idealized scale-space model h_i of master key filter ``index`` (table B.2).

    1: δ_{y+}T, 2: δ_{x-}T, 3: δ_{y-}T, 4: δ_{x+}T, 5: δ_xT, 6: δ_yT, 8: T(·,·; σx, σy), with y upward and
    the sign convention of Gaussian derivatives (so the learned filters 2 and 3 have the *opposite* sign).
    7: δ - α∇²₅T(σ) (``"impulse"``, ``filteranal``; α defaults to the l2 fit 0.52563) or T - γ∇²₅T(σ)
    (``"gaussian"``, the experiment code; γ defaults to 0.5). T is the 2-D discrete Gaussian
    T(m; σx²) T(n; σy²) restricted to the kernel; differences use reflect borders, ∇²₅ zero padding.

    Args:
        index: filter number 1..8.
        sigma_x: scale along x (the isotropic σ for filter 7).
        sigma_y: scale along y; defaults to ``sigma_x``.
        alpha: α (impulse form) or γ (Gaussian form) of filter 7; ignored for other filters.
        size: odd kernel size.
        filter7_form: ``"impulse"`` or ``"gaussian"``.
        sum_to_one: renormalise the truncated 1-D Gaussians to sum 1 (experiment path) instead of keeping the
            truncated taps (``filteranal`` path).

    Returns:
        Array of shape (size, size).
    """
    return idealized_filter_batch(index, sigma_x, sigma_y, alpha, size, filter7_form, sum_to_one)


def _pixel_coordinates(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """x (per column) and y (per row, upward) coordinates of a ``(..., rows, cols)`` grid, origin centred."""
    rows, cols = shape[-2], shape[-1]
    return np.arange(cols) - (cols - 1) / 2, (rows - 1) / 2 - np.arange(rows)


def _spread_density(h: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    density = np.abs(np.asarray(h, dtype=float))
    return density if weight is None else density * weight


def filter_mean(h: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
    """Spatial mean M(|h|·w) = Σ p |h(p)| w(p) / Σ |h(p)| w(p) with y upward (B.4, pyscsp ``filtermean``).

    Args:
        h: filter(s) of shape (..., k, k).
        weight: optional non-negative weight w of shape (k, k) (or broadcastable); ``None`` means w = 1.

    Returns:
        Array (..., 2) holding (x̄, ȳ).
    """
    density = _spread_density(h, weight)
    x, y = _pixel_coordinates(density.shape)
    total = density.sum(axis=(-2, -1))
    mean_x = (density * x).sum(axis=(-2, -1)) / total
    mean_y = (density * y[:, None]).sum(axis=(-2, -1)) / total
    return np.stack([mean_x, mean_y], axis=-1)


def filter_variance(h: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
    """Spatial covariance V(|h|·w) = Σ p pᵀ |h| w / Σ |h| w - M Mᵀ with y upward (B.4, pyscsp ``variance``).

    Args:
        h: filter(s) of shape (..., k, k).
        weight: optional non-negative weight w (see :func:`filter_mean`).

    Returns:
        Array (..., 2, 2) ordered (x, y).
    """
    density = _spread_density(h, weight)
    x, y = _pixel_coordinates(density.shape)
    total = density.sum(axis=(-2, -1))
    mean = filter_mean(density)
    xx = (density * x**2).sum(axis=(-2, -1)) / total - mean[..., 0] ** 2
    yy = (density * (y**2)[:, None]).sum(axis=(-2, -1)) / total - mean[..., 1] ** 2
    xy = (density * (y[:, None] * x)).sum(axis=(-2, -1)) / total - mean[..., 0] * mean[..., 1]
    return np.stack([np.stack([xx, xy], axis=-1), np.stack([xy, yy], axis=-1)], axis=-2)


def spread_weight(index: int, size: int = 7) -> np.ndarray:
    """Weight w = |model of the same type at σ_ref| that suppresses the periphery in V_w (B.4).

    σ_ref = 1 in both directions for filters 1-6 and 8. For filter 7 the authors' code weights with the
    Gaussian T(σ_ref = 1/√2) (``filteranal.keyfiltertempl(7, ...)`` is the smoothing kernel).
    """
    if index == 7:
        return np.abs(idealized_filter(8, SIGMA_REF_FILTER7, size=size))
    return np.abs(idealized_filter(index, SIGMA_REF, size=size))


def weighted_filter_mean(h: np.ndarray, index: int) -> np.ndarray:
    """M_w = M(|h| · |h_model,index(σ_ref)|), the background-suppressed mean of B.4; shape (..., 2)."""
    return filter_mean(h, spread_weight(index, np.shape(h)[-1]))


def weighted_filter_variance(h: np.ndarray, index: int) -> np.ndarray:
    """V_w = V(|h| · |h_model,index(σ_ref)|), the background-suppressed covariance of B.4; (..., 2, 2)."""
    return filter_variance(h, spread_weight(index, np.shape(h)[-1]))


def parabolic_minimum(grid: np.ndarray, values: np.ndarray) -> float:
    """Position of the minimum of ``values`` sampled on ``grid``, refined by a parabola through 3 samples.

    The parabola is fitted in index space (B.5, as the authors do); at an end of the grid the grid point
    itself is returned.
    """
    i = int(np.argmin(values))
    if i == 0 or i == len(values) - 1:
        return float(grid[i])
    f1, f2, f3 = values[i - 1], values[i], values[i + 1]
    curvature = f1 - 2 * f2 + f3
    if curvature <= 0:
        return float(grid[i])
    step = -(f3 - f1) / (2 * curvature)
    neighbour = grid[i + 1] if step > 0 else grid[i - 1]
    return float(grid[i] + abs(step) * (neighbour - grid[i]))


def monomial_response(h: np.ndarray, direction: Literal["x", "y"]) -> float:
    """Response at the origin of h convolved with the shifted monomial (x - m_x) or (y - m_y) (B.3).

    (h * f)(0) = Σ_p h(p) f(-p) with m = M(|h|), i.e. ``scipy.ndimage.convolve(h, monomial)`` at the centre.
    """
    h = np.asarray(h, dtype=float)
    mean = filter_mean(h)
    x, y = _pixel_coordinates(h.shape)
    if direction == "x":
        monomial = np.broadcast_to(-x - mean[0], h.shape)
    else:
        monomial = np.broadcast_to((-y - mean[1])[:, None], h.shape)
    return float((h * monomial).sum())


def sqrt_det_spread(h: np.ndarray) -> np.ndarray:
    """√det V(|h|), the area-like spread minimised by the DC compensation of B.3; shape (...)."""
    variance = filter_variance(h)
    det = variance[..., 0, 0] * variance[..., 1, 1] - variance[..., 0, 1] * variance[..., 1, 0]
    return np.sqrt(np.maximum(det, 0.0))


def dc_offset_minimizing_spread(h: np.ndarray, samples: int = 401) -> float:
    """Ĉ = argmin_C √det V(|h - C|) (B.3): a grid over [min h, max h], a finer grid, then a parabola.

    Args:
        h: one filter (k, k).
        samples: grid points per stage.
    """
    h = np.asarray(h, dtype=float)
    coarse = np.linspace(h.min(), h.max(), samples)
    i = int(np.argmin(sqrt_det_spread(h - coarse[:, None, None])))
    fine = np.linspace(coarse[max(i - 1, 0)], coarse[min(i + 1, samples - 1)], samples)
    return parabolic_minimum(fine, sqrt_det_spread(h - fine[:, None, None]))


@dataclasses.dataclass(frozen=True)
class FilterNormalization:
    """A learned filter normalised as in B.3: ``normalized = (raw - dc_offset) / response``.

    Attributes:
        normalized: the normalised filter (k, k).
        response: response used as divisor (monomial response for filters 1-6, Σ(h - Ĉ) for 7-8).
        dc_offset: Ĉ removed before dividing (0 for filters 1-6).
    """

    normalized: np.ndarray
    response: float
    dc_offset: float


# B.3: direction of the differentiating operator of models 1-6.
DIFFERENTIATED_DIRECTION: dict[int, Literal["x", "y"]] = {1: "y", 2: "x", 3: "y", 4: "x", 5: "x", 6: "y"}


def normalize_learned_filter(h: np.ndarray, index: int) -> FilterNormalization:
    """Normalise a learned filter to the derivative/smoothing normalisation of model ``index`` (B.3).

    Filters 1-6: divide by the response to the shifted linear monomial in the differentiated direction, so
    the response to x (or y) is 1 as for the models (this also flips filters 2 and 3 to the model sign).
    Filters 7-8: subtract the DC offset Ĉ minimising √det V(|h - C|), then divide by the sum (the response
    to the constant 1), so the result sums to 1.

    Raises:
        AnalysisError: the normalising response is zero (e.g. a constant or dead filter).
    """
    h = np.asarray(h, dtype=float)
    magnitude = float(np.abs(h).sum())
    if not magnitude > 0:
        raise AnalysisError("This filter is all zeros and has no scale to fit; skip it or pick another one.")
    if index in DIFFERENTIATED_DIRECTION:
        offset = 0.0
        response = monomial_response(h, DIFFERENTIATED_DIRECTION[index])
    elif index in (7, 8):
        offset = dc_offset_minimizing_spread(h)
        response = float((h - offset).sum())
    else:
        raise ValueError(f"Master key filter index must be 1..8, got {index}.")
    if not abs(response) > NORMALIZATION_EPS * magnitude:
        raise AnalysisError(
            f"This filter has no response to the {'constant' if index in (7, 8) else 'linear ramp'} that "
            f"normalises model {index} (it is zero, constant or of another type); fit it as another model."
        )
    return FilterNormalization((h - offset) / response, response, offset)


def centred_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """cos(a - ā, b - b̄) over the last two axes (broadcasting); 0 where either side is constant."""
    a_c = np.asarray(a, dtype=float)
    b_c = np.asarray(b, dtype=float)
    a_c = a_c - a_c.mean(axis=(-2, -1), keepdims=True)
    b_c = b_c - b_c.mean(axis=(-2, -1), keepdims=True)
    norms = np.sqrt((a_c**2).sum(axis=(-2, -1)) * (b_c**2).sum(axis=(-2, -1)))
    dot = (a_c * b_c).sum(axis=(-2, -1))
    return np.divide(dot, norms, out=np.zeros_like(dot), where=norms > 0)


@dataclasses.dataclass(frozen=True)
class AffineTemplateFit(Result):
    """Best affine fit y ≈ a·x_k + b of each filter over centred unit templates x_k (B.6, A.3 step 3).

    Attributes:
        assignment: (N,) index of the chosen template, 0-based into the template stack.
        amplitude: (N,) a = ⟨y, x_k*⟩ (negative when the filter has the template's opposite sign).
        offset: (N,) b = mean(y).
        cosine: (N,) centred cosine cos(y - ȳ, x_k*), signed.
    """

    assignment: np.ndarray
    amplitude: np.ndarray
    offset: np.ndarray
    cosine: np.ndarray

    def replaced(self, templates: np.ndarray) -> np.ndarray:
        """Replacement filters a·x_k* + b, shape (N, k, k), for the same templates used in the fit."""
        units = centred_unit_templates(templates)
        return self.amplitude[:, None, None] * units[self.assignment] + self.offset[:, None, None]


def centred_unit_templates(templates: np.ndarray) -> np.ndarray:
    """Templates with their mean removed and unit L2 norm, x_k = (m_k - m̄_k) / ‖m_k - m̄_k‖ (B.6)."""
    centred = np.asarray(templates, dtype=float)
    centred = centred - centred.mean(axis=(-2, -1), keepdims=True)
    return centred / np.sqrt((centred**2).sum(axis=(-2, -1), keepdims=True))


def affine_fit_to_templates(filters: np.ndarray, templates: np.ndarray) -> AffineTemplateFit:
    """Assign each filter to a template allowing any sign, scale and DC offset (the authors' swap rule, B.6).

    With centred unit templates x_k: k* = argmax_k |⟨y - ȳ, x_k⟩|, a = ⟨y, x_k*⟩, b = mean(y); this minimises
    ‖y - (a x_k + b)‖₂ over k, a and b.

    Args:
        filters: (N, k, k) learned filters (numpy array or CPU tensor).
        templates: (T, k, k) model templates, e.g. :func:`fl_core.masterkeys.fitting.idealized_templates`.
    """
    y = np.asarray(filters, dtype=float)
    if y.ndim != 3 or y.shape[-2:] != np.shape(templates)[-2:]:
        raise ValueError(
            f"Filters {y.shape} and templates {np.shape(templates)} must be (N, k, k) and (T, k, k)."
        )
    flat_templates = centred_unit_templates(templates).reshape(len(templates), -1)
    flat = y.reshape(len(y), -1)
    offset = flat.mean(axis=1)
    centred = flat - offset[:, None]
    projections = centred @ flat_templates.T  # ⟨y - ȳ, x_k⟩ = ⟨y, x_k⟩ since x_k is centred
    assignment = np.argmax(np.abs(projections), axis=1)
    amplitude = np.take_along_axis(projections, assignment[:, None], axis=1)[:, 0]
    norms = np.linalg.norm(centred, axis=1)
    cosine = np.divide(amplitude, norms, out=np.zeros_like(amplitude), where=norms > 0)
    return AffineTemplateFit(assignment, amplitude, offset, cosine)


def spread_measures_frame(filters: dict[int, np.ndarray]) -> pd.DataFrame:
    """Spatial spread of learned filters (B.4), one row per master key: plain M(|h|), V(|h|) of the raw filter and
    the weighted M_w, V_w of the B.3-normalised filter (weight |model at σ_ref|), y upward.

    Args:
        filters: model type (1..8) -> (k, k) learned filter.
    """
    rows = []
    for index, h in sorted(filters.items()):
        normalized = normalize_learned_filter(h, index).normalized
        mean, variance = filter_mean(h), filter_variance(h)
        mean_w, variance_w = weighted_filter_mean(normalized, index), weighted_filter_variance(normalized, index)
        rows.append({"index": index, "M_x": mean[0], "M_y": mean[1], "V_xx": variance[0, 0], "V_yy": variance[1, 1],
                     "V_xy": variance[0, 1], "Mw_x": mean_w[0], "Mw_y": mean_w[1], "Vw_xx": variance_w[0, 0],
                     "Vw_yy": variance_w[1, 1], "Vw_xy": variance_w[0, 1]})
    return pd.DataFrame(rows)

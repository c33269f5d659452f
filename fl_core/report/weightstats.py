"""Per-layer weight statistics of every convolution, from the weights alone: filter norms, dead filters, duplicate
filters and non-finite values.

* Norm of a filter: ‖w_k‖₂ of its flattened weights (``in/groups · kh · kw`` values).
* Dead filter: ‖w_k‖ ≤ t · max_j ‖w_j‖ of its layer (all-zero or pruned; t = ``dead_tolerance``, default 1e-6).
* Duplicate filter (*proposed*): a filter its live peers in the same layer reconstruct by least squares to
  R²_k = 1 − ‖w_k − Σ_{j≠k} β_j w_j‖² / ‖w_k‖² ≥ ``duplicate_r2`` (default 0.999). The leave-one-out residuals of
  all K filters come from one Gram inverse: with G = WWᵀ + εI, ‖w_k − W_{−k}ᵀβ‖² (+ a ridge term of order ε) =
  1 / (G⁻¹)_kk. When the K − 1 peers have at least as many members as a filter has values (K − 1 ≥ D), they span
  the whole filter space and every filter is reconstructed exactly, so R² says nothing there and is not reported.
* Copies: filters whose cosine |⟨w_k, w_j⟩| / (‖w_k‖‖w_j‖) with a single peer is ≥ ``duplicate_r2`` (the
  normalised Gram matrix, streamed in blocks of rows, so a layer of 30,000 filters never holds its 7 GB; defined in
  every layer).

Both are bounded by the analysis budget (:func:`fl_core.compute.budgets.check_filter_gram`) before they are computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import pandas as pd
import torch

from fl_core.arguments import ImagesLike, ModelLike, as_model, as_settings, weights_only_data
from fl_core.compute.budgets import check_filter_gram
from fl_core.compute.device import DeviceLike, resolve_device, statistics_dtype
from fl_core.compute.progress import ProgressLike, progress_callback, report
from fl_core.io.layers import ConvLayer, conv_inventory
from fl_core.report.settings import WeightOverrides, WeightSettings
from fl_core.results import Result, with_model_columns

if TYPE_CHECKING:
    from typing_extensions import Unpack

DEAD_TOLERANCE = WeightSettings.dead_tolerance
DUPLICATE_R2 = WeightSettings.duplicate_r2
RIDGE = 1e-10
"""ε of the Gram inverse, relative to the mean squared filter norm: exact duplicates stay invertible."""
GRAM_BLOCK_VALUES = 2**22
"""Gram-matrix entries computed at once by :func:`max_peer_cosine` (32 MiB in float64)."""


def peer_reconstruction_r2(filters: torch.Tensor) -> torch.Tensor:
    """R²_k of each filter (K, ...) reconstructed by least squares from the other K − 1 (module docstring).

    Vectorised: one (K, K) Gram matrix and its inverse, no loop over filters or pairs. Every filter must be live
    (non-zero); callers drop dead ones first.
    """
    w = filters.reshape(len(filters), -1).double()
    gram = w @ w.T
    squared_norms = gram.diagonal().clone()
    ridge = RIDGE * squared_norms.mean()
    precision = torch.linalg.inv(gram + ridge * torch.eye(len(w), dtype=w.dtype, device=w.device))
    residual = (1.0 / precision.diagonal() - ridge).clamp_min(0)
    return 1.0 - residual / squared_norms


def max_peer_cosine(filters: torch.Tensor, block_values: int = GRAM_BLOCK_VALUES) -> torch.Tensor:
    """max_{j≠k} |cos(w_k, w_j)| of each live filter (K, ...), from the normalised Gram matrix computed in blocks
    of rows (at most ``block_values`` entries at once; the same maxima as the whole matrix)."""
    w = filters.reshape(len(filters), -1).double()
    units = w / w.norm(dim=1, keepdim=True)
    rows = max(1, block_values // len(units))
    best = torch.empty(len(units), dtype=units.dtype, device=units.device)
    for start in range(0, len(units), rows):
        cosine = (units[start:start + rows] @ units.T).abs()
        cosine[:, start:start + rows].fill_diagonal_(0)
        best[start:start + rows] = cosine.max(dim=1).values
    return best


@dataclass(frozen=True)
class LayerWeightStatistics(Result):
    """Statistics of one convolution's filters.

    Attributes:
        layer, kind: the convolution.
        filters: K; values_per_filter: D.
        norm_mean, norm_sd, norm_min, norm_max: of ‖w_k‖ (NaN-free layers only; NaN otherwise).
        abs_max: largest |weight|.
        non_finite: NaN or infinite weights.
        dead: filters with ‖w_k‖ ≤ ``dead_tolerance`` · max‖w‖.
        duplicates: live filters reconstructed by their peers to R² ≥ ``duplicate_r2``; ``None`` where the peers span
            the filter space (K − 1 ≥ D) or the weights are not finite.
        max_peer_r2: the largest such R² (``None`` likewise).
        copies: live filters with |cos| ≥ ``duplicate_r2`` to a single peer.
        duplicate_indices: indices of the duplicate filters (empty when not reported).
    """

    layer: str
    kind: str
    filters: int
    values_per_filter: int
    norm_mean: float
    norm_sd: float
    norm_min: float
    norm_max: float
    abs_max: float
    non_finite: int
    dead: int
    duplicates: int | None
    max_peer_r2: float | None
    copies: int
    duplicate_indices: tuple[int, ...]


def layer_weight_statistics(weight: torch.Tensor, layer: ConvLayer, settings: WeightSettings | None = None,
                            device: torch.device | None = None) -> LayerWeightStatistics:
    """Norms, dead, duplicate and copied filters and non-finite values of one (K, C/g, kh, kw) weight (thresholds:
    ``settings``, default :class:`WeightSettings`'s; on ``device``, default the CPU, in float64 where it has it)."""
    settings = settings or WeightSettings()
    device = device or torch.device("cpu")
    w = weight.detach().to(device=device, dtype=statistics_dtype(device)).reshape(len(weight), -1)
    count, dim = w.shape
    non_finite = int((~torch.isfinite(w)).sum())
    nan = float("nan")
    if non_finite:
        return LayerWeightStatistics(layer.name, layer.kind, count, dim, nan, nan, nan, nan, nan, non_finite, 0,
                                     None, None, 0, ())
    norms = w.norm(dim=1)
    live = norms > settings.dead_tolerance * norms.max()
    index = torch.nonzero(live).squeeze(1)
    check_filter_gram(len(index), dim, inverse=1 < len(index) <= dim, what=f"layer {layer.name}")
    copies, duplicates, best, duplicate_indices = 0, None, None, ()
    if len(index) >= 2:
        copies = int((max_peer_cosine(w[index]) >= settings.duplicate_r2).sum())
        if len(index) - 1 < dim:
            r2 = peer_reconstruction_r2(w[index])
            found = index[r2 >= settings.duplicate_r2]
            duplicates, best, duplicate_indices = len(found), float(r2.max()), tuple(int(i) for i in found)
    return LayerWeightStatistics(
        layer=layer.name, kind=layer.kind, filters=count, values_per_filter=dim, norm_mean=float(norms.mean()),
        norm_sd=float(norms.std()) if count > 1 else 0.0, norm_min=float(norms.min()), norm_max=float(norms.max()),
        abs_max=float(w.abs().max()), non_finite=0, dead=int((~live).sum()), duplicates=duplicates,
        max_peer_r2=best, copies=copies, duplicate_indices=duplicate_indices)


@dataclass(frozen=True)
class WeightStatistics(Result):
    """Weight statistics of every convolution of a model, in forward order.

    Attributes:
        spec, label: the model.
        layers: one :class:`LayerWeightStatistics` per convolution.
        dead_tolerance, duplicate_r2: the thresholds used.
    """

    spec: str
    label: str
    layers: tuple[LayerWeightStatistics, ...]
    dead_tolerance: float = DEAD_TOLERANCE
    duplicate_r2: float = DUPLICATE_R2

    _figures: ClassVar[dict[str, str]] = {"norms": "fl_core.report.plots:weight_norms_figure"}

    def to_frame(self) -> pd.DataFrame:
        """One row per convolution, led by the model's label and spec."""
        frame = pd.DataFrame([{k: v for k, v in lay.to_dict().items() if k != "duplicate_indices"}
                              for lay in self.layers])
        return with_model_columns(frame.astype({"duplicates": float, "max_peer_r2": float}), self.label, self.spec)

    @property
    def totals(self) -> dict[str, int]:
        """Dead, duplicate and copied filters and non-finite weights summed over layers."""
        return {"dead": sum(lay.dead for lay in self.layers),
                "duplicates": sum(lay.duplicates or 0 for lay in self.layers),
                "copies": sum(lay.copies for lay in self.layers),
                "non_finite": sum(lay.non_finite for lay in self.layers)}


def weight_statistics(model: ModelLike, data: ImagesLike | None = None, settings: WeightSettings | None = None, *,
                      device: DeviceLike = None, progress: ProgressLike = None,
                      **setting_overrides: Unpack[WeightOverrides]) -> WeightStatistics:
    """:func:`layer_weight_statistics` of every convolution of a model (weights only: any architecture).

    Args:
        model: a spec string, a loaded model or an ``nn.Module``.
        data: not read: the weights are the data (given, it is ignored with a notice, as every weights-only family
            does; the argument keeps the family's call shape).
        settings: the dead and duplicate thresholds; ``setting_overrides`` replace fields (``duplicate_r2=0.99``).
        **setting_overrides: fields of ``settings`` to replace, by name.
        device: where the norms and Gram matrices are computed (float64 where the device has it).
        progress: ``progress(fraction, message)``; ``None``: a bar where a person is watching; ``False``: none.
    """
    weights_only_data(data, "weight_statistics")
    settings = as_settings(WeightSettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    loaded = as_model(model)
    layers = conv_inventory(loaded)
    described = []
    for done, lay in enumerate(layers):
        report(progress, done / max(1, len(layers)), f"weight statistics of {lay.name}")
        described.append(layer_weight_statistics(loaded.state_dict[lay.weight_key], lay, settings, device))
    report(progress, 1.0, f"weight statistics of {len(layers)} convolutions")
    return WeightStatistics(spec=loaded.spec, label=loaded.label, layers=tuple(described),
                            dead_tolerance=settings.dead_tolerance, duplicate_r2=settings.duplicate_r2)

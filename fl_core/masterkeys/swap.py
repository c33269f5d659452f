"""Swap: replace a model's depthwise filters by idealized master-key models, cluster centroids or random filters.

Replacements, by name (the same names appear in results, on the command line and on the page):

* ``A``, ``B``, ``C1``, ``C2``, ``D1``, ``D2``: the idealized model of the filter's master key for that fitting
  method, y ← a·x_k + b, with x_k the centred unit template at the filter's size, k = argmax_k |⟨y - ȳ, x_k⟩|,
  a = ⟨y, x_k⟩, b = mean(y) (the authors' rule, docs/methods.md B.6; σ fitted to the published filters, B.5).
* ``centroid``: the same affine rule with the filter's own cluster centroids (sign-invariant clusters of the
  swapped filters of each kernel size, :func:`fl_core.masterkeys.kmeans.cluster_filters`).
* ``random``: a baseline, a Gaussian random filter rescaled to the same L2 norm ‖y‖.
* ``keep``: the control, every filter unchanged.
* ``zero``: the lesion control, every chosen filter zero (with ``layers=[name]``: one depthwise layer removed, to
  compare with swapping that layer alone).

Swaps never touch the (shared, cached) model: :func:`swapped_model` returns a deep copy, and :func:`parameter_patch`
gives the new tensors for evaluating many swaps on one private copy (:mod:`fl_core.masterkeys.rescore`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from torch import nn

from fl_core.arguments import ModelLike
from fl_core.compute.device import DeviceLike
from fl_core.io.models import LoadedModel
from fl_core.masterkeys.depthwise import DepthwiseBank, DepthwiseLayer, constant_filters, depthwise_bank
from fl_core.masterkeys.fitting import idealized_templates
from fl_core.masterkeys.kmeans import cluster_filters
from fl_core.masterkeys.scalespace import affine_fit_to_templates, centred_cosine
from fl_core.masterkeys.settings import DEFAULT_K, REPLACEMENTS
from fl_core.results import Result


@dataclass(frozen=True)
class LayerSwap(Result):
    """How much one layer changed.

    Attributes:
        layer: module name.
        stage: stage index.
        n_filters: filters replaced.
        relative_error: ‖W - Ŵ‖_F / ‖W‖_F over the layer's filters.
        mean_abs_cosine: mean over the non-constant filters of |cos(y - ȳ, ŷ - mean ŷ)| (1 = same shape up to
            sign and scale).
    """

    layer: str
    stage: int
    n_filters: int
    relative_error: float
    mean_abs_cosine: float


@dataclass(frozen=True)
class FilterSwap(Result):
    """One replacement of a model's depthwise filters (module docstring).

    Attributes:
        replacement: its name (a key of :data:`REPLACEMENTS`).
        description: what it does, in words.
        seed: seed of the random filters or of the centroid clustering.
        k: clusters per kernel size (``centroid`` only).
        layers: per-layer reconstruction error.
        relative_error: ‖W - Ŵ‖_F / ‖W‖_F over all swapped filters.
        weights: weight key -> new (n_filters, k, k) float32 filters (not serialised).
    """

    replacement: str
    description: str
    seed: int
    k: int | None
    layers: tuple[LayerSwap, ...]
    relative_error: float
    weights: Mapping[str, torch.Tensor]

    _private_fields = ("weights",)

    _figures: ClassVar[dict[str, str]] = {"reconstruction": "fl_core.masterkeys.plots:reconstruction_figure"}

    def figure_inputs(self, kind: str) -> tuple:
        return ([self],)

    def to_frame(self) -> pd.DataFrame:
        """One row per swapped layer."""
        return pd.DataFrame([{"replacement": self.replacement, **layer.to_dict()} for layer in self.layers])


def _replaced_filters(filters: torch.Tensor, replacement: str, k: int, seed: int,
                      device: str | torch.device | None) -> np.ndarray:
    """The replacements of (N, ks, ks) filters of one kernel size, float64."""
    y = filters.double().numpy()
    if replacement == "keep":
        return y.copy()
    if replacement == "zero":
        return np.zeros_like(y)
    if replacement == "random":
        noise = torch.randn(filters.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).numpy()
        norms = np.linalg.norm(y.reshape(len(y), -1), axis=1) / np.linalg.norm(noise.reshape(len(y), -1), axis=1)
        return noise * norms[:, None, None]
    if replacement == "centroid":
        templates = cluster_filters(filters, min(k, len(filters)), seed=seed, device=device).centroids
    else:
        templates = idealized_templates(replacement, filters.shape[-1])
    return affine_fit_to_templates(y, templates).replaced(templates)


def _layer_errors(layers: Sequence[DepthwiseLayer], original: np.ndarray, replaced: np.ndarray) -> list[LayerSwap]:
    bounds = np.cumsum([0] + [lay.n_filters for lay in layers])
    cosine = np.abs(centred_cosine(original, replaced))
    shaped = ~constant_filters(torch.from_numpy(original)).numpy()
    rows = []
    for lay, start, stop in zip(layers, bounds[:-1], bounds[1:]):
        norm = np.linalg.norm(original[start:stop])
        error = np.linalg.norm(original[start:stop] - replaced[start:stop]) / norm if norm > 0 else 0.0
        rows.append(LayerSwap(layer=lay.name, stage=lay.stage, n_filters=lay.n_filters, relative_error=float(error),
                              mean_abs_cosine=float(cosine[start:stop][shaped[start:stop]].mean())
                              if shaped[start:stop].any() else float("nan")))
    return rows


def swap_filters(bank: DepthwiseBank | ModelLike, replacement: str, *, layers: Sequence[str] | None = None,
                 stages: Sequence[int] | None = None, k: int = DEFAULT_K, seed: int = 0,
                 device: DeviceLike = None) -> FilterSwap:
    """Replace the depthwise filters of the chosen layers (default: all) of every kernel size.

    Args:
        bank: the model's depthwise filters (:func:`fl_core.masterkeys.depthwise.depthwise_bank`), or the model.
        replacement: a key of :data:`REPLACEMENTS`.
        layers: restrict the swap to these layer names.
        stages: restrict the swap to these stage indices.
        k: clusters per kernel size for ``centroid``.
        seed: seed of ``random`` and ``centroid``.
        device: where to cluster (``centroid``).

    Raises:
        ValueError: unknown replacement. AnalysisError: no layer chosen.
    """
    if replacement not in REPLACEMENTS:
        raise ValueError(f"Unknown replacement {replacement!r}; choose one of {', '.join(REPLACEMENTS)}.")
    bank = bank if isinstance(bank, DepthwiseBank) else depthwise_bank(bank)
    chosen = bank.chosen(layers, stages)
    weights: dict[str, torch.Tensor] = {}
    swaps: list[LayerSwap] = []
    squared_error = squared_norm = 0.0
    for size in sorted({lay.kernel_size for lay in chosen}):
        group = [lay for lay in chosen if lay.kernel_size == size]
        filters, _ = bank.filters(group)
        replaced = _replaced_filters(filters, replacement, k, seed, device)
        original = filters.double().numpy()
        swaps += _layer_errors(group, original, replaced)
        squared_error += float(((original - replaced) ** 2).sum())
        squared_norm += float((original**2).sum())
        for lay, part in zip(group, np.split(replaced, np.cumsum([g.n_filters for g in group])[:-1])):
            weights[lay.weight_key] = torch.from_numpy(part).float()
    order = {lay.name: i for i, lay in enumerate(chosen)}
    swaps.sort(key=lambda s: order[s.layer])
    return FilterSwap(replacement=replacement, description=REPLACEMENTS[replacement], seed=int(seed),
                      k=k if replacement == "centroid" else None, layers=tuple(swaps),
                      relative_error=float(np.sqrt(squared_error / squared_norm)) if squared_norm > 0 else 0.0,
                      weights=weights)


def parameter_patch(model: nn.Module, swap: FilterSwap) -> dict[str, torch.Tensor]:
    """Parameter name -> new tensor in the parameter's shape, dtype and device (for ``param.copy_``)."""
    patch = {}
    for key, filters in swap.weights.items():
        parameter = model.get_parameter(key)
        patch[key] = filters.reshape(parameter.shape).to(dtype=parameter.dtype, device=parameter.device)
    return patch


def swapped_model(loaded: LoadedModel, swap: FilterSwap) -> nn.Module:
    """A deep copy of the model with the swapped filters (the cached model is never changed).

    Raises:
        ModelSpecError: the model is weights-only (no network to run).
    """
    model = loaded.copy_model()
    with torch.no_grad():
        for key, tensor in parameter_patch(model, swap).items():
            model.get_parameter(key).copy_(tensor)
    return model


"""Depthwise filters of any model or weights-only file, per layer and stage (input of the master-key analyses).

A depthwise convolution has ``groups == in_channels`` and one input channel per filter (weight ``(C·m, 1, k, k)``).
Only square, odd kernels of at least 3×3 are analysed (the scale-space models need a centre pixel); others are
listed in :attr:`DepthwiseBank.skipped`.

**Stage** (*proposed* definition, the papers count stages by architecture): for a full model, the rank of the
layer's output feature-map resolution in a forward pass of one image (stage 0 = the highest resolution), which is
architecture-agnostic; for a weights-only file, the ``N`` of a ``stages.N`` / ``layerN`` / ``blocks.N`` key
(timm and ConvNeXt checkpoints), else runs of consecutive layers of equal width.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from fl_core.arguments import ModelLike, as_model
from fl_core.errors import AnalysisError
from fl_core.io.layers import conv_inventory
from fl_core.io.models import LoadedModel

STAGE_NAME_PATTERN = re.compile(r"(?:^|\.)(?:stages?\.|layer|blocks\.)(\d+)(?:\.|$)")
CONSTANT_TOLERANCE = 1e-6  # a filter whose centred norm is below this fraction of its norm is "constant"


@dataclass(frozen=True)
class DepthwiseLayer:
    """One depthwise convolution.

    Attributes:
        name: module name (or the weight key without ``.weight`` for weights-only files).
        weight_key: state-dict key of its weight.
        kernel_size: k of its k×k filters.
        n_filters: number of filters (output channels).
        stage: stage index (module docstring).
        resolution: side of its output feature map in a forward pass at the model's input size; ``None`` for
            weights-only files.
    """

    name: str
    weight_key: str
    kernel_size: int
    n_filters: int
    stage: int
    resolution: int | None = None

    @property
    def stage_label(self) -> str:
        return f"stage {self.stage}" + (f" ({self.resolution}×{self.resolution})" if self.resolution else "")


@dataclass(frozen=True, eq=False)
class DepthwiseBank:
    """All analysable depthwise filters of a model, by layer in forward order.

    Attributes:
        spec: model spec.
        label: display name.
        layers: the layers (forward order for full models, file order for weights-only files).
        weights: weight key -> (n_filters, k, k) float32 CPU copy (never the cached model's tensor).
        skipped: depthwise layers left out, with the reason.
    """

    spec: str
    label: str
    layers: tuple[DepthwiseLayer, ...]
    weights: Mapping[str, torch.Tensor]
    skipped: tuple[str, ...] = ()

    @property
    def kernel_sizes(self) -> dict[int, int]:
        """Number of filters per kernel size, most frequent first."""
        counts: dict[int, int] = {}
        for layer in self.layers:
            counts[layer.kernel_size] = counts.get(layer.kernel_size, 0) + layer.n_filters
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    @property
    def default_kernel_size(self) -> int:
        """The kernel size holding the most filters."""
        return next(iter(self.kernel_sizes))

    @property
    def stages(self) -> dict[int, str]:
        """Stage index -> label, in order."""
        return {layer.stage: layer.stage_label for layer in sorted(self.layers, key=lambda lay: lay.stage)}

    def chosen(self, layers: Sequence[str] | None = None, stages: Sequence[int] | None = None
               ) -> tuple[DepthwiseLayer, ...]:
        """Layers of any kernel size, optionally restricted by name and stage.

        Raises:
            AnalysisError: a named layer does not exist, or nothing is left.
        """
        if layers:
            unknown = set(layers) - {lay.name for lay in self.layers}
            if unknown:
                raise AnalysisError(f"{self.label} has no depthwise layer {', '.join(sorted(unknown))}. Depthwise "
                                    f"layers: {', '.join(lay.name for lay in self.layers[:8])}"
                                    f"{' …' if len(self.layers) > 8 else ''}")
        chosen = tuple(lay for lay in self.layers
                       if (not layers or lay.name in layers) and (stages is None or lay.stage in stages))
        if not chosen:
            raise AnalysisError(f"No depthwise layer of {self.label} is in the chosen layers and stages "
                                f"(stages: {', '.join(self.stages.values())}).")
        return chosen

    def select(self, kernel_size: int | None = None, layers: Sequence[str] | None = None,
               stages: Sequence[int] | None = None) -> tuple[DepthwiseLayer, ...]:
        """Layers of one kernel size (default: the most frequent), optionally restricted by name and stage.

        Raises:
            AnalysisError: a named layer does not exist, or nothing is left.
        """
        size = kernel_size or self.default_kernel_size
        chosen = tuple(lay for lay in self.chosen(layers, stages) if lay.kernel_size == size)
        if not chosen:
            sizes = ", ".join(f"{k}×{k}" for k in self.kernel_sizes)
            raise AnalysisError(f"No {size}×{size} depthwise filters in {self.label} for this choice of layers and "
                                f"stages (kernel sizes present: {sizes}).")
        return chosen

    def filters(self, layers: Sequence[DepthwiseLayer]) -> tuple[torch.Tensor, np.ndarray]:
        """The filters of ``layers`` stacked: ``(N, k, k)`` float32 and the layer index (into ``layers``) of each."""
        stacked = torch.cat([self.weights[lay.weight_key] for lay in layers])
        layer_index = np.repeat(np.arange(len(layers)), [lay.n_filters for lay in layers])
        return stacked, layer_index


def depthwise_bank(model: ModelLike) -> DepthwiseBank:
    """Extract every depthwise filter of a model or weights-only file (a spec string, :class:`LoadedModel` or
    ``nn.Module``; module docstring).

    Args:
        model: the model (a spec string, :class:`LoadedModel` or ``nn.Module``) or weights-only file.

    Raises:
        AnalysisError: the model has no depthwise convolution with a square odd kernel ≥ 3.
    """
    loaded = as_model(model)
    found = _model_depthwise(loaded.model) if loaded.model is not None else _weights_depthwise(loaded)
    probed = [lay for lay in conv_inventory(loaded) if lay.output_size is not None]
    resolutions = {lay.name: lay.output_size for lay in probed}
    order = {lay.name: i for i, lay in enumerate(probed)}
    found.sort(key=lambda item: order.get(item[0], len(order)))
    layers, weights, skipped = [], {}, []
    for name, weight in found:
        kh, kw = weight.shape[-2:]
        if kh != kw or kh < 3 or kh % 2 == 0:
            skipped.append(f"{name} ({kh}×{kw}: only square odd kernels ≥ 3×3 have a centre)")
            continue
        key = f"{name}.weight"
        weights[key] = weight.detach().to(torch.float32, copy=True).cpu().reshape(-1, kh, kw)
        layers.append(DepthwiseLayer(name=name, weight_key=key, kernel_size=int(kh), n_filters=weights[key].shape[0],
                                     stage=0, resolution=resolutions.get(name)))
    if not layers:
        raise AnalysisError(f"{loaded.label} has no depthwise convolution (groups = channels) with a square odd "
                            "kernel, so there are no master-key filters to analyse. Pick a depthwise-separable "
                            "model: ConvNeXt, MobileNet, EfficientNet (e.g. timm:convnext_atto).")
    staged = _assign_stages(layers)
    return DepthwiseBank(spec=loaded.spec, label=loaded.label, layers=staged, weights=weights, skipped=tuple(skipped))


def _model_depthwise(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(name, weight) of the depthwise ``nn.Conv2d`` modules (groups = input channels > 1), registration order."""
    return [(name, module.weight) for name, module in model.named_modules()
            if isinstance(module, nn.Conv2d) and module.groups > 1 and module.groups == module.in_channels]


def _weights_depthwise(loaded: LoadedModel) -> list[tuple[str, torch.Tensor]]:
    return [(lay.name, loaded.state_dict[lay.weight_key]) for lay in conv_inventory(loaded) if lay.kind == "depthwise"]


def _assign_stages(layers: list[DepthwiseLayer]) -> tuple[DepthwiseLayer, ...]:
    """Stage per layer: resolution rank, else ``stages.N``-style names, else runs of equal width; forward order."""
    if all(lay.resolution is not None for lay in layers):
        levels = sorted({lay.resolution for lay in layers}, reverse=True)
        stages = [levels.index(lay.resolution) for lay in layers]
    elif all(STAGE_NAME_PATTERN.search(lay.name) for lay in layers):
        numbers = [int(STAGE_NAME_PATTERN.search(lay.name).group(1)) for lay in layers]
        ranks = sorted(set(numbers))
        stages = [ranks.index(n) for n in numbers]
    else:
        widths = [lay.n_filters for lay in layers]
        stages = list(np.cumsum([0] + [int(a != b) for a, b in itertools.pairwise(widths)]))
    staged = [DepthwiseLayer(lay.name, lay.weight_key, lay.kernel_size, lay.n_filters, int(stage), lay.resolution)
              for lay, stage in zip(layers, stages)]
    return tuple(staged)


def constant_filters(filters: torch.Tensor) -> torch.Tensor:
    """Mask (N,) of filters with no shape: ‖y - ȳ‖ ≤ 1e-6 ‖y‖ (constant or all-zero, e.g. pruned)."""
    flat = filters.reshape(len(filters), -1).double()
    centred = flat - flat.mean(dim=1, keepdim=True)
    return centred.norm(dim=1) <= CONSTANT_TOLERANCE * flat.norm(dim=1)


def layer_statistics(bank: DepthwiseBank, layers: Sequence[DepthwiseLayer] | None = None) -> pd.DataFrame:
    """Per-layer statistics of the filters (float64).

    Columns: ``layer``, ``stage``, ``resolution``, ``kernel``, ``filters``, ``norm_mean`` and ``norm_sd`` (L2 norm
    ‖y‖), ``dc_share`` (mean of k²ȳ²/‖y‖², the share of a filter's energy in its mean), ``centre_share`` (mean of
    y_c²/‖y‖², the share in the centre tap), ``constant`` (filters with no shape).
    """
    rows = []
    for layer in layers or bank.layers:
        weight = bank.weights[layer.weight_key].double().reshape(layer.n_filters, -1)
        energy = (weight**2).sum(dim=1)
        safe = torch.where(energy > 0, energy, torch.ones_like(energy))
        centre = weight[:, weight.shape[1] // 2]
        norms = energy.sqrt()
        rows.append({"layer": layer.name, "stage": layer.stage, "resolution": layer.resolution,
                     "kernel": layer.kernel_size, "filters": layer.n_filters, "norm_mean": float(norms.mean()),
                     "norm_sd": float(norms.std()) if layer.n_filters > 1 else 0.0,
                     "dc_share": float((weight.mean(dim=1) ** 2 * weight.shape[1] / safe).mean()),
                     "centre_share": float((centre**2 / safe).mean()),
                     "constant": int(constant_filters(bank.weights[layer.weight_key]).sum())})
    return pd.DataFrame(rows)

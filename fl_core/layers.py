"""Layer inventory: every convolution with its kind, and access to a layer's weights and inputs.

Kinds: ``first`` (the convolution that sees the image), ``depthwise`` (groups == in == out channels),
``pointwise`` (1×1, groups 1), ``grouped`` and ``regular``. For weights-only files the inventory lists the 4-D
tensors of the state dict; shapes tell the kind except for grouping, which a weight shape alone cannot show
beyond ``in/groups == 1`` (depthwise).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from fl_core.errors import AnalysisError
from fl_core.models import LoadedModel


@dataclass(frozen=True)
class ConvLayer:
    """One convolution: its name (module name, or the weight key for weights-only files) and geometry."""

    name: str
    kind: str
    out_channels: int
    in_channels: int
    kernel_size: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    weight_key: str = ""

    @property
    def patch_dim(self) -> int:
        """Dimension D of one filter (= one input patch): ``in/groups · kh · kw``."""
        return self.in_channels // self.groups * self.kernel_size[0] * self.kernel_size[1]


def conv_kind(out_channels: int, in_per_group: int, groups: int, kernel: tuple[int, int]) -> str:
    """Classify a convolution from its geometry."""
    if groups > 1 and in_per_group == 1 and out_channels % groups == 0:
        return "depthwise"
    if kernel == (1, 1) and groups == 1:
        return "pointwise"
    return "grouped" if groups > 1 else "regular"


def _pair(value: int | tuple[int, ...]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def conv_inventory(loaded: LoadedModel) -> list[ConvLayer]:
    """All convolutions of a model in forward order (first conv first), or the 4-D tensors of a weights-only file."""
    if loaded.model is None:
        return _weights_inventory(loaded.state_dict)
    first = first_conv_name(loaded)
    layers = []
    for name, module in _forward_ordered_convs(loaded):
        kernel = _pair(module.kernel_size)
        kind = "first" if name == first else conv_kind(module.out_channels, module.in_channels // module.groups,
                                                       module.groups, kernel)
        layers.append(ConvLayer(name=name, kind=kind, out_channels=module.out_channels,
                                in_channels=module.in_channels, kernel_size=kernel, stride=_pair(module.stride),
                                padding=_pair(module.padding) if not isinstance(module.padding, str) else (-1, -1),
                                dilation=_pair(module.dilation), groups=module.groups, weight_key=f"{name}.weight"))
    return layers


def _weights_inventory(state_dict: Mapping[str, torch.Tensor]) -> list[ConvLayer]:
    keys = [k for k, t in state_dict.items() if t.dim() == 4 and t.is_floating_point()]
    first = _first_weight_key(state_dict)
    layers = []
    for key in keys:
        out_c, in_pg, kh, kw = state_dict[key].shape
        groups = out_c if in_pg == 1 and out_c > 1 and (kh, kw) != (1, 1) else 1
        kind = "first" if key == first else conv_kind(out_c, in_pg, groups, (kh, kw))
        layers.append(ConvLayer(name=key.removesuffix(".weight"), kind=kind, out_channels=out_c,
                                in_channels=in_pg * groups, kernel_size=(kh, kw), groups=groups, weight_key=key))
    return layers


def _first_weight_key(state_dict: Mapping[str, torch.Tensor]) -> str:
    """First 4-D tensor with 3 input channels (RGB), else the first 4-D tensor."""
    keys = [k for k, t in state_dict.items() if t.dim() == 4 and t.is_floating_point()]
    if not keys:
        raise AnalysisError("The weights contain no 4-D convolution filters.")
    return next((k for k in keys if state_dict[k].shape[1] == 3), keys[0])


def inventory_frame(layers: list[ConvLayer]) -> pd.DataFrame:
    """The inventory as a table (one row per convolution)."""
    return pd.DataFrame([{"layer": lay.name, "kind": lay.kind, "out": lay.out_channels, "in": lay.in_channels,
                          "kernel": f"{lay.kernel_size[0]}×{lay.kernel_size[1]}", "stride": lay.stride[0],
                          "groups": lay.groups, "patch_dim": lay.patch_dim} for lay in layers])


def first_conv_name(loaded: LoadedModel) -> str:
    """The convolution that sees the image.

    timm's ``pretrained_cfg['first_conv']`` where it names a convolution, else the first convolution reached in a
    forward pass of a dummy image, else (weights only) the first 4-D tensor with three input channels.
    """
    if loaded.model is None:
        return _first_weight_key(loaded.state_dict).removesuffix(".weight")
    cfg_name = (getattr(loaded.model, "pretrained_cfg", None) or {}).get("first_conv")
    if cfg_name:
        try:
            if isinstance(loaded.model.get_submodule(cfg_name), nn.Conv2d):
                return cfg_name
        except AttributeError:
            pass
    ordered = _forward_ordered_convs(loaded)
    if not ordered:
        raise AnalysisError(f"{loaded.label} has no 2-D convolution.")
    return ordered[0][0]


def _forward_ordered_convs(loaded: LoadedModel) -> list[tuple[str, nn.Conv2d]]:
    """Convolutions in the order a forward pass reaches them (registration order for any that are not reached)."""
    model = loaded.model
    convs = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    order: list[str] = []
    handles = [m.register_forward_pre_hook(lambda _m, _i, name=n: order.append(name)) for n, m in convs]
    size = min(loaded.input_config.input_size, 224)
    try:
        with torch.inference_mode():
            model(torch.zeros(1, 3, size, size))
    except Exception:
        order = []
    finally:
        for h in handles:
            h.remove()
    rank = {name: i for i, name in enumerate(dict.fromkeys(order))}
    return sorted(convs, key=lambda item: rank.get(item[0], len(rank) + [n for n, _ in convs].index(item[0])))


def find_layer(loaded: LoadedModel, name: str | None) -> ConvLayer:
    """A layer by name (``None`` or ``"first"``: the first convolution); clear error listing choices otherwise."""
    layers = conv_inventory(loaded)
    if name in (None, "", "first"):
        return next(lay for lay in layers if lay.kind == "first")
    for lay in layers:
        if name in (lay.name, lay.weight_key):
            return lay
    raise AnalysisError(f"{loaded.label} has no convolution '{name}'. Convolutions: "
                        f"{', '.join(lay.name for lay in layers[:12])}{' …' if len(layers) > 12 else ''}")


def layer_weight(loaded: LoadedModel, layer: ConvLayer) -> torch.Tensor:
    """The (out, in/groups, kh, kw) weight of a layer, detached, float32, on CPU."""
    return loaded.state_dict[layer.weight_key].detach().float().cpu()


class _StopForward(Exception):
    """Raised by a capture hook to skip the rest of the network once the wanted input is seen."""


def iter_layer_inputs(model: nn.Module, layer_name: str, batches: Iterator[torch.Tensor],
                      device: torch.device) -> Iterator[torch.Tensor]:
    """Yield the input tensor of ``layer_name`` for each image batch, stopping each forward pass at that layer."""
    module = model.get_submodule(layer_name)
    captured: list[torch.Tensor] = []

    def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        captured.append(inputs[0].detach())
        raise _StopForward

    handle = module.register_forward_pre_hook(hook)
    try:
        with torch.inference_mode():
            for batch in batches:
                captured.clear()
                with contextlib.suppress(_StopForward):
                    model(batch.to(device))
                if not captured:
                    raise AnalysisError(f"Layer {layer_name} was not reached in the forward pass.")
                yield captured[0]
    finally:
        handle.remove()


def module_on(model: nn.Module, device: torch.device) -> nn.Module:
    """The model itself when already on ``device``; otherwise a private copy moved there (never mutates caches)."""
    param = next(model.parameters(), None)
    if param is None or param.device == device:
        return model
    return copy.deepcopy(model).to(device)


"""Layer inventory: every convolution with its kind, and access to a layer's weights and inputs.

Kinds: ``first`` (the convolution that sees the image), ``depthwise`` (groups == in == out channels),
``pointwise`` (1×1, groups 1), ``grouped`` and ``regular``. For weights-only files the inventory lists the 4-D
tensors of the state dict; shapes tell the kind except for grouping, which a weight shape alone cannot show
beyond ``in/groups == 1`` (depthwise).

The inventory of a full model needs one forward pass of a dummy image with hooks (forward order, output sizes).
It is taken once, by :func:`probe_inventory` while the model is being loaded and not yet shared, and kept in
:attr:`~fl_core.io.models.LoadedModel.conv_layers`: nothing here ever registers a hook on a shared, cached model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd
import torch
from torch import nn

from fl_core.errors import AnalysisError, ArgumentError

if TYPE_CHECKING:
    from fl_core.io.models import LoadedModel


@dataclass(frozen=True)
class ConvLayer:
    """One convolution of a model (:func:`conv_inventory`): its name and geometry.

    Attributes:
        name: the module name (``features.16.conv.2``), or the weight key for weights-only files.
        kind: ``first`` (the convolution that sees the image), ``regular``, ``pointwise`` (1×1), ``depthwise`` or
            ``grouped``.
        out_channels: output channels (filters).
        in_channels: input channels.
        kernel_size: (kh, kw).
        stride: (sh, sw).
        padding: (ph, pw).
        dilation: (dh, dw).
        groups: convolution groups (the input channels each filter reads: ``in_channels / groups``).
        weight_key: its weight tensor's key in the state dict.
        output_size: the side of its output feature map in the probe forward pass at the model's input size
            (``None`` for weights-only files and convolutions the pass did not reach).
    """

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
    output_size: int | None = None

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
    """All convolutions of a model in forward order (first conv first), or the 4-D tensors of a weights-only file.

    Taken once when the model was loaded (:attr:`~fl_core.io.models.LoadedModel.conv_layers`); no forward pass here.

    Args:
        loaded: the model, as :func:`~fl_core.io.models.load_model` returns it.
    """
    return list(loaded.conv_layers)


def probe_inventory(model: nn.Module | None, state_dict: Mapping[str, torch.Tensor], input_size: int
                    ) -> tuple[tuple[ConvLayer, ...], tuple[str, ...]]:
    """The inventory of a model that is not shared yet, and notes for the user.

    A full model runs one zero image of side ``min(input_size, 224)`` with hooks on every convolution (forward
    order and output sizes); a forward pass that fails leaves registration order, with a note saying so.
    """
    if model is None:
        return tuple(_weights_inventory(state_dict)), ()
    convs = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    if not convs:
        return (), ()
    order, sizes, note = _probe_forward(model, convs, min(input_size, 224))
    rank = {name: i for i, name in enumerate(order)}
    ordered = sorted(enumerate(convs), key=lambda item: (rank.get(item[1][0], len(rank)), item[0]))
    first = _configured_first_conv(model) or ordered[0][1][0]
    layers = []
    for _, (name, module) in ordered:
        kernel = _pair(module.kernel_size)
        kind = "first" if name == first else conv_kind(module.out_channels, module.in_channels // module.groups,
                                                       module.groups, kernel)
        layers.append(ConvLayer(name=name, kind=kind, out_channels=module.out_channels,
                                in_channels=module.in_channels, kernel_size=kernel, stride=_pair(module.stride),
                                padding=_pair(module.padding) if not isinstance(module.padding, str) else (-1, -1),
                                dilation=_pair(module.dilation), groups=module.groups, weight_key=f"{name}.weight",
                                output_size=sizes.get(name)))
    return tuple(layers), (note,) if note else ()


def _probe_forward(model: nn.Module, convs: list[tuple[str, nn.Conv2d]], size: int
                   ) -> tuple[list[str], dict[str, int], str]:
    """Forward order and output side of each convolution in one pass of a zero image, in eval mode (BatchNorm
    statistics untouched); hooks and the train/eval mode are restored after."""
    order: dict[str, None] = {}
    sizes: dict[str, int] = {}

    def record(name: str, output: torch.Tensor) -> None:
        order.setdefault(name)
        sizes.setdefault(name, int(output.shape[-1]))

    handles = [m.register_forward_hook(lambda _m, _i, out, name=n: record(name, out)) for n, m in convs]
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    training = model.training
    try:
        with torch.inference_mode():
            model.eval()(torch.zeros(1, 3, size, size, device=device))
    except (RuntimeError, ValueError, TypeError, AssertionError, IndexError) as err:
        return [], {}, (f"a test forward pass at {size}×{size} failed ({type(err).__name__}), so convolutions are "
                        "listed in registration order and stages follow layer names")
    finally:
        model.train(training)
        for handle in handles:
            handle.remove()
    return list(order), sizes, ""


def _configured_first_conv(model: nn.Module) -> str | None:
    """timm's ``pretrained_cfg['first_conv']`` where it names a convolution of the model."""
    name = (getattr(model, "pretrained_cfg", None) or {}).get("first_conv")
    if not name:
        return None
    try:
        return name if isinstance(model.get_submodule(name), nn.Conv2d) else None
    except AttributeError:
        return None


def _weights_inventory(state_dict: Mapping[str, torch.Tensor]) -> list[ConvLayer]:
    keys = [k for k, t in state_dict.items() if t.dim() == 4 and t.is_floating_point()]
    if not keys:
        raise AnalysisError("The weights contain no 4-D convolution filters.")
    geometry = {key: _weight_geometry(state_dict[key]) for key in keys}
    first = _first_weight_key(state_dict, geometry)
    return [ConvLayer(name=key.removesuffix(".weight"), kind="first" if key == first else conv_kind(*geometry[key]),
                      out_channels=geometry[key][0], in_channels=geometry[key][1] * geometry[key][2],
                      kernel_size=geometry[key][3], groups=geometry[key][2], weight_key=key) for key in keys]


def _weight_geometry(weight: torch.Tensor) -> tuple[int, int, int, tuple[int, int]]:
    """``(out, in/groups, groups, kernel)`` read off a weight: one input channel per k×k filter is depthwise."""
    out_c, in_pg, kh, kw = weight.shape
    groups = out_c if in_pg == 1 and out_c > 1 and (kh, kw) != (1, 1) else 1
    return int(out_c), int(in_pg), groups, (int(kh), int(kw))


def _first_weight_key(state_dict: Mapping[str, torch.Tensor],
                      geometry: Mapping[str, tuple[int, int, int, tuple[int, int]]]) -> str | None:
    """First 4-D tensor with 3 input channels (RGB), else the first that is not depthwise; ``None`` when every one is
    depthwise (a file of depthwise layers only: none of them sees the image, and all belong to the depthwise bank)."""
    keys = list(geometry)
    rgb = next((k for k in keys if state_dict[k].shape[1] == 3), None)
    return rgb or next((k for k in keys if conv_kind(*geometry[k]) != "depthwise"), None)


def inventory_frame(layers: list[ConvLayer]) -> pd.DataFrame:
    """The inventory as a table (one row per convolution; the kernel's height and width as numbers)."""
    return pd.DataFrame([{"layer": lay.name, "kind": lay.kind, "out": lay.out_channels, "in": lay.in_channels,
                          "kernel_h": lay.kernel_size[0], "kernel_w": lay.kernel_size[1], "stride": lay.stride[0],
                          "groups": lay.groups, "patch_dim": lay.patch_dim} for lay in layers])


def first_conv_name(loaded: LoadedModel) -> str:
    """The convolution that sees the image.

    timm's ``pretrained_cfg['first_conv']`` where it names a convolution, else the first convolution reached in a
    forward pass of a dummy image, else (weights only) the first 4-D tensor with three input channels.
    """
    first = next((lay.name for lay in loaded.conv_layers if lay.kind == "first"), None)
    if first is None:
        raise AnalysisError(f"{loaded.label} has no convolution that sees the image (a weights-only file of "
                            "depthwise layers only, or a model without 2-D convolutions): analyses of the first "
                            "layer need one. Its depthwise filters work on the Master Keys and Scale-Space pages.")
    return first


def find_layer(loaded: LoadedModel, name: str | None) -> ConvLayer:
    """A layer by name (``None`` or ``"first"``: the first convolution); clear error listing choices otherwise."""
    layers = conv_inventory(loaded)
    if name in (None, "", "first"):
        return find_layer(loaded, first_conv_name(loaded))
    for lay in layers:
        if name in (lay.name, lay.weight_key):
            return lay
    raise AnalysisError(f"{loaded.label} has no convolution '{name}'. Convolutions: "
                        f"{', '.join(lay.name for lay in layers[:12])}{' …' if len(layers) > 12 else ''}")


def check_layer(loaded: LoadedModel, name: str | None) -> ConvLayer:
    """The convolution ``name`` names (``None``: the first), refused at once when ``name`` is empty or names none: the
    cheap check an analysis of one layer makes as soon as its model is loaded, before any data or forward pass.

    Raises:
        ArgumentError: an empty or blank name.
        AnalysisError: no convolution of that name (:func:`find_layer`, listing the convolutions).
    """
    if name is not None and not name.strip():
        raise ArgumentError(f"layer is empty: give the name of a convolution of {loaded.label} (python -m fl_core "
                            "inspect lists them), or leave it out for the first convolution.")
    return find_layer(loaded, name)


def layer_weight(loaded: LoadedModel, layer: ConvLayer) -> torch.Tensor:
    """The (out, in/groups, kh, kw) weight of a layer, detached, float32, on CPU."""
    return loaded.state_dict[layer.weight_key].detach().float().cpu()


class _StopForward(Exception):
    """Raised by a capture hook to skip the rest of the network once the wanted input is seen."""


def iter_layer_inputs(model: nn.Module, layer_name: str, batches: Iterator[torch.Tensor],
                      device: torch.device) -> Iterator[torch.Tensor]:
    """Yield the input tensor of ``layer_name`` for each image batch, stopping each forward pass at that layer.

    The hook goes on ``model``, so it must be the caller's own (:meth:`~fl_core.io.models.LoadedModel.forward_copy`),
    never a shared, cached model: hooks belong to the module, not the thread, and would fire in other sessions.
    """
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

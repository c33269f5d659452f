"""Convolution weights of an ONNX model, read from its graph without running it (the ``onnx:PATH`` spec).

Every 2-D ``Conv`` node of the main graph gives one layer. Its weight input is followed back to stored values:

* a graph **initializer**, or the ``value`` of a **Constant** node (Paddle exports keep weights there);
* through **Identity** nodes (exporters share tensors that way);
* through **DequantizeLinear**: ``w = (q - zero_point) · scale``, with a per-tensor or per-axis (``axis``, default 1)
  scale and zero point (block quantization is refused).

A weight computed any other way (a graph input, a ``Mul``, a ``Reshape`` …) is not read; the note says which layer
and why. The geometry comes from the node, not from the weight's shape: ``group`` (so depthwise layers, groups = in =
out/m channels, are known), ``strides``, ``pads`` (``auto_pad`` VALID is padding 0, SAME_* is recorded as −1) and
``dilations``. Kinds follow :func:`fl_core.io.layers.conv_kind`, except ``first``: the first Conv (nodes are in
topological order, so forward order) whose data input is not downstream of another Conv, i.e. the one that sees the
image.

Layers are named after the Conv node's weight input (a trailing ``.weight`` removed); their state-dict keys are
``NAME.weight`` and ``NAME.bias``. Only conv weights and biases are kept (there is no runnable module: ONNX models are
weights-only in FilterLens).

Bounds (the rules of :mod:`fl_core.io.checkpoints`): the ``.onnx`` suffix, the size cap :func:`max_onnx_bytes` before
the protobuf is parsed, external data refused (``onnx.load(..., load_external_data=False)``; FilterLens never
opens files a model names), at most :data:`MAX_GRAPH_NODES` nodes and :data:`~fl_core.io.archives.MAX_TENSORS`
stored tensors, and the kept tensors validated by :func:`~fl_core.io.checkpoints.validate_tensors`.

``onnx`` is imported with this module (about 2 s), which :mod:`fl_core.io.models` imports only for an ``onnx:`` spec;
the dashboard's server imports it before it listens (:mod:`fl_ui.serve`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from fl_core.errors import CheckpointError
from fl_core.io.archives import MAX_TENSORS
from fl_core.io.checkpoints import ONNX_SUFFIX, file_sha256, max_checkpoint_bytes, validate_tensors
from fl_core.io.layers import ConvLayer, conv_kind

MAX_GRAPH_NODES = 20 * MAX_TENSORS
"""Nodes in the main graph: a real CNN has a few per stored tensor (ResNet-50: 1.3 per initializer)."""
ONNX_DOMAINS = ("", "ai.onnx")
OTHER_CONV_OPS = ("ConvTranspose", "QLinearConv", "ConvInteger", "DeformConv")
MAX_CHAIN = 64
"""Identity / DequantizeLinear hops followed from a Conv back to stored values (a cycle stops here)."""


def max_onnx_bytes() -> int:
    """The size cap for one ONNX file: a third of :func:`~fl_core.io.checkpoints.max_checkpoint_bytes` (341 MiB by
    default), because parsing holds up to three copies of it (the file's bytes, the protobuf message, the weights)."""
    return max_checkpoint_bytes() // 3


@dataclass(frozen=True)
class OnnxConvWeights:
    """The convolutions of an ONNX file.

    Attributes:
        tensors: ``NAME.weight`` (float32, (out, in/groups, kh, kw)) and ``NAME.bias`` per read layer.
        layers: the read layers in forward (node) order, with their declared geometry and kind.
        path, sha256: the file and its content hash.
        notes: plain-language notes (layers not read, and why).
    """

    tensors: dict[str, torch.Tensor]
    layers: tuple[ConvLayer, ...]
    path: str
    sha256: str
    notes: tuple[str, ...] = ()


def read_onnx_convs(path: str | Path, *, max_bytes: int | None = None) -> OnnxConvWeights:
    """Read every 2-D convolution of an ONNX model (module docstring).

    Raises:
        CheckpointError: the file is missing, too large, not ONNX, names external data, is too large a graph, or has
            no readable 2-D convolution; the message says what to do.
    """
    path = Path(path)
    model = _load_bounded(path, max_onnx_bytes() if max_bytes is None else max_bytes)
    graph = _GraphValues(model.graph, path.name)
    tensors: dict[str, torch.Tensor] = {}
    layers: list[ConvLayer] = []
    notes: list[str] = []
    first_seen = False
    for index, node, sees_image in _conv_nodes(model.graph):
        label = node.name or f"Conv #{index}"
        try:
            weight = graph.value(node.input[1])
        except _NotStored as err:
            notes.append(f"{label}: its weight is {err}, so it was not read")
            continue
        if weight.ndim != 4:
            notes.append(f"{label}: a {weight.ndim - 2}-D convolution (only 2-D ones are analysed)")
            continue
        name = _layer_name(node, index, tensors)
        tensors[f"{name}.weight"] = torch.from_numpy(weight)
        if len(node.input) > 2 and node.input[2]:
            with contextlib.suppress(_NotStored):  # a bias is not a filter; the weight is what analyses read
                tensors[f"{name}.bias"] = torch.from_numpy(graph.value(node.input[2]))
        layer = _declared_layer(node, name, weight.shape, path.name)
        if sees_image and not first_seen and layer.kind != "depthwise":
            layer, first_seen = dataclasses.replace(layer, kind="first"), True
        layers.append(layer)
    notes.extend(_unread_conv_ops(model.graph))
    if not layers:
        raise CheckpointError(f"{path.name} has no 2-D convolution whose weights are stored in the file"
                              + (f" ({'; '.join(notes[:3])})" if notes else "") + ", so there are no filters to "
                              "analyse.")
    validate_tensors(tensors, name=path.name, stored_bytes=path.stat().st_size)
    return OnnxConvWeights(tensors=tensors, layers=tuple(layers), path=str(path), sha256=file_sha256(path),
                           notes=tuple(notes))


def _load_bounded(path: Path, cap: int):
    """The parsed model, after the suffix and size checks, with external data refused."""
    if not path.is_file():
        raise CheckpointError(f"No ONNX file at {path}. Check the path (it is read on the machine that runs "
                              "FilterLens).")
    if path.suffix.lower() != ONNX_SUFFIX:
        raise CheckpointError(f"{path.name}: the onnx: spec reads {ONNX_SUFFIX} files; for a state dict use "
                              "weights:PATH.")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"{path.name} is empty (0 bytes). Upload the file again.")
    if size > cap:
        raise CheckpointError(f"{path.name} is {size / 2**20:.0f} MiB, over the {cap / 2**20:.0f} MiB limit for "
                              "ONNX files (a third of FL_MAX_CHECKPOINT_MB). Export a smaller model, or ask the admin "
                              "to raise the limit.")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError, RecursionError) as err:
        raise CheckpointError(f"{path.name} could not be read as an ONNX model: the file is damaged, truncated or not "
                              f"ONNX ({type(err).__name__}). Export it again.") from err
    graph = model.graph
    if len(graph.node) > MAX_GRAPH_NODES:
        raise CheckpointError(f"{path.name}: its graph has {len(graph.node):,} nodes, over the limit of "
                              f"{MAX_GRAPH_NODES:,}; refused. Export the convolutional part of the model only.")
    stored = [*graph.initializer, *(_constant_tensor(n) for n in graph.node if n.op_type == "Constant")]
    if len(stored) > MAX_TENSORS:
        raise CheckpointError(f"{path.name} holds {len(stored):,} stored tensors, over the limit of {MAX_TENSORS:,} "
                              "tensors (the largest CNNs have about 2,000); refused.")
    if any(t is not None and t.data_location == onnx.TensorProto.EXTERNAL for t in stored):
        raise CheckpointError(f"{path.name} keeps its weights in external data files, which FilterLens does not "
                              "open; refused. Save the model as one file: onnx.save(model, PATH, "
                              "save_as_external_data=False).")
    return model


def _unread_conv_ops(graph) -> list[str]:
    """A note per kind of convolution-like node that is not a plain Conv (their weights are not read)."""
    counts = collections.Counter(n.op_type for n in graph.node if n.op_type in OTHER_CONV_OPS or
                                 (n.op_type == "Conv" and n.domain not in ONNX_DOMAINS))
    return [f"{count} {op} node(s) not read (only standard Conv nodes are)" for op, count in counts.items()]


def _constant_tensor(node):
    """The TensorProto of a Constant node's ``value`` attribute, else ``None``."""
    return next((a.t for a in node.attribute if a.name == "value"), None)


def _conv_nodes(graph):
    """``(index, node, sees_image)`` of each Conv in node order; ``sees_image``: its data input is not downstream of
    another Conv."""
    after_conv: set[str] = set()
    index = 0
    for node in graph.node:
        downstream = node.op_type == "Conv" or any(name in after_conv for name in node.input)
        if node.op_type == "Conv" and node.domain in ONNX_DOMAINS and len(node.input) > 1:
            yield index, node, node.input[0] not in after_conv
            index += 1
        if downstream:
            after_conv.update(node.output)


def _layer_name(node, index: int, taken: Mapping[str, torch.Tensor]) -> str:
    """The weight input's name (``.weight`` removed), else the node's name, else ``conv_INDEX``: the first unused."""
    for name in (node.input[1].removesuffix(".weight"), node.name, f"conv_{index}"):
        if name and f"{name}.weight" not in taken:
            return name
    return f"conv_{index}_{len(taken)}"


def _attributes(node) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _declared_layer(node, name: str, shape: tuple[int, ...], file: str) -> ConvLayer:
    """The layer as the Conv node declares it (``group``, ``strides``, ``pads``, ``dilations``)."""
    attrs = _attributes(node)
    label = node.name or name
    groups = _positive_ints(attrs, "group", [1], 1, file, label)[0]
    out_c, in_per_group, kh, kw = (int(s) for s in shape)
    if groups < 1 or out_c % groups:
        raise CheckpointError(f"{file}: {node.name or name} declares group={groups} for {out_c} output channels "
                              "(not a divisor); the file is corrupt. Export it again.")
    pads = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    padding = ((pads[0], pads[1]) if auto_pad in (b"NOTSET", "NOTSET") and len(pads) == 4 else
               (0, 0) if auto_pad in (b"VALID", "VALID") else (-1, -1))
    strides = _positive_ints(attrs, "strides", [1, 1], 2, file, label)
    dilations = _positive_ints(attrs, "dilations", [1, 1], 2, file, label)
    return ConvLayer(name=name, kind=conv_kind(out_c, in_per_group, groups, (kh, kw)), out_channels=out_c,
                     in_channels=in_per_group * groups, kernel_size=(kh, kw), stride=(strides[0], strides[-1]),
                     padding=padding, dilation=(dilations[0], dilations[-1]), groups=groups,
                     weight_key=f"{name}.weight")


def _positive_ints(attrs: Mapping[str, object], key: str, default: list[int], count: int, file: str,
                   label: str) -> list[int]:
    """The attribute ``key`` as ``count`` positive integers (one for an integer attribute), else a
    :class:`CheckpointError` (an empty list, a string, zero or a negative number: the node is corrupt)."""
    value = attrs.get(key, default)
    values = [value] if isinstance(value, int) else value
    if (not isinstance(values, list) or len(values) != count
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)):
        raise CheckpointError(f"{file}: Conv node {label} declares {key}={value!r}, not {count} positive "
                              f"integer{'s' if count > 1 else ''}; the file is corrupt. Export it again.")
    return values


class _NotStored(Exception):
    """A tensor whose values are not stored in the file (message: where it comes from)."""


class _GraphValues:
    """Stored values of a graph by tensor name: initializers, Constant nodes, through Identity and DequantizeLinear."""

    def __init__(self, graph, file: str) -> None:
        self.file = file
        self.initializers = {t.name: t for t in graph.initializer}
        self.producers = {out: node for node in graph.node for out in node.output}
        self.inputs = {i.name for i in graph.input}

    def value(self, name: str, hops: int = 0) -> np.ndarray:
        """float32 values of ``name`` (module docstring); raises :class:`_NotStored` otherwise."""
        if name in self.initializers:
            return self._array(self.initializers[name], name)
        node = self.producers.get(name)
        if node is None:
            raise _NotStored("a graph input (set at run time)" if name in self.inputs else f"'{name}', which "
                             "nothing in the graph produces")
        if hops >= MAX_CHAIN:
            raise _NotStored(f"behind more than {MAX_CHAIN} Identity/DequantizeLinear nodes")
        if node.op_type == "Constant":
            tensor = _constant_tensor(node)
            if tensor is None:
                raise _NotStored("a Constant without a tensor value")
            return self._array(tensor, name)
        if node.op_type == "Identity":
            return self.value(node.input[0], hops + 1)
        if node.op_type == "DequantizeLinear":
            return self._dequantized(node, hops)
        raise _NotStored(f"computed at run time by a {node.op_type} node")

    def _dequantized(self, node, hops: int) -> np.ndarray:
        """``(q - zero_point) · scale`` with the scale and zero point broadcast along ``axis`` when 1-D."""
        attrs = _attributes(node)
        if int(attrs.get("block_size", 0)):
            raise _NotStored("block-quantized (DequantizeLinear block_size), which FilterLens does not read")
        quantized = self._raw(node.input[0], hops + 1)
        scale = self.value(node.input[1], hops + 1)
        zero = self._raw(node.input[2], hops + 1) if len(node.input) > 2 and node.input[2] else np.zeros(1)
        axis = int(attrs.get("axis", 1)) % max(quantized.ndim, 1)
        return ((quantized.astype(np.float64) - self._along(zero, quantized.shape, axis))
                * self._along(scale, quantized.shape, axis)).astype(np.float32)

    def _along(self, values: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
        """A per-tensor scale or zero point as a scalar; a per-axis one shaped to broadcast along ``axis``."""
        if values.size == 1:
            return values.astype(np.float64).reshape(())
        if values.ndim != 1 or not shape or values.size != shape[axis]:
            raise CheckpointError(f"{self.file}: a DequantizeLinear node gives {values.size} scales or zero points "
                                  f"for axis {axis} of a weight of shape {tuple(shape)}; the file is corrupt. "
                                  "Export it again.")
        return values.astype(np.float64).reshape([values.size if i == axis else 1 for i in range(len(shape))])

    def _raw(self, name: str, hops: int) -> np.ndarray:
        """Stored values in their own dtype (integers of a quantized weight), through Identity/Constant nodes."""
        node = self.producers.get(name)
        if node is not None and node.op_type == "Identity" and hops < MAX_CHAIN:
            return self._raw(node.input[0], hops + 1)
        tensor = self.initializers.get(name) if node is None else _constant_tensor(node)
        if tensor is None:
            raise _NotStored(f"dequantized from '{name}', which is not stored in the file")
        return self._numpy(tensor, name)

    def _array(self, tensor, name: str) -> np.ndarray:
        values = self._numpy(tensor, name)
        if not np.issubdtype(values.dtype, np.floating) and values.dtype.kind != "V":
            raise _NotStored(f"stored as {values.dtype} without a DequantizeLinear node")
        return np.array(values, dtype=np.float32)  # a writable copy of its own

    def _numpy(self, tensor, name: str) -> np.ndarray:
        try:
            return numpy_helper.to_array(tensor)
        except (ValueError, TypeError, KeyError, NotImplementedError) as err:
            raise CheckpointError(f"{self.file}: tensor '{name}' could not be read ({type(err).__name__}: the file "
                                  "is damaged or uses an unsupported type). Export it again as float32.") from err

"""Where a conv layer's channels are observed and intervened on (docs/methods.md, "Where a channel lives"): the site.

A channel is intervened on where the next layers read it: the output of the per-channel chain that follows the conv
(BatchNorm, activation, dropout, identity), i.e. the post-BN-activation ``a_i`` (:func:`locate_site`). A ResNet
block's internal channel is its own; a conv whose chain ends in a residual add is intervened on before the add, never
on the skip stream. :func:`on_call` hooks one call of a module in each forward pass (the statistics, the lesions).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from fl_core.errors import AnalysisError
from fl_core.io.layers import ConvLayer, check_layer, conv_inventory, find_layer
from fl_core.io.models import LoadedModel

ELEMENTWISE = (nn.modules.batchnorm._BatchNorm, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.SiLU, nn.GELU,
               nn.Hardswish, nn.Mish, nn.ELU, nn.SELU, nn.CELU, nn.Identity, nn.Dropout, nn.Dropout2d)
"""Per-channel modules that may follow a conv before its channels are read (they keep the channel index)."""


def default_channel_layer(layers: list[ConvLayer]) -> str:
    """The layer a channel analysis takes when none is named (the library, the command and the page alike): of the
    convolutions with at least two output channels (peers need company), the last that is not depthwise and has at
    most 256 channels, near the head, where the lesioned copies have little network left to run (MobileNetV2:
    ``features.16.conv.2``, about a minute on 2 CPU cores)."""
    analysable = [lay for lay in layers if lay.out_channels >= 2] or layers
    fitting = [lay for lay in analysable if lay.kind != "depthwise" and lay.out_channels <= 256]
    return (fitting or analysable)[-1].name


def default_pruned_layers(layers: list[ConvLayer]) -> list[str]:
    """The layers pruned together when none are named (the Channel Axes page): the convolutions that widen the
    channels for a depthwise one (MobileNetV2's expansions: pruning one removes its depthwise channels and the
    projection's inputs with it, so together they reach 30 % of the MACs), else every convolution with at least two
    output channels after the first."""
    expansions = [a.name for a, b in itertools.pairwise(layers)
                  if b.kind == "depthwise" and a.kind not in ("first", "depthwise") and a.out_channels >= 2]
    return expansions or [lay.name for lay in layers[1:] if lay.out_channels >= 2]


def channel_layer(loaded: LoadedModel, name: str | None = None) -> ConvLayer:
    """The convolution a channel analysis of ``loaded`` reads: ``name`` (:func:`~fl_core.io.layers.find_layer`;
    ``"first"``: the first convolution; a blank name is refused: :func:`~fl_core.io.layers.check_layer`), or
    :func:`default_channel_layer` when none is named."""
    if name is None:
        return find_layer(loaded, default_channel_layer(conv_inventory(loaded)))
    return check_layer(loaded, name)


@dataclass(frozen=True)
class ChannelSite:
    """Where a conv layer's channels are observed and intervened on.

    Attributes:
        layer: the conv module.
        activation: the module whose output ``a`` the next layers read (the conv itself when nothing follows it).
        activation_call: which call of ``activation`` in a forward pass (modules such as a shared ReLU run twice).
        chain: the modules from the conv to ``activation``.
        consumers: modules that read ``a`` directly.
        foldable: every reader of ``a`` is a groups-1 convolution (peer replacement folds into their weights).
        exact_fold: foldable, and no reader pads: the fold equals the substitution exactly.
        n_channels: output channels of the conv.
        sample_bytes: largest activation per image after the site (plans the batched replay's memory).
    """

    layer: str
    activation: str
    activation_call: int
    chain: tuple[str, ...]
    consumers: tuple[str, ...]
    foldable: bool
    exact_fold: bool
    n_channels: int
    sample_bytes: int

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class _Call:
    name: str
    module: nn.Module
    call: int
    inputs: tuple[torch.Tensor, ...]
    input_versions: tuple[int, ...]
    output: torch.Tensor | None = None
    output_version: int = -1


def _record_calls(model: nn.Module, x: torch.Tensor) -> tuple[list[_Call], torch.Tensor]:
    """Every module call of one forward pass (in call order) with its tensors and their in-place versions, and
    the model output.

    Runs with gradients on the input so the autograd graph can tell which tensors reach the output through what.
    """
    calls: list[_Call] = []
    counts: dict[str, int] = {}

    def hooks(name: str) -> tuple[Callable, Callable]:
        open_calls: list[_Call] = []

        def start(module: nn.Module, args: tuple) -> None:
            counts[name] = counts.get(name, -1) + 1
            tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
            open_calls.append(_Call(name, module, counts[name], tensors, tuple(t._version for t in tensors)))
            calls.append(open_calls[-1])

        def finish(_module: nn.Module, _args: tuple, output: object) -> None:
            call = open_calls.pop()
            if isinstance(output, torch.Tensor):
                call.output, call.output_version = output, output._version

        return start, finish

    handles = []
    for name, module in model.named_modules():
        if name:
            start, finish = hooks(name)
            handles += [module.register_forward_pre_hook(start), module.register_forward_hook(finish)]
    try:
        with torch.enable_grad():
            output = model(x.detach().requires_grad_(True))
    finally:
        for handle in handles:
            handle.remove()
    return calls, output


def is_container(module: nn.Module) -> bool:
    return next(module.children(), None) is not None and not isinstance(module, ELEMENTWISE)


def _readers(calls: list[_Call], producer: int) -> list[int]:
    """Positions of the non-container calls that read the output of ``calls[producer]`` unchanged (same tensor,
    same in-place version: a tensor modified in between, e.g. by a residual ``+=``, is a different value)."""
    tensor, version = calls[producer].output, calls[producer].output_version
    return [i for i in range(producer + 1, len(calls)) if not is_container(calls[i].module)
            and any(t is tensor and v == version for t, v in zip(calls[i].inputs, calls[i].input_versions))]


def _reaches_only_through(output: torch.Tensor, source: torch.Tensor, gates: list[torch.Tensor]) -> bool:
    """True when every autograd path from ``output`` back to ``source`` passes through one of ``gates``."""
    target, stops = source.grad_fn, {g.grad_fn for g in gates}
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen or node in stops:
            continue
        if node is target:
            return False
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return True


def locate_site(model: nn.Module, layer: str, example: torch.Tensor) -> ChannelSite:
    """Follow ``layer``'s output through its per-channel chain (BN, activation, ...) to where it is read.

    Args:
        model: the network (a private copy; hooks are added and removed).
        layer: name of a ``nn.Conv2d`` module.
        example: one input batch (a single image is enough).
    """
    conv = model.get_submodule(layer)
    if not isinstance(conv, nn.Conv2d):
        raise AnalysisError(f"{layer} is not a 2-D convolution; pick a convolution layer.")
    calls, output = _record_calls(model, example)
    position = next((i for i, c in enumerate(calls) if c.name == layer), None)
    if position is None:
        raise AnalysisError(f"Layer {layer} was not reached in the forward pass.")
    chain = [position]
    while True:
        readers = _readers(calls, chain[-1])
        if len(readers) != 1 or not isinstance(calls[readers[0]].module, ELEMENTWISE):
            break
        chain.append(readers[0])
    end = calls[chain[-1]]
    current = end.output
    readers = [calls[i] for i in _readers(calls, chain[-1])]
    consumers = tuple(dict.fromkeys(c.name for c in readers))
    foldable = bool(readers) and all(isinstance(c.module, nn.Conv2d) and c.module.groups == 1 for c in readers) \
        and _reaches_only_through(output, current, [c.output for c in readers])
    exact = foldable and all(_pads(c.module) is False for c in readers)
    batch = example.shape[0]
    later = [c.output for c in calls[chain[-1]:] if c.output is not None and c.output.ndim and
             c.output.shape[0] == batch]
    sample_bytes = max(t[0].numel() * t.element_size() for t in later)
    return ChannelSite(layer=layer, activation=end.name, activation_call=end.call,
                       chain=tuple(calls[i].name for i in chain), consumers=consumers, foldable=foldable,
                       exact_fold=exact, n_channels=conv.out_channels, sample_bytes=int(sample_bytes))


def _pads(conv: nn.Conv2d) -> bool:
    """Whether a convolution reads zero padding (1×1 kernels and unpadded convs do not)."""
    if conv.kernel_size == (1, 1):
        return False
    padding = conv.padding
    return padding != "valid" and (isinstance(padding, str) or any(p > 0 for p in padding))


@contextlib.contextmanager
def on_call(root: nn.Module, module: nn.Module, call: int, fn: Callable, pre: bool = False) -> Iterator[None]:
    """Run ``fn(module, args, output)`` (or ``fn(module, args)`` with ``pre``) on the ``call``-th call of ``module``
    in each forward pass of ``root``; a returned value replaces the output (or the arguments)."""
    count = [-1]

    def reset(_module: nn.Module, _args: tuple) -> None:
        count[0] = -1

    def hook(*hook_args):
        count[0] += 1
        return fn(*hook_args) if count[0] == call else None

    handles = [root.register_forward_pre_hook(reset),
               module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()

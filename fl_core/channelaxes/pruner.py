"""Removing a conv layer's output channels for real, on copies of a template, and scoring the pruned copies from
the first layer that reads the remaining channels (docs/methods.md §6; the curves: :mod:`.pruning`).

* **Removal** (:class:`LayerPruner`): Torch-Pruning's DepGraph (``tp.DependencyGraph``) finds every coupled tensor (the
  conv's outputs, its BatchNorm, the readers' input channels, concatenations, residual partners); the graph is built
  once on a template and its pruning plan applied to fresh copies that share every tensor the removal does not touch.
* **Mean compensation [proposed]**: each reader may absorb the removed channels' calibration means into its bias, so
  removal acts like mean-ablation (:meth:`LayerPruner.pruned_copy`).
* **Evaluated from the first reader** (:class:`PrunedEvaluation`, :mod:`fl_core.networks.partial_forward`): the
  remaining channels keep their values up to the layers that read them, so each pruned network runs only from there, on
  the intact network's activation without the removed channels (checked against its full forward pass on the first
  images).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
import torch_pruning as tp
from torch import nn
from torch_pruning.ops import OPTYPE

from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.compute.device import inference_autocast
from fl_core.errors import AnalysisError
from fl_core.io.cifar import ZeroPadShortcut
from fl_core.networks.evaluation import evaluate_classifier, evaluate_logits
from fl_core.networks.partial_forward import (
    PROBE_IMAGES,
    PrefixPasses,
    capturing_inputs,
    copy_modules,
    fallback_note,
    module_chain,
    suffix_check,
    suffix_forward,
)


@dataclass(frozen=True)
class PrunedNetwork:
    """A pruned copy of a :class:`LayerPruner`'s template.

    Attributes:
        model: the copy; modules the removal does not touch are the template's own (never train it in place).
        removed_inputs: per channel-mixing reader (groups-1 convolution or linear layer), the input channels removed.
    """

    model: nn.Module
    removed_inputs: dict[str, list[int]]


class Removal(NamedTuple):
    """One coupled module's or parameter's part of a removal: its Torch-Pruning dependency, the indices it loses and
    the layer channels they come from."""

    dep: Any
    idxs: list[int]
    root_idxs: list[int]


class ZeroPadShortcutPruner(tp.pruner.BasePruningFunc):
    """Torch-Pruning's view of a CIFAR ResNet's option-A shortcut (:class:`fl_core.io.cifar.ZeroPadShortcut`): input
    and output channels are removed independently (an input removed: its output channel stays, zero; an output
    removed: the input landing there is dropped), every other channel keeps its place."""

    TARGET_MODULES = ZeroPadShortcut

    def prune_in_channels(self, layer: ZeroPadShortcut, idxs: Sequence[int]) -> ZeroPadShortcut:
        kept = _kept_positions(layer.in_channels, idxs)
        used = kept[layer.sources] >= 0
        layer.sources, layer.targets = kept[layer.sources][used], layer.targets[used]
        layer.in_channels -= len(set(idxs))
        return layer

    def prune_out_channels(self, layer: ZeroPadShortcut, idxs: Sequence[int]) -> ZeroPadShortcut:
        kept = _kept_positions(layer.out_channels, idxs)
        used = kept[layer.targets] >= 0
        layer.sources, layer.targets = layer.sources[used], kept[layer.targets][used]
        layer.out_channels -= len(set(idxs))
        return layer

    def get_in_channels(self, layer: ZeroPadShortcut) -> int:
        return layer.in_channels

    def get_out_channels(self, layer: ZeroPadShortcut) -> int:
        return layer.out_channels


def _kept_positions(n: int, removed: Sequence[int]) -> torch.Tensor:
    """New index of each of ``n`` channels once ``removed`` are gone (-1 for the removed ones)."""
    keep = torch.ones(n, dtype=torch.bool)
    keep[list(removed)] = False
    return torch.where(keep, keep.cumsum(0) - 1, -1)


CUSTOM_PRUNERS = {ZeroPadShortcut: ZeroPadShortcutPruner()}
"""Modules Torch-Pruning cannot see into, and how their channels are removed."""


class LayerPruner:
    """Torch-Pruning's dependency graph of a model, built once, pruning any subset of one conv's output channels
    on fresh copies (the template is never changed).

    Args:
        model: a private copy of the network (gradients are enabled on it while the graph is traced).
        layer: the conv whose output channels are pruned.
        example: an example input batch.
    """

    def __init__(self, model: nn.Module, layer: str, example: torch.Tensor, graph: tp.DependencyGraph | None = None,
                 positions: dict[str, int] | None = None) -> None:
        self.template = model
        self.conv = model.get_submodule(layer)
        self.layer = layer
        self.graph = graph or dependency_graph(model, example)
        self.n_channels = self.conv.out_channels
        self.positions = positions or output_positions(model, example[:1])

    def cost(self, model: nn.Module) -> tuple[int, int]:
        """``(MACs per image, parameters)`` of the template or a pruned copy: Σ weight size × output positions over
        the convolutions and linear layers (removing channels never changes the positions), and Σ parameter sizes."""
        macs = sum(module.weight.numel() * self.positions[name] for name, module in model.named_modules()
                   if name in self.positions)
        return macs, sum(p.numel() for p in model.parameters())

    @functools.cached_property
    def group(self):
        """The DepGraph group of all the layer's channels."""
        return self.graph.get_pruning_group(self.conv, tp.prune_conv_out_channels, idxs=list(range(self.n_channels)))

    def removals(self, channels: Sequence[int]) -> list[Removal]:
        """What removing ``channels`` does to each coupled module or parameter: the whole group's items restricted to
        the indices that come from those channels (their root indices), the empty ones left out. The same as
        Torch-Pruning's group of ``channels`` without tracing the graph again (tests/channelaxes/test_pruning.py)."""
        wanted = {int(c) for c in channels}
        items = ([(i, r) for i, r in zip(item.idxs, item.root_idxs) if r in wanted] for item in self.group)
        return [Removal(item.dep, [i for i, _ in kept], [r for _, r in kept])
                for item, kept in zip(self.group, items) if kept]

    def coupled_layers(self) -> list[str]:
        """Other layers whose output channels are removed together with this layer's (residual partners)."""
        names = self.graph._module2name
        return sorted({names[dep.target.module] for dep, _ in self.group if dep.target.module in names
                       and dep.target.module is not self.conv and self.graph.is_out_channel_pruning_fn(dep.handler)
                       and isinstance(dep.target.module, nn.Conv2d | nn.Linear)})

    def changed_modules(self) -> list[str]:
        """Names of the modules and parameters a removal changes (the same for every non-empty subset; Torch-Pruning's
        stand-ins for functional operations hold no tensors and are left out)."""
        return [name for name in (self._name(item.dep) for item in self.group) if name]

    def readers(self) -> list[str]:
        """The channel-mixing modules whose input channels a removal drops (the same for every non-empty subset)."""
        return [self._name(item.dep) for item in self.group if self._reads(item.dep)]

    def has_batchnorm(self) -> bool:
        return any(isinstance(dep.target.module, nn.modules.batchnorm._BatchNorm) for dep, _ in self.group)

    def pruned_copy(self, channels: Sequence[int], means: np.ndarray | None = None,
                    readers: Sequence[str] = ()) -> PrunedNetwork:
        """A copy of the template with ``channels`` removed for real from every coupled layer; the modules the
        removal does not touch are the template's own (:func:`fl_core.networks.partial_forward.copy_modules`).

        With ``means`` (the removed channels' calibration means of ``a``, indexed by channel), each of ``readers``
        (convolutions or linear layers that read ``a`` directly) first absorbs the removed inputs' mean contribution
        into its bias, ``b += Σ_i μ_i Σ_spatial W[:, i]``: the network then behaves as if the channels were
        mean-ablated (exactly for unpadded readers) instead of zeroed.
        """
        group = self.removals(channels)
        pruned = PrunedNetwork(copy_modules(self.template, self.owners(group)), {})
        self.apply(pruned, group, means, readers)
        return pruned

    def owners(self, group: Sequence[Removal]) -> set[str]:
        """The modules a removal changes (copied for a pruned copy)."""
        return {self._owner(item.dep) for item in group} - {""}

    def apply(self, pruned: PrunedNetwork, group: Sequence[Removal], means: np.ndarray | None = None,
              readers: Sequence[str] = ()) -> None:
        """Carry out ``group`` (:meth:`removals`) on ``pruned``, whose changed modules are its own (:meth:`pruned_copy`;
        the input channels dropped are added to its ``removed_inputs``)."""
        names = self.graph._module2name
        removed_inputs = pruned.removed_inputs
        for item in group:
            dep, idxs, target = item.dep, item.idxs, item.dep.target.module
            if dep.target.type == OPTYPE.PARAMETER:
                path = self.graph._param_to_name[target].split(".")
                parent = pruned.model.get_submodule(".".join(path[:-1]))
                setattr(parent, path[-1], dep.handler(getattr(parent, path[-1]), idxs))
            elif target in names:
                module = pruned.model.get_submodule(names[target])
                if self._reads(dep):
                    removed_inputs[names[target]] = sorted(int(i) for i in idxs)
                if means is not None and names[target] in readers and not self.graph.is_out_channel_pruning_fn(
                        dep.handler):
                    _absorb_mean_inputs(module, idxs, np.asarray(means)[item.root_idxs])
                dep.handler(module, idxs)

    def _name(self, dep) -> str:
        target = dep.target.module
        return self.graph._param_to_name[target] if dep.target.type == OPTYPE.PARAMETER \
            else self.graph._module2name.get(target, "")

    def _owner(self, dep) -> str:
        """The module holding what a dependency changes (a standalone parameter's module)."""
        name = self._name(dep)
        return name.rpartition(".")[0] if dep.target.type == OPTYPE.PARAMETER else name

    def _reads(self, dep) -> bool:
        """Whether a dependency drops input channels of a channel-mixing module (groups-1 conv, linear layer)."""
        target = dep.target.module
        return self.graph.is_in_channel_pruning_fn(dep.handler) and (
            isinstance(target, nn.Linear) or (isinstance(target, nn.Conv2d) and target.groups == 1))

    def importance(self, name: str, calibration: LabelledInputs, device: torch.device, gradient_images: int,
                   seed: int) -> np.ndarray:
        """A Torch-Pruning baseline's importance of every channel (higher = keep)."""
        first = {"normalizer": None, "group_reduction": "first"}
        group = self.group
        if name == "taylor":
            return self._taylor(calibration, device, gradient_images)
        if name == "random":
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                return tp.importance.RandomImportance()(group).cpu().double().numpy()
        if name == "bn_gamma":
            if not self.has_batchnorm():
                raise AnalysisError(f"no BatchNorm follows {self.layer}")
            importance = tp.importance.BNScaleImportance(normalizer=None)
        else:
            importance = {"l1": lambda: tp.importance.GroupMagnitudeImportance(p=1, **first),
                          "l2": lambda: tp.importance.GroupMagnitudeImportance(p=2, **first),
                          "fpgm": lambda: tp.importance.FPGMImportance(p=2, **first)}[name]()
        with torch.no_grad():
            return importance(group).cpu().double().numpy()

    def _taylor(self, calibration: LabelledInputs, device: torch.device, n_images: int) -> np.ndarray:
        model = self.template
        x, y = calibration.head(n_images)
        with _gradients(model):
            F.cross_entropy(model(x.to(device)), y.to(device)).backward()
            scores = tp.importance.GroupTaylorImportance(normalizer=None, group_reduction="first")(self.group)
        return scores.detach().cpu().double().numpy()


def dependency_graph(model: nn.Module, example: torch.Tensor) -> tp.DependencyGraph:
    """Torch-Pruning's dependency graph of ``model`` traced on ``example`` (gradients on while tracing)."""
    with _gradients(model):
        return tp.DependencyGraph().build_dependency(model, example_inputs=example, customized_pruners=CUSTOM_PRUNERS)


class NetworkPruner:
    """Several convolutions' output channels removed together on fresh copies of one template: one dependency graph,
    one :class:`LayerPruner` per layer sharing it.

    A layer whose channels are removed with an earlier one's (one DepGraph group: a depthwise conv and the expansion
    feeding it, residual partners) is pruned through the earlier layer and left out of :attr:`layers`, with a note.

    Args:
        model: a private copy of the network.
        layers: the convolutions to prune, in the network's order.
        example: an example input batch.
    """

    def __init__(self, model: nn.Module, layers: Sequence[str], example: torch.Tensor) -> None:
        self.template = model
        graph, positions = dependency_graph(model, example), output_positions(model, example[:1])
        self.pruners: dict[str, LayerPruner] = {}
        self.notes: list[str] = []
        for layer in layers:
            pruner = LayerPruner(model, layer, example, graph, positions)
            owner = next((name for name, other in self.pruners.items() if pruner.conv in {
                dep.target.module for dep, _ in other.group if graph.is_out_channel_pruning_fn(dep.handler)}), None)
            if owner is None:
                self.pruners[layer] = pruner
            else:
                self.notes.append(f"{layer} loses its channels with {owner} (one dependency group): pruned through "
                                  f"{owner}")
        self.cost = next(iter(self.pruners.values())).cost

    @property
    def layers(self) -> list[str]:
        """The layers pruned (one per dependency group)."""
        return list(self.pruners)

    def pruned_copy(self, channels: Mapping[str, Sequence[int]], means: Mapping[str, np.ndarray] | None = None,
                    readers: Mapping[str, Sequence[str]] | None = None) -> PrunedNetwork:
        """A copy of the template with ``channels[layer]`` removed from each layer (:meth:`LayerPruner.pruned_copy`;
        ``means`` and ``readers`` per layer: the mean compensation)."""
        groups = {layer: self.pruners[layer].removals(idx) for layer, idx in channels.items() if len(idx)}
        owners = set().union(*(self.pruners[layer].owners(group) for layer, group in groups.items()))
        pruned = PrunedNetwork(copy_modules(self.template, owners), {})
        for layer, group in groups.items():
            self.pruners[layer].apply(pruned, group, None if means is None else means.get(layer),
                                      () if readers is None else readers.get(layer, ()))
        return pruned

    def changed_modules(self) -> list[str]:
        """The modules and parameters some layer's removal changes."""
        return list(dict.fromkeys(name for pruner in self.pruners.values() for name in pruner.changed_modules()))

    def readers(self) -> list[str]:
        """The channel-mixing modules whose input channels some layer's removal drops."""
        return list(dict.fromkeys(name for pruner in self.pruners.values() for name in pruner.readers()))


def loss_and_correct(batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, np.ndarray]:
    """Mean cross-entropy and each image's top-1 correctness (1.0 or 0.0) over ``(logits, labels)`` batches
    (:func:`fl_core.networks.evaluation.evaluate_logits`; the accuracy is the mean of the second)."""
    correct: list[torch.Tensor] = []

    def recorded() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for logits, y in batches:
            correct.append((logits.argmax(1) == y).cpu())
            yield logits, y

    loss, _ = evaluate_logits(recorded())
    return loss, torch.cat(correct).double().numpy()


def model_loss_and_correct(model: nn.Module, inputs: LabelledInputs, device: torch.device, batch_size: int
                           ) -> tuple[float, np.ndarray]:
    """:func:`loss_and_correct` of ``model`` (eval mode, autocast) on labelled inputs."""
    correct: list[torch.Tensor] = []
    loss, _ = evaluate_classifier(model, inputs.batches(batch_size), device, autocast=True,
                                  on_logits=lambda logits, y: correct.append((logits.argmax(1) == y).cpu()))
    return loss, torch.cat(correct).double().numpy()


def output_positions(model: nn.Module, example: torch.Tensor) -> dict[str, int]:
    """Output positions per image of every convolution (spatial positions) and linear layer (tokens), summed over
    its calls in one forward pass of ``example`` (one image)."""
    positions: dict[str, int] = {}

    def record(name: str):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            count = output[0, 0].numel() if isinstance(module, nn.modules.conv._ConvNd) else \
                output.numel() // output.shape[-1]
            positions[name] = positions.get(name, 0) + count
        return hook

    handles = [module.register_forward_hook(record(name)) for name, module in model.named_modules()
               if isinstance(module, nn.modules.conv._ConvNd | nn.Linear)]
    try:
        with torch.no_grad():
            model(example)
    finally:
        for handle in handles:
            handle.remove()
    return positions


@contextlib.contextmanager
def _gradients(model: nn.Module) -> Iterator[None]:
    """Gradients on ``model``'s parameters inside the context (tracing, Taylor scores); none, and none kept, after."""
    model.zero_grad(set_to_none=True)
    model.requires_grad_(True)
    try:
        with torch.enable_grad():
            yield
    finally:
        model.requires_grad_(False)
        model.zero_grad(set_to_none=True)


def _absorb_mean_inputs(layer: nn.Module, inputs: Sequence[int], means: np.ndarray) -> None:
    """``bias += Σ_k μ_k Σ_spatial W[:, inputs_k]`` for a groups-1 conv or a linear layer (in place, on a copy)."""
    with torch.no_grad():
        weight = layer.weight[:, list(inputs)].flatten(2).sum(2) if layer.weight.ndim > 2 else layer.weight[:, inputs]
        shift = weight @ torch.as_tensor(means, dtype=weight.dtype, device=weight.device)
        if layer.bias is None:
            layer.bias = nn.Parameter(torch.zeros_like(shift), requires_grad=layer.weight.requires_grad)
        layer.bias += shift


class PrunedEvaluation:
    """Loss and accuracy of pruned copies on the evaluation set, each run from where it first differs (module
    docstring, :mod:`fl_core.networks.partial_forward`).

    Removing channels leaves every remaining value unchanged up to the modules that read them, so a pruned copy runs
    from the chain module holding its first channel-mixing reader, on the template's input of that module without the
    removed channels (or from the nearest module before it that is fed directly, after the first changed one);
    failing its check on the first images, from the first module it changes, on the template's input there; failing
    that, whole (with a note). Copies that remove as many channels share a structure: the first of each is checked.
    The template's passes over the evaluation set are kept when they fit ``memory_bytes``, so what comes before runs
    once for every copy.

    Args:
        pruner: the layer's pruner (its template is the intact network).
        evaluation: the evaluation set.
        device, batch_size, memory_bytes: where and how to run.
    """

    def __init__(self, pruner: LayerPruner, evaluation: LabelledInputs, device: torch.device, batch_size: int,
                 memory_bytes: int) -> None:
        self.template, self.evaluation = pruner.template.eval(), evaluation
        self.device, self.batch_size = device, batch_size
        self.probe = evaluation.head(PROBE_IMAGES)[0].to(device)
        with torch.no_grad():
            self.chain, _ = module_chain(self.template, self.probe)
        first = self.chain.start(pruner.changed_modules())
        readers = {self.chain.owner(name): name for name in reversed(pruner.readers())}
        owner = min((owner for owner in readers if owner is not None), default=None)
        sliced = None if owner is None else self.chain.lowered(owner)
        self.routes: list[tuple[int, str | None]] = [(sliced, readers[owner])] if sliced and sliced > first else []
        self.routes += [(first, None)] if first > 0 else []
        starts = {start for start, _ in self.routes}
        with torch.no_grad(), capturing_inputs(self.template, self.chain, starts) as captured:
            self.template(self.probe)
        self.probe_inputs = dict(captured)
        self.passes = PrefixPasses(self.template, self.chain, starts, lambda: evaluation.batches(batch_size), device,
                                   memory_bytes)
        self.notes: list[str] = []
        self.starts_used: set[int] = set()
        self.route: tuple[int, str | None, bool] | None = None

    @property
    def computed_from(self) -> str | None:
        """The module every pruned copy so far ran from (``None``: the whole network, or not the same for all)."""
        return self.chain.name(next(iter(self.starts_used))) if len(self.starts_used) == 1 else None

    def template_scores(self) -> tuple[float, np.ndarray]:
        """The intact network's loss and each image's top-1 correctness (from the kept passes)."""
        with inference_autocast(self.device):
            return loss_and_correct((p.output.float(), p.y) for p in self.passes)

    def scores(self, pruned: PrunedNetwork, label: str, check: bool = True) -> tuple[float, np.ndarray]:
        """Loss and each image's top-1 correctness of one pruned copy (:func:`loss_and_correct`; ``label`` names it in
        a note if it runs whole). ``check``: find its
        route by checking it on the probe images; otherwise take the route of the last checked copy (copies that
        remove as many channels have the same structure)."""
        if check:
            self.route = self._checked_route(pruned, label)
        if self.route is None:
            self.starts_used.add(0)
            return model_loss_and_correct(pruned.model, self.evaluation, self.device, self.batch_size)
        start, reader, in_place = self.route
        self.starts_used.add(start)
        keep = None if reader is None else self._kept(pruned, reader, start)
        with inference_autocast(self.device):
            return loss_and_correct((suffix_forward(pruned.model, self.chain, start, self._input(
                p.activations[start], keep, in_place), p.x).float(), p.y) for p in self.passes)

    def _kept(self, pruned: PrunedNetwork, reader: str, start: int) -> torch.Tensor:
        """Indices of the channels of the start's input that the reader keeps."""
        keep = torch.ones(self.probe_inputs[start].shape[1], dtype=torch.bool)
        removed = torch.as_tensor(pruned.removed_inputs[reader], dtype=torch.long)
        keep[removed[removed < len(keep)]] = False
        return keep.nonzero().squeeze(1).to(self.device)

    @staticmethod
    def _input(activation: torch.Tensor, keep: torch.Tensor | None, in_place: bool) -> torch.Tensor:
        """A copy's input of its start: the template's without the removed channels (a new tensor), or the
        template's itself (a fresh copy when the suffix changes it in place)."""
        if keep is not None:
            return activation[:, keep]
        return activation.clone() if in_place else activation

    def _checked_route(self, pruned: PrunedNetwork, label: str) -> tuple[int, str | None, bool] | None:
        """``(start, reader whose removed inputs are dropped or None, whether the suffix changes its input in place)``
        of the first route whose suffix reproduces the copy's own forward pass on the probe images; ``None``: run the
        copy whole."""
        with torch.no_grad():
            full = pruned.model(self.probe)
        for start, reader in self.routes:
            if reader is not None and reader not in pruned.removed_inputs:
                continue
            keep = None if reader is None else self._kept(pruned, reader, start)
            with torch.no_grad():
                matches, in_place = suffix_check(pruned.model, self.chain, start,
                                                 self._input(self.probe_inputs[start], keep, True), self.probe, full)
            if matches:
                return start, reader, in_place and reader is None
        if self.routes:
            self.notes.append(fallback_note(label, self.chain, self.routes[-1][0]))
        return None


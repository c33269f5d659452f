"""Modified copies of one network, each run only from the first module where it differs from the original.

Re-scoring filter swaps, the per-layer sweep, lesions, peer replacement and pruning curves all score copies of one
network that equal it up to some module. The original's input of that module is computed once per batch (or kept for
a whole in-memory image set that fits a memory budget: :class:`PrefixPasses`) and every copy runs only its suffix.

* **Chain** (:func:`module_chain`): the model's children in execution order, recursing into ``nn.Sequential``
  containers (torchvision's ``features``, timm's ``blocks`` / ``stages``), found with hooks on one forward pass.
  Module i is *fed directly* when its input is the very tensor module i − 1 returned (nothing computed between).
  Modules called more than once end the chain.
* **Start** of a copy (:meth:`ModuleChain.start`): the first chain module holding a changed parameter or buffer,
  lowered to the nearest module fed directly (0: the whole network runs). Callers that know more may start later on
  a transformed activation: a lesion after the module whose output it changes, a pruned copy at the first module
  that reads the remaining channels (on the original's activation without the removed ones).
* **Suffix** (:func:`suffix_forward`): the copy's own forward with chain modules 0 … s − 1 replaced by stubs returning
  the activation at s, so modules s, s + 1, … and whatever the forward computes after them run as usual.
* **Checked** (:func:`suffix_check`): on the first images of the first batch every copy's suffix output must equal
  its full forward pass (``torch.allclose``, rtol 1e-5 of the largest output); otherwise (e.g. a later module reads a
  prefix activation too) the copy runs whole and a note says why. A suffix that changes its input in place gets a
  fresh copy of it each time.
* **Built once**: a copy with other weights shares every module it does not change with the original
  (:func:`copy_modules`, :func:`shared_copy`); nothing is copied per batch.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

PROBE_IMAGES = 2
"""Images of the first batch on which every suffix is checked against its full forward pass."""
RTOL = 1e-5

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------- chain


@dataclass(frozen=True)
class ModuleChain:
    """Chain modules of a model (module docstring).

    Attributes:
        names: module names in execution order (each called once per forward pass).
        direct: per module, whether its input is the tensor the previous chain module returned.
    """

    names: tuple[str, ...]
    direct: tuple[bool, ...]

    def owner(self, name: str) -> int | None:
        """Index of the chain module that is or holds module, parameter or buffer ``name``; ``None`` when none does."""
        return next((i for i, chain_name in enumerate(self.names)
                     if name == chain_name or name.startswith(f"{chain_name}.")), None)

    def lowered(self, index: int) -> int:
        """The nearest start at or before ``index``: a module fed directly by the one before it (0: everything)."""
        start = min(index, len(self.names) - 1)
        while start > 0 and not self.direct[start]:
            start -= 1
        return max(start, 0)

    def start(self, changed: Sequence[str]) -> int:
        """Chain index where a copy with these changed modules, parameters or buffers starts (0: the whole network)."""
        owners = [self.owner(name) for name in changed]
        if None in owners:
            return 0
        return self.lowered(min([*owners, len(self.names) - 1]))

    def name(self, start: int) -> str | None:
        """The module a copy starting at ``start`` runs from, ``None`` for the whole network."""
        return self.names[start] if start > 0 else None


def chain_candidates(model: nn.Module) -> list[str]:
    """The model's children, recursing into ``nn.Sequential`` containers (module docstring)."""
    def expand(module: nn.Module, prefix: str) -> Iterator[str]:
        for name, child in module.named_children():
            if isinstance(child, nn.Sequential):
                yield from expand(child, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"
    return list(expand(model, ""))


def module_chain(model: nn.Module, x: torch.Tensor) -> tuple[ModuleChain, torch.Tensor]:
    """The :class:`ModuleChain` of ``model`` from one forward pass on ``x``, and the model's output."""
    order: list[str] = []
    direct: list[bool] = []
    calls: dict[str, int] = {}
    last: list[torch.Tensor | None] = [None]

    def before(name: str):
        def hook(module, args):
            calls[name] = calls.get(name, 0) + 1
            if calls[name] == 1:
                order.append(name)
                direct.append(bool(args) and last[0] is not None and args[0] is last[0])
        return hook

    def after(module, args, output):
        last[0] = output if isinstance(output, torch.Tensor) else None

    handles = []
    for name in chain_candidates(model):
        module = model.get_submodule(name)
        handles += [module.register_forward_pre_hook(before(name)), module.register_forward_hook(after)]
    try:
        output = model(x)
    finally:
        for handle in handles:
            handle.remove()
    once = next((i for i, name in enumerate(order) if calls[name] > 1), len(order))
    return ModuleChain(tuple(order[:once]), tuple(direct[:once])), output


# ---------------------------------------------------------------------------------------------------- suffixes


@contextlib.contextmanager
def capturing_inputs(model: nn.Module, chain: ModuleChain, starts: Iterable[int]) -> Iterator[dict[int, torch.Tensor]]:
    """During the forward passes in this context, record a copy of the input of each chain module in ``starts``."""
    captured: dict[int, torch.Tensor] = {}

    def hook(index: int):
        def record(module, args):
            captured[index] = args[0].clone()
        return record

    handles = [model.get_submodule(chain.names[i]).register_forward_pre_hook(hook(i)) for i in set(starts) if i > 0]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def suffix_forward(model: nn.Module, chain: ModuleChain, start: int, activation: torch.Tensor,
                   x: torch.Tensor, stubs: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
    """``model(x)`` with chain modules 0 … start − 1 replaced by stubs returning ``activation`` (module docstring),
    and each module named in ``stubs`` (inside a later chain module) by one returning its tensor.

    ``model`` may be the original or any copy with the same module names; ``x`` only goes to the stubbed prefix."""
    outputs = {name: activation for name in prefix_stubs(chain, start)} | dict(stubs or {})
    stubbed = [(model.get_submodule(name), value) for name, value in outputs.items()]
    try:
        for module, value in stubbed:  # (nn.Module.__setattr__'s checks cost more than the stub)
            object.__setattr__(module, "forward", functools.partial(_stub, value))
        return model(x)
    finally:
        for module, _ in stubbed:
            object.__delattr__(module, "forward")


def _stub(value: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return value


@functools.cache
def prefix_stubs(chain: ModuleChain, start: int) -> tuple[str, ...]:
    """The fewest modules to stub for a suffix from ``start``: each chain module before it, or the largest
    ``nn.Sequential`` holding it and no chain module from ``start`` on (a container of stubs returns the activation
    too: its last stub's)."""
    later = chain.names[start:]
    stubs: list[str] = []
    for name in chain.names[:start]:
        parts = name.split(".")
        outer = next((".".join(parts[:i]) for i in range(1, len(parts))
                      if not any(n.startswith(".".join(parts[:i]) + ".") for n in later)), name)
        if outer not in stubs:
            stubs.append(outer)
    return tuple(stubs)


def same_output(split: torch.Tensor, full: torch.Tensor) -> bool:
    """Whether a suffix output equals the full forward pass's: same shape, ``allclose`` within :data:`RTOL` of the
    largest value."""
    scale = float(full.abs().max()) if full.numel() else 0.0
    return split.shape == full.shape and torch.allclose(split.float(), full.float(), rtol=RTOL, atol=RTOL * scale)


def suffix_check(model: nn.Module, chain: ModuleChain, start: int, activation: torch.Tensor, x: torch.Tensor,
                 full: torch.Tensor) -> tuple[bool, bool]:
    """``(matches, in_place)``: whether ``model``'s suffix from ``start`` on ``activation`` reproduces ``full`` (its
    own forward pass on ``x``), and whether the suffix changed ``activation`` in place (it then needs a fresh copy)."""
    kept = activation.clone()
    try:
        matches = same_output(suffix_forward(model, chain, start, activation, x), full)
    except Exception as error:  # a forward that cannot take the stubs: run it whole
        log.debug("suffix forward pass failed: %s", error)
        matches = False
    return matches, not torch.equal(activation, kept)


def fallback_note(label: str, chain: ModuleChain, start: int) -> str:
    """Why a copy that could have run from ``start`` runs whole."""
    return (f"{label}: full forward passes (from {chain.names[start]} on, its output did not match its full forward "
            "pass)")


def copy_modules(model: nn.Module, names: Iterable[str]) -> nn.Module:
    """A copy of ``model`` whose modules ``names`` are copies with tensors of their own and whose other modules are
    ``model``'s own.

    Only the containers on the way to a copied module are new (shallow copies with their own child, parameter,
    buffer and hook dictionaries), so a copy costs what the copied modules hold. Run the copy, stub it
    (:func:`suffix_forward`) or change its copied modules; never train it or change a shared module in place (a hook
    on a shared module fires in both).
    """
    names = set(names)
    on_the_way = {".".join(parts[:i]) for parts in (name.split(".") for name in names) for i in range(len(parts))}

    def clone(module: nn.Module, prefix: str) -> nn.Module:
        if prefix in names:
            return _own_copy(module)
        if prefix and prefix not in on_the_way:
            return module
        new = _shallow_copy(module)
        for child, submodule in module._modules.items():
            if submodule is not None:
                new._modules[child] = clone(submodule, f"{prefix}.{child}" if prefix else child)
        return new

    return clone(model, "")


def _shallow_copy(module: nn.Module) -> nn.Module:
    """The module's attributes in a new object, with dictionaries of its own (children, tensors, hooks)."""
    new = copy.copy(module)
    new.__dict__.update({key: value.copy() for key, value in vars(module).items() if isinstance(value, dict)})
    return new


def _own_copy(module: nn.Module) -> nn.Module:
    """A deep copy; for a module without children, its tensors cloned into a shallow copy (the same, faster)."""
    if next(module.children(), None) is not None:
        return copy.deepcopy(module)
    new = _shallow_copy(module)
    new._parameters.update({key: nn.Parameter(value.detach().clone(), value.requires_grad)
                            for key, value in module._parameters.items() if value is not None})
    new._buffers.update({key: value.clone() for key, value in module._buffers.items() if value is not None})
    return new


def shared_copy(model: nn.Module, replaced: Mapping[str, torch.Tensor]) -> nn.Module:
    """A copy of ``model`` (:func:`copy_modules`) with new values for the parameters / buffers named in ``replaced``:
    the modules holding them are copied, every other module is the original's (the original is not changed)."""
    clone = copy_modules(model, {name.rpartition(".")[0] for name in replaced})
    with torch.no_grad():
        for name, value in replaced.items():
            module, _, attribute = name.rpartition(".")
            getattr(clone.get_submodule(module), attribute).copy_(value)
    return clone


def changed_keys(patches: Sequence[Mapping[str, torch.Tensor]], originals: Mapping[str, torch.Tensor]
                 ) -> list[list[str]]:
    """Per patch, the names whose tensors differ from the original's."""
    return [[key for key, tensor in patch.items() if not torch.equal(tensor, originals[key])] for patch in patches]


# ------------------------------------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class SuffixPlan:
    """How each copy of a list runs on a batch.

    Attributes:
        chain: the original's chain.
        starts: per copy, the chain index where its own forward pass starts (0: the whole network).
        fresh_copy: per copy, whether its suffix changes its input in place (so it gets a copy).
        notes: why copies that could have run from a later module did not.
    """

    chain: ModuleChain
    starts: tuple[int, ...]
    fresh_copy: tuple[bool, ...]
    notes: tuple[str, ...]

    def start_name(self, index: int) -> str | None:
        """The module where copy ``index``'s own forward pass starts, ``None`` for the whole network."""
        return self.chain.name(self.starts[index])

    def outputs(self, original: nn.Module, copies: Sequence[nn.Module], x: torch.Tensor) -> Iterator[torch.Tensor]:
        """The original's output on ``x``, then each copy's, in order."""
        with capturing_inputs(original, self.chain, self.starts) as captured:
            yield original(x)
        for model, start, fresh in zip(copies, self.starts, self.fresh_copy):
            if start == 0:
                yield model(x)
            else:
                activation = captured[start].clone() if fresh else captured[start]
                yield suffix_forward(model, self.chain, start, activation, x)


def full_forwards(copies: int) -> SuffixPlan:
    """The plan of no sharing: every copy runs the whole network."""
    return SuffixPlan(ModuleChain((), ()), (0,) * copies, (False,) * copies, ())


def plan_suffixes(original: nn.Module, copies: Sequence[nn.Module], changed: Sequence[Sequence[str]],
                  x: torch.Tensor, names: Sequence[str] = ()) -> SuffixPlan:
    """Probe the original's chain and check every copy's suffix on ``x`` (the first images of a batch).

    Args:
        original: the unchanged model.
        copies: models with the original's module names (e.g. from :func:`shared_copy`).
        changed: per copy, the modules, parameters or buffers that differ from the original's.
        x: probe images.
        names: copy names for the notes.
    """
    chain, _ = module_chain(original, x)
    starts = [chain.start(keys) for keys in changed]
    with capturing_inputs(original, chain, starts) as captured:
        original(x)
    fresh, notes = [False] * len(starts), []
    for i, (model, start) in enumerate(zip(copies, starts)):
        if start == 0:
            continue
        matches, fresh[i] = suffix_check(model, chain, start, captured[start].clone(), x, model(x))
        if not matches:
            notes.append(fallback_note(names[i] if i < len(names) else f"copy {i + 1}", chain, start))
            starts[i] = 0
    return SuffixPlan(chain, tuple(starts), tuple(fresh), tuple(notes))


# ------------------------------------------------------------------------------------------------ kept passes


@dataclass(frozen=True)
class PrefixPass:
    """The original's pass over one batch.

    Attributes:
        x, y: the batch on the device.
        output: the original's output.
        activations: chain index → the original's input of that chain module.
    """

    x: torch.Tensor
    y: torch.Tensor
    output: torch.Tensor
    activations: dict[int, torch.Tensor]

    @property
    def nbytes(self) -> int:
        tensors = (self.x, self.y, self.output, *self.activations.values())
        return sum(t.numel() * t.element_size() for t in tensors)


class PrefixPasses:
    """The original's passes over labelled batches, with its inputs of the chain modules ``starts`` captured.

    The first complete iteration keeps every pass when they fit ``memory_bytes`` together (later iterations then run
    nothing before the starts); otherwise each iteration runs the batches again.

    Args:
        model: the original.
        chain: its chain.
        starts: chain indices whose inputs the copies need.
        batches: returns a fresh iterable of ``(x, y)`` batches.
        device: where to run.
        memory_bytes: budget for keeping the passes.
    """

    def __init__(self, model: nn.Module, chain: ModuleChain, starts: Iterable[int],
                 batches: Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]], device: torch.device,
                 memory_bytes: int) -> None:
        self.model, self.chain, self.starts = model, chain, set(starts)
        self.batches, self.device, self.memory_bytes = batches, device, memory_bytes
        self.kept: list[PrefixPass] | None = None

    def __iter__(self) -> Iterator[PrefixPass]:
        if self.kept is not None:
            yield from self.kept
            return
        kept: list[PrefixPass] | None = []
        size = 0
        for x, y in self.batches():
            x, y = x.to(self.device), y.to(self.device)
            with torch.no_grad(), capturing_inputs(self.model, self.chain, self.starts) as captured:
                output = self.model(x)
            prefix_pass = PrefixPass(x, y, output, dict(captured))
            if kept is not None:
                size += prefix_pass.nbytes
                if size <= self.memory_bytes:
                    kept.append(prefix_pass)
                else:
                    kept = None
            yield prefix_pass
        self.kept = kept

"""Shared prefix: variants of one network that differ only from some module on run the common start once per batch.

* **Chain** (:func:`module_chain`): the model's children in execution order, recursing into ``nn.Sequential``
  containers (torchvision's ``features``, timm's ``blocks`` / ``stages``), found with hooks on one forward pass.
  Module i is *fed directly* when its input is the very tensor module i − 1 returned (nothing computed between).
  Modules called more than once end the chain.
* **Start** of a variant: the first chain module holding a parameter or buffer that differs from the original's,
  lowered to the last module up to which every link is direct (0: the whole network runs).
* **Per batch** (:meth:`PrefixPlan.variant_logits`): the original runs in full and the input of every needed start
  is copied on the way; a variant starting at s then runs the model's own forward with modules 0 … s − 1 replaced
  by stubs returning that copy, so its modules s, s + 1, … and whatever the forward computes after them run as usual.
* **Checked** (:func:`plan_prefix_sharing`): on the first images of the first batch every sharing variant's logits
  from its start must equal those of its full forward pass (``torch.allclose``, rtol 1e-5); otherwise (e.g. a later
  module reads a prefix activation too) that variant falls back to full forward passes and the reason is noted.
  A suffix that changes the copied input in place is given a fresh copy each time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

PROBE_IMAGES = 2
RTOL = 1e-5

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModuleChain:
    """Chain modules of a model (module docstring).

    Attributes:
        names: module names in execution order (each called once per forward pass).
        direct: per module, whether its input is the tensor the previous chain module returned.
    """

    names: tuple[str, ...]
    direct: tuple[bool, ...]

    def start(self, changed: Sequence[str]) -> int:
        """Chain index where a variant with these changed parameter / buffer names starts (0: the whole network)."""
        owners = [self.owner(key) for key in changed]
        if None in owners:
            return 0
        last = min([*owners, len(self.names) - 1])
        start = 0
        while start < last and self.direct[start + 1]:
            start += 1
        return start

    def owner(self, key: str) -> int | None:
        """Index of the chain module holding parameter / buffer ``key``, ``None`` when none does."""
        return next((i for i, name in enumerate(self.names) if key.startswith(f"{name}.")), None)


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


@contextlib.contextmanager
def capturing_inputs(model: nn.Module, chain: ModuleChain, starts: set[int]) -> Iterator[dict[int, torch.Tensor]]:
    """During the forward passes in this context, record a copy of the input of each chain module in ``starts``."""
    captured: dict[int, torch.Tensor] = {}

    def hook(index: int):
        def record(module, args):
            captured[index] = args[0].clone()
        return record

    handles = [model.get_submodule(chain.names[i]).register_forward_pre_hook(hook(i)) for i in starts if i > 0]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def suffix_forward(model: nn.Module, chain: ModuleChain, start: int, activation: torch.Tensor,
                   x: torch.Tensor) -> torch.Tensor:
    """``model(x)`` with chain modules 0 … start − 1 replaced by stubs returning ``activation`` (module docstring)."""
    prefix = [model.get_submodule(name) for name in chain.names[:start]]

    def stub(*args, **kwargs) -> torch.Tensor:
        return activation

    try:
        for module in prefix:
            module.forward = stub
        return model(x)
    finally:
        for module in prefix:
            del module.forward


@dataclass(frozen=True)
class PrefixPlan:
    """How each variant runs on a batch.

    Attributes:
        chain: the model's chain.
        starts: per variant, the chain index where its own forward pass starts (0: the whole network; the
            original, first, always 0).
        fresh_copy: per variant, whether its suffix changes its input in place (so it gets a copy).
        notes: why variants that could have shared the prefix did not.
    """

    chain: ModuleChain
    starts: tuple[int, ...]
    fresh_copy: tuple[bool, ...]
    notes: tuple[str, ...]

    def start_name(self, variant: int) -> str | None:
        """The module where the variant's own forward pass starts, ``None`` for the whole network."""
        start = self.starts[variant]
        return self.chain.names[start] if start > 0 else None

    def variant_logits(self, model: nn.Module, x: torch.Tensor, load: Callable[[int], None]) -> Iterator[torch.Tensor]:
        """Each variant's output on ``x``, in order; ``load(i)`` puts variant i's weights into ``model``."""
        load(0)
        with capturing_inputs(model, self.chain, set(self.starts)) as captured:
            yield model(x)
        for i in range(1, len(self.starts)):
            load(i)
            start = self.starts[i]
            if start == 0:
                yield model(x)
            else:
                activation = captured[start].clone() if self.fresh_copy[i] else captured[start]
                yield suffix_forward(model, self.chain, start, activation, x)


def full_forwards(variants: int) -> PrefixPlan:
    """The plan of no sharing: every variant runs the whole network."""
    return PrefixPlan(ModuleChain((), ()), (0,) * variants, (False,) * variants, ())


def plan_prefix_sharing(model: nn.Module, changed: Sequence[Sequence[str]], x: torch.Tensor,
                        load: Callable[[int], None], names: Sequence[str] = ()) -> PrefixPlan:
    """Probe the chain and check every sharing variant on ``x`` (the first images of a batch; module docstring).

    Args:
        model: the scored model.
        changed: per variant, the parameter / buffer names whose values differ from the original's (the first
            variant must be the original: ``[]``).
        x: probe images.
        load: ``load(i)`` puts variant i's weights into ``model``.
        names: variant names for the notes.
    """
    if changed[0]:
        return dataclasses.replace(full_forwards(len(changed)), notes=("the first variant is not the original",))
    load(0)
    chain, _ = module_chain(model, x)
    starts = [0] + [chain.start(keys) for keys in changed[1:]]
    with capturing_inputs(model, chain, set(starts)) as captured:
        model(x)
    fresh, notes = [False] * len(starts), []
    for i in range(1, len(starts)):
        if starts[i] == 0:
            continue
        load(i)
        full = model(x)
        activation = captured[starts[i]].clone()
        try:
            split = suffix_forward(model, chain, starts[i], activation, x)
            scale = float(full.abs().max()) if full.numel() else 0.0
            same = split.shape == full.shape and torch.allclose(split, full, rtol=RTOL, atol=RTOL * scale)
        except Exception as error:  # a model whose forward cannot take the stubs: run it whole
            same = False
            log.debug("suffix forward pass failed: %s", error)
        if not same:
            label = names[i] if i < len(names) else f"variant {i}"
            notes.append(f"{label}: full forward passes (from {chain.names[starts[i]]} on, its output did not "
                         "match its full forward pass)")
            starts[i] = 0
            continue
        fresh[i] = not torch.equal(activation, captured[starts[i]])
    return PrefixPlan(chain, tuple(starts), tuple(fresh), tuple(notes))


def changed_keys(patches: Sequence[Mapping[str, torch.Tensor]], originals: Mapping[str, torch.Tensor]
                 ) -> list[list[str]]:
    """Per variant, the patched names whose tensors differ from the original's."""
    return [[key for key, tensor in patch.items() if not torch.equal(tensor, originals[key])] for patch in patches]

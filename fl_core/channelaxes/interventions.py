"""Lesions and peer replacement of a conv layer's channels (docs/methods.md §5, proposed protocol).

**Site.** Channels are intervened on where the next layers read them, the post-BN-activation ``a_i`` of
:mod:`fl_core.channelaxes.site`.

**Substitutions.** Every intervention replaces one channel per position, ``a_i ← b + Σ_j W_ij a_j``:

* zero-ablation: ``a_i ← 0``;
* mean-ablation (primary lesion): ``a_i ← E_cal[a_i]``;
* peer replacement: ``a_i ← b₀ + Σ_{j∈P(i)} β_j a_j``, the ridge fit of
  :func:`fl_core.channelaxes.moments.ridge_peer_coefficients`.

**Shared prefix** (:mod:`fl_core.suffix`). A lesioned copy equals the intact network up to the chain module that holds
the site, so the intact network runs once per batch and G copies run together from there: the intact input of that
module is repeated G times (copy-major G·B samples) and each copy's substitution is applied at the site by a hook, or
directly to the repeated input when the site is the output of the chain module before (then only the layers after
the site run per copy). The copies' suffixes are checked against their full forward passes on the first images and
fall back to replicating the input ("full" mode) when they differ.

**Folding.** Where every reader of ``a`` is a groups-1 convolution (and nothing else reads it), peer replacement can
be folded into the readers' weights, ``W[:, j] += β_j W[:, i]``, ``bias += b₀ Σ_spatial W[:, i]``, ``W[:, i] = 0``
(:func:`fold_peer_replacement`). It equals the substitution exactly when the readers do not pad (1×1 kernels or no
padding); at padded borders it is approximate.

Everything here runs on private copies of models (``LoadedModel.copy_model()``): hooks and folds change modules.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fl_core.backend import Progress, inference_autocast, report
from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.site import ChannelSite, on_call
from fl_core.errors import AnalysisError
from fl_core.results import Result
from fl_core.suffix import PROBE_IMAGES, ModuleChain, PrefixPasses, module_chain, same_output, suffix_forward

LESION_KINDS = ("mean", "zero", "replace")


# -------------------------------------------------------------------------------------------- substitutions


@dataclass(frozen=True)
class Substitutions:
    """G single-channel substitutions, one per lesioned copy: ``a_{c_g} ← b_g + Σ_j W_gj a_j``.

    Attributes:
        channels: ``(G,)`` the substituted channel of each copy.
        intercepts: ``(G,)`` b_g.
        weights: ``(G, C)`` W (zero rows for ablations).
    """

    channels: torch.Tensor
    intercepts: torch.Tensor
    weights: torch.Tensor

    def __len__(self) -> int:
        return len(self.channels)

    def __getitem__(self, index: slice) -> Substitutions:
        return Substitutions(self.channels[index], self.intercepts[index], self.weights[index])

    @classmethod
    def constant(cls, values: torch.Tensor) -> Substitutions:
        """``a_i ← values_i`` for every channel i (zeros: zero-ablation; calibration means: mean-ablation)."""
        n = len(values)
        return cls(torch.arange(n), values.detach().double().cpu(), torch.zeros(n, n, dtype=torch.float64))

    @classmethod
    def identity(cls, channels: torch.Tensor, n_channels: int) -> Substitutions:
        """``a_i ← a_i`` (no change; checks the replay)."""
        weights = torch.zeros(len(channels), n_channels, dtype=torch.float64)
        weights[torch.arange(len(channels)), channels] = 1.0
        return cls(channels.long(), torch.zeros(len(channels), dtype=torch.float64), weights)

    @classmethod
    def peer_replacement(cls, peers: torch.Tensor, beta: torch.Tensor, intercept: torch.Tensor) -> Substitutions:
        """``a_i ← b₀_i + Σ_k β_ik a_{P_ik}`` for every channel i, from ``(C, k)`` peers and coefficients."""
        n = len(peers)
        weights = torch.zeros(n, n, dtype=torch.float64)
        weights.scatter_(1, peers.cpu().long(), beta.detach().double().cpu())
        return cls(torch.arange(n), intercept.detach().double().cpu(), weights)

    @staticmethod
    def concat(parts: list[Substitutions]) -> Substitutions:
        return Substitutions(*(torch.cat([getattr(p, f) for p in parts]) for f in ("channels", "intercepts",
                                                                                    "weights")))


def _substituted(a: torch.Tensor, subs: Substitutions, batch: int) -> torch.Tensor:
    """``a`` (B or G·B samples) → G·B samples, copy g with its substitution applied (copy-major order)."""
    n = len(subs)
    weights = subs.weights.to(a.device, a.dtype)
    intercepts = subs.intercepts.to(a.device, a.dtype).view(n, *([1] * (a.ndim - 1)))
    if a.shape[0] == batch:
        copies = a.unsqueeze(0).repeat(n, *([1] * a.ndim))
        values = intercepts + torch.einsum("gc,bc...->gb...", weights, a)
    else:
        copies = a.reshape(n, batch, *a.shape[1:]).clone()
        values = intercepts + torch.einsum("gc,gbc...->gb...", weights, copies)
    copies[torch.arange(n, device=a.device), :, subs.channels.to(a.device)] = values
    return copies.reshape(n * batch, *a.shape[1:])


def lesion_start(chain: ModuleChain, site: ChannelSite) -> tuple[int, bool]:
    """``(start, at_start)``: the chain module the lesioned copies run from (:mod:`fl_core.suffix`; 0: the whole
    network) and whether the substitution applies to that module's input (the site is the chain module before it)
    rather than at the site inside the suffix."""
    owner = chain.owner(site.activation)
    if owner is None:
        return 0, False
    if chain.names[owner] == site.activation and owner + 1 < len(chain.names) and chain.direct[owner + 1]:
        return owner + 1, True
    return chain.lowered(owner), False


class LesionedCopies:
    """G substituted copies of one network run together, their G·B samples copy-major (module docstring).

    From ``start`` on the suffix runs on the original's input of that chain module repeated G times (substituted
    first when ``at_start``); from 0 the input is replicated. Otherwise the substitution happens in a hook at the site.
    """

    def __init__(self, model: nn.Module, site: ChannelSite, chain: ModuleChain, start: int, at_start: bool) -> None:
        self.model, self.site, self.chain = model, site, chain
        self.start, self.at_start = start, at_start
        self.subs: Substitutions | None = None
        self.batch = 0

    def _at_site(self, _module: nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        return None if self.subs is None else _substituted(output, self.subs, self.batch)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The site hook (it fires only where the site runs: never when the copies start after it)."""
        with on_call(self.model, self.model.get_submodule(self.site.activation), self.site.activation_call,
                     self._at_site):
            yield

    def logits(self, x: torch.Tensor, activation: torch.Tensor | None, subs: Substitutions) -> torch.Tensor:
        """Logits ``(G, B, K)`` of the copies on images ``x``; ``activation``: the original's input of the start."""
        n, self.batch = len(subs), len(x)
        substituted_first = self.at_start and self.start > 0
        self.subs = None if substituted_first else subs  # (a stubbed site module's hooks still fire)
        try:
            if self.start == 0:
                return self.model(x.repeat(n, *([1] * (x.ndim - 1)))).reshape(n, len(x), -1).float()
            expanded = (_substituted(activation, subs, len(x)) if substituted_first
                        else activation.repeat(n, *([1] * (activation.ndim - 1))))
            out = suffix_forward(self.model, self.chain, self.start, expanded, x)
        finally:
            self.subs = None
        return out.reshape(n, len(x), -1).float()

    def check(self, x: torch.Tensor, activation: torch.Tensor | None, subs: Substitutions) -> bool:
        """Whether the copies' suffix reproduces their full forward passes on ``x`` (in full precision: reduced-
        precision kernels differ by batch size)."""
        if self.start == 0:
            return True
        with torch.autocast(x.device.type, enabled=False):
            split = self.logits(x, activation, subs)
            start, at_start = self.start, self.at_start
            self.start, self.at_start = 0, False
            try:
                full = self.logits(x, None, subs)
            finally:
                self.start, self.at_start = start, at_start
        return same_output(split, full)


@dataclass(frozen=True)
class SubstitutionEffects(Result):
    """Loss and accuracy of every substituted copy on the evaluation set, and of the intact model.

    Attributes:
        loss: ``(G,)`` mean cross-entropy per copy.
        accuracy: ``(G,)`` top-1 per copy.
        base_loss, base_accuracy: the intact model on the same images.
        mode: ``"suffix"`` (the copies ran from ``computed_from`` on, on the intact network's activation there) or
            ``"full"`` (whole copies, the input replicated).
        computed_from: the chain module the copies ran from (``None``: the whole network).
        passes: batched runs of copies; copies_per_pass: lesioned copies per run; n_images: evaluation images.
    """

    loss: np.ndarray
    accuracy: np.ndarray
    base_loss: float
    base_accuracy: float
    mode: str
    passes: int
    copies_per_pass: int
    n_images: int
    computed_from: str | None = None


def plan_passes(sample_bytes: int, n_substitutions: int, batch_size: int, memory_bytes: int) -> tuple[int, int]:
    """``(images per pass, copies per pass)`` so that copies × images × 4 × ``sample_bytes`` (an activation per
    image, with room for the temporaries) fits ``memory_bytes``."""
    per_sample = 4 * max(sample_bytes, 1)
    images = int(np.clip(memory_bytes // (per_sample * max(n_substitutions, 1)), 2, max(batch_size, 2)))
    copies = int(np.clip(memory_bytes // (per_sample * images), 1, max(n_substitutions, 1)))
    return images, copies


def substitution_effects(model: nn.Module, site: ChannelSite, inputs: LabelledInputs, subs: Substitutions, *,
                         device: torch.device, batch_size: int = 32, memory_bytes: int = 1 << 30,
                         progress: Progress | None = None) -> SubstitutionEffects:
    """Evaluate G substituted copies of ``model`` on ``inputs``, each run from the chain module where it first
    differs on the intact network's activation there (:mod:`fl_core.suffix`; module docstring).

    The intact network runs once per batch (its loss is the baseline); the copies' suffixes are checked against
    their full forward passes on the first images and run whole if they differ.

    Args:
        model: a private copy of the network, on ``device`` and in eval mode.
        site: from :func:`locate_site`.
        inputs: the labelled evaluation set.
        subs: the substitutions, one per copy.
        device: where to run.
        batch_size: largest number of images per pass.
        memory_bytes: activation memory to plan the copies per pass with.
        progress: ``progress(fraction, message)``.
    """
    n = len(subs)
    example = inputs.head(PROBE_IMAGES)[0].to(device)
    with torch.no_grad():
        chain, _ = module_chain(model, example)
    copies = LesionedCopies(model, site, chain, *lesion_start(chain, site))
    sample_bytes = max(site.sample_bytes, example[0].numel() * example.element_size())
    images_per_pass, per_pass = plan_passes(sample_bytes, n, batch_size, memory_bytes)
    passes = PrefixPasses(model, chain, {copies.start}, lambda: inputs.batches(images_per_pass), device, 0)
    loss = torch.zeros(n, dtype=torch.float64)
    correct = torch.zeros(n, dtype=torch.float64)
    base_loss = base_correct = 0.0
    runs = seen = 0
    checked = False
    with copies.installed(), torch.no_grad(), inference_autocast(device):
        for batch in passes:
            x, y, activation = batch.x, batch.y, batch.activations.get(copies.start)
            if not checked:
                probe = subs[torch.tensor([0, n - 1])] if n > 1 else subs
                if not copies.check(x[:PROBE_IMAGES], None if activation is None else activation[:PROBE_IMAGES],
                                    probe):
                    copies.start, copies.at_start = 0, False
                checked = True
            base_loss += float(F.cross_entropy(batch.output.float(), y, reduction="sum"))
            base_correct += float((batch.output.argmax(1) == y).sum())
            for first in range(0, n, per_pass):
                part = subs[first: first + per_pass]
                logits = copies.logits(x, activation, part)
                losses = F.cross_entropy(logits.flatten(0, 1), y.repeat(len(part)), reduction="none")
                loss[first: first + len(part)] += losses.view(len(part), -1).sum(1).double().cpu()
                correct[first: first + len(part)] += (logits.argmax(2) == y).sum(1).double().cpu()
                runs += 1
            seen += len(y)
            report(progress, seen / len(inputs), f"lesions: {seen}/{len(inputs)} images")
    if seen == 0:
        raise AnalysisError("The evaluation set is empty: give more images.")
    return SubstitutionEffects(loss=(loss / seen).numpy(), accuracy=(correct / seen).numpy(),
                               base_loss=base_loss / seen, base_accuracy=base_correct / seen,
                               mode="suffix" if copies.start else "full", passes=runs,
                               copies_per_pass=min(per_pass, n), n_images=seen,
                               computed_from=chain.name(copies.start))


# ---------------------------------------------------------------------------------------- per-channel effects


@dataclass(frozen=True)
class ChannelInterventions(Result):
    """Per-channel lesion and peer-replacement effects on the evaluation set (proposed, §5).

    Δ = intervened − intact; Δloss > 0 and Δaccuracy < 0 mean the channel mattered.

    Attributes:
        dloss, daccuracy: ``{kind: (C,)}`` for the kinds run (``mean``, ``zero``, ``replace``).
        peer_support: ``Δloss_mean − Δloss_replace``, the loss the peers recover (when both ran).
        base_loss, base_accuracy: the intact model.
        effects: the batched run (mode, passes).
        replacement_peers, replacement_beta, replacement_intercept: the ridge reconstruction used.
    """

    dloss: dict[str, np.ndarray]
    daccuracy: dict[str, np.ndarray]
    peer_support: np.ndarray | None
    base_loss: float
    base_accuracy: float
    effects: SubstitutionEffects
    replacement_peers: np.ndarray
    replacement_beta: np.ndarray
    replacement_intercept: np.ndarray

    _private_fields = ("replacement_peers", "replacement_beta", "replacement_intercept")


def channel_interventions(model: nn.Module, site: ChannelSite, inputs: LabelledInputs, means: torch.Tensor,
                          peers: torch.Tensor, beta: torch.Tensor, intercept: torch.Tensor, *,
                          kinds: tuple[str, ...] = LESION_KINDS, device: torch.device, batch_size: int = 32,
                          memory_bytes: int = 1 << 30, progress: Progress | None = None) -> ChannelInterventions:
    """Mean/zero-ablation and peer replacement of every channel of the site, all in one batched run.

    Args:
        model: a private copy on ``device`` (hooks are added and removed).
        site: from :func:`locate_site`.
        inputs: the evaluation set.
        means: ``(C,)`` calibration means of ``a`` (mean-ablation values).
        peers, beta, intercept: the ridge peer reconstruction of each channel (``(C, k)``, ``(C, k)``, ``(C,)``).
        kinds: any of ``mean``, ``zero``, ``replace``.
        device, batch_size, memory_bytes, progress: see :func:`substitution_effects`.
    """
    unknown = set(kinds) - set(LESION_KINDS)
    if unknown or not kinds:
        raise AnalysisError(f"Unknown lesion kinds {sorted(unknown)}; choose from {', '.join(LESION_KINDS)}.")
    builders = {"mean": lambda: Substitutions.constant(means),
                "zero": lambda: Substitutions.constant(torch.zeros_like(means)),
                "replace": lambda: Substitutions.peer_replacement(peers, beta, intercept)}
    subs = Substitutions.concat([builders[k]() for k in kinds])
    effects = substitution_effects(model, site, inputs, subs, device=device, batch_size=batch_size,
                                   memory_bytes=memory_bytes, progress=progress)
    n = site.n_channels
    dloss = {k: effects.loss[i * n:(i + 1) * n] - effects.base_loss for i, k in enumerate(kinds)}
    daccuracy = {k: effects.accuracy[i * n:(i + 1) * n] - effects.base_accuracy for i, k in enumerate(kinds)}
    support = dloss["mean"] - dloss["replace"] if {"mean", "replace"} <= set(kinds) else None
    return ChannelInterventions(dloss=dloss, daccuracy=daccuracy, peer_support=support,
                                base_loss=effects.base_loss, base_accuracy=effects.base_accuracy, effects=effects,
                                replacement_peers=peers.cpu().numpy(), replacement_beta=beta.cpu().numpy(),
                                replacement_intercept=intercept.cpu().numpy())


# ------------------------------------------------------------------------------------------------- folding


def fold_peer_replacement(model: nn.Module, site: ChannelSite, channel: int, peers: torch.Tensor,
                          beta: torch.Tensor, intercept: float | torch.Tensor) -> None:
    """Fold ``a_i ← b₀ + Σ_j β_j a_j`` into every reader conv of the site and drop channel i (in place).

    ``W[:, j] += β_j W[:, i]``, ``bias += b₀ Σ_spatial W[:, i]``, ``W[:, i] = 0``. Exact when
    ``site.exact_fold``; approximate at zero-padded borders otherwise. Only for a private copy of a model.
    """
    if not site.foldable:
        raise AnalysisError(f"The channels of {site.layer} are read by {', '.join(site.consumers) or 'functional ops'}"
                            ", not only by groups-1 convolutions: peer replacement cannot be folded there.")
    with torch.no_grad():
        for name in site.consumers:
            conv = model.get_submodule(name)
            column = conv.weight[:, channel].clone()
            coefficients = beta.to(column.device, column.dtype)
            conv.weight.index_add_(1, peers.to(column.device).long(),
                                   column.unsqueeze(1) * coefficients.view(1, -1, *([1] * (column.ndim - 1))))
            if conv.bias is None:
                conv.bias = nn.Parameter(torch.zeros(conv.out_channels, device=column.device, dtype=column.dtype),
                                         requires_grad=False)
            conv.bias += float(intercept) * column.flatten(1).sum(1)
            conv.weight[:, channel] = 0.0

"""Lesions and peer replacement of a conv layer's channels (docs/methods.md §5, proposed protocol).

**Site.** Channels are intervened on where the next layers read them, the post-BN-activation ``a_i`` of
:mod:`fl_core.channelaxes.site`.

**Substitutions.** Every intervention replaces one channel per position, ``a_i ← b + Σ_j W_ij a_j``:

* zero-ablation: ``a_i ← 0``;
* mean-ablation (primary lesion): ``a_i ← E_cal[a_i]``;
* peer replacement: ``a_i ← b₀ + Σ_{j∈P(i)} β_j a_j``, the ridge fit of
  :func:`fl_core.channelaxes.moments.ridge_peer_coefficients`.

**Batched replay.** One forward pass serves many lesioned copies: at the site, the batch of B images is expanded to
G·B (copy-major), each copy with its own substitution, and every tensor from before the site that a later module
reads is expanded alike, so the network before the site runs once per G lesions instead of G times. Where that
expansion cannot follow the network (a residual add that reads a pre-site tensor directly), the replay is checked
against plain forward passes on the first batch and falls back to replicating the input ("full" mode).

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
from fl_core.channelaxes.site import ChannelSite, is_container, on_call
from fl_core.errors import AnalysisError
from fl_core.results import Result

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


class _Replay:
    """Hooks that turn one forward pass of B images into G·B lesioned copies (see the module docstring)."""

    def __init__(self, model: nn.Module, site: ChannelSite) -> None:
        self.model, self.site = model, site
        self.subs: Substitutions | None = None
        self.batch, self.expanded = 0, False

    def _at_site(self, _module: nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        if self.subs is None:
            return None
        self.expanded = True
        return _substituted(output, self.subs, self.batch)

    def _expand_inputs(self, _module: nn.Module, args: tuple) -> tuple | None:
        if not self.expanded or self.subs is None:
            return None
        n = len(self.subs)
        return tuple(a.repeat(n, *([1] * (a.ndim - 1))) if isinstance(a, torch.Tensor) and a.ndim
                     and a.shape[0] == self.batch else a for a in args)

    @contextlib.contextmanager
    def installed(self, replay: bool) -> Iterator[None]:
        site_module = self.model.get_submodule(self.site.activation)

        def reset(_module: nn.Module, _args: tuple) -> None:
            self.expanded = False

        handles = [self.model.register_forward_pre_hook(reset)]
        if replay:
            handles += [m.register_forward_pre_hook(self._expand_inputs) for m in self.model.modules()
                        if m is not self.model and not is_container(m)]
        try:
            with on_call(self.model, site_module, self.site.activation_call, self._at_site):
                yield
        finally:
            for handle in handles:
                handle.remove()

    def logits(self, x: torch.Tensor, subs: Substitutions | None, replay: bool) -> torch.Tensor:
        """Logits ``(G, B, K)`` of the copies (``(1, B, K)`` intact when ``subs`` is None)."""
        self.subs, self.batch = subs, x.shape[0]
        n = 1 if subs is None else len(subs)
        inputs = x if replay or subs is None else x.repeat(n, *([1] * (x.ndim - 1)))
        out = self.model(inputs)
        self.subs = None
        return out.reshape(n, x.shape[0], -1).float()


@dataclass(frozen=True)
class SubstitutionEffects(Result):
    """Loss and accuracy of every substituted copy on the evaluation set, and of the intact model.

    Attributes:
        loss: ``(G,)`` mean cross-entropy per copy.
        accuracy: ``(G,)`` top-1 per copy.
        base_loss, base_accuracy: the intact model on the same images.
        mode: ``"replay"`` (network before the site run once per pass) or ``"full"`` (input replicated).
        passes: forward passes run; copies_per_pass: lesioned copies per pass; n_images: evaluation images.
    """

    loss: np.ndarray
    accuracy: np.ndarray
    base_loss: float
    base_accuracy: float
    mode: str
    passes: int
    copies_per_pass: int
    n_images: int


def _replay_matches(replay: _Replay, x: torch.Tensor, plain: torch.Tensor, n_channels: int) -> bool:
    """Whether replay mode reproduces the intact logits for two no-op copies (else the network needs full mode)."""
    if x.shape[0] < 2:
        return False
    try:
        copies = replay.logits(x, Substitutions.identity(torch.arange(2) % n_channels, n_channels), replay=True)
    except RuntimeError:
        return False
    scale = plain.abs().max().clamp_min(1.0)
    return bool(((copies - plain).abs().max() <= 1e-3 * scale).item())


def plan_replay(site: ChannelSite, n_substitutions: int, batch_size: int, memory_bytes: int) -> tuple[int, int]:
    """``(images per pass, copies per pass)`` so that copies × images × activation size fits ``memory_bytes``."""
    per_sample = 4 * max(site.sample_bytes, 1)
    images = int(np.clip(memory_bytes // (per_sample * max(n_substitutions, 1)), 2, max(batch_size, 2)))
    copies = int(np.clip(memory_bytes // (per_sample * images), 1, max(n_substitutions, 1)))
    return images, copies


def substitution_effects(model: nn.Module, site: ChannelSite, inputs: LabelledInputs, subs: Substitutions, *,
                         device: torch.device, batch_size: int = 32, memory_bytes: int = 1 << 30,
                         progress: Progress | None = None) -> SubstitutionEffects:
    """Evaluate G substituted copies of ``model`` on ``inputs`` with batched replay (module docstring).

    The intact model is evaluated as one more (no-op) copy in the same passes.

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
    subs = Substitutions.concat([subs, Substitutions.identity(torch.zeros(1, dtype=torch.long), site.n_channels)])
    images_per_pass, copies = plan_replay(site, len(subs), batch_size, memory_bytes)
    replay = _Replay(model, site)
    loss = torch.zeros(len(subs), dtype=torch.float64)
    correct = torch.zeros(len(subs), dtype=torch.float64)
    mode, passes, seen = None, 0, 0
    with replay.installed(replay=True), inference_autocast(device):
        for x, y in inputs.batches(images_per_pass):
            x, y = x.to(device), y.to(device)
            if mode is None:  # checked once, in full precision: reduced-precision kernels differ by batch size
                with torch.autocast(device.type, enabled=False):
                    plain = replay.logits(x, None, replay=False)
                    mode = "replay" if _replay_matches(replay, x, plain, site.n_channels) else "full"
            for start in range(0, len(subs), copies):
                part = subs[start: start + copies]
                logits = replay.logits(x, part, replay=mode == "replay")
                losses = F.cross_entropy(logits.flatten(0, 1), y.repeat(len(part)), reduction="none")
                loss[start: start + len(part)] += losses.view(len(part), -1).sum(1).double().cpu()
                correct[start: start + len(part)] += (logits.argmax(2) == y).sum(1).double().cpu()
                passes += 1
            seen += len(y)
            report(progress, seen / len(inputs), f"lesions: {seen}/{len(inputs)} images")
    if seen == 0:
        raise AnalysisError("The evaluation set is empty: give more images.")
    loss, accuracy = (loss / seen).numpy(), (correct / seen).numpy()
    return SubstitutionEffects(loss=loss[:n], accuracy=accuracy[:n], base_loss=float(loss[n]),
                               base_accuracy=float(accuracy[n]), mode=mode or "replay", passes=passes,
                               copies_per_pass=min(copies, len(subs)), n_images=seen)


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

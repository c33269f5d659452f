"""Lesions and peer replacement of a conv layer's channels (docs/methods.md §5, proposed protocol).

**Site.** Channels are intervened on where the next layers read them, the post-BN-activation ``a_i`` of
:mod:`fl_core.channelaxes.site`.

**Substitutions.** Every intervention replaces one channel per position, ``a_i ← b + Σ_j W_ij a_j``:

* zero-ablation: ``a_i ← 0``;
* mean-ablation (primary lesion): ``a_i ← E_cal[a_i]``;
* peer replacement: ``a_i ← b₀ + Σ_{j∈P(i)} β_j a_j``, the ridge fit of
  :func:`fl_core.channelaxes.moments.ridge_peer_coefficients`.

**Shared prefix** (:mod:`fl_core.networks.partial_forward`). A lesioned copy equals the intact network up to the chain
module that holds the site, so the intact network runs once per batch and G copies run together from there: the intact
input of that module is repeated G times (copy-major G·B samples) and each copy's substitution is applied at the site by
a hook, or directly to the repeated input when the site is the output of the chain module before (then only the layers
after the site run per copy). When the site is inside that module (a residual block, a Fire module), the block's modules
that finish before the site return the intact outputs and the site its substituted output, so only the block's code
after the site runs per copy (:func:`inner_stubs`). Three more savings, all exact:

* the first convolution after the site (:func:`first_reader`) sees each copy's input differ from the intact one in
  one channel c only, so it adds that channel's term to the intact output, ``conv(u₀) + W[:, c] ⊛ (u − u₀)_c``,
  instead of convolving every channel again (checked per pass: a copy whose input differs in more channels runs it
  whole);
* every BatchNorm outside the site's chain runs folded into its convolution (:func:`folded_around`);
* on a CPU a pass's largest activation stays under :data:`CPU_PASS_BYTES`.

The copies' suffixes are checked against their full forward passes on the first images; a plan that differs gives
up one saving at a time (the reader's term, the stubs in the block) down to replicating the input ("full" mode). The
folded network is checked against the original on the same images (the original runs if they differ).

**Folding.** Where every reader of ``a`` is a groups-1 convolution (and nothing else reads it), peer replacement can
be folded into the readers' weights, ``W[:, j] += β_j W[:, i]``, ``bias += b₀ Σ_spatial W[:, i]``, ``W[:, i] = 0``
(:func:`fold_peer_replacement`). It equals the substitution exactly when the readers do not pad (1×1 kernels or no
padding); at padded borders it is approximate.

Everything here runs on private copies of models (``LoadedModel.copy_model()``): hooks and folds change modules.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.settings import LESION_KINDS
from fl_core.channelaxes.site import ChannelSite, is_container, on_call
from fl_core.compute.device import inference_autocast
from fl_core.compute.progress import Progress, report
from fl_core.errors import AnalysisError
from fl_core.networks.batchnorm import conv_batchnorm_pairs, folded_copy
from fl_core.networks.partial_forward import (
    PROBE_IMAGES,
    ModuleChain,
    PrefixPasses,
    module_chain,
    same_output,
    suffix_forward,
)
from fl_core.results import Result

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


def substituted(a: torch.Tensor, subs: Substitutions, batch: int) -> torch.Tensor:
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
    """``(start, at_start)``: the chain module the lesioned copies run from (:mod:`fl_core.networks.partial_forward`; 0:
    the whole network) and whether the substitution applies to that module's input (the site is the chain module before
    it) rather than at the site inside the suffix."""
    owner = chain.owner(site.activation)
    if owner is None:
        return 0, False
    if chain.names[owner] == site.activation and owner + 1 < len(chain.names) and chain.direct[owner + 1]:
        return owner + 1, True
    return chain.lowered(owner), False


def module_events(model: nn.Module, x: torch.Tensor) -> list[tuple[str, bool]]:
    """Each module call of one forward pass on ``x`` as ``(name, False)`` when it starts and ``(name, True)`` when it
    returns, in order."""
    events: list[tuple[str, bool]] = []
    handles = []
    for name, module in model.named_modules():
        if name:
            handles += [module.register_forward_pre_hook(lambda *_, n=name: events.append((n, False))),
                        module.register_forward_hook(lambda *_, n=name: events.append((n, True)))]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return events


def inner_stubs(chain: ModuleChain, start: int, site: ChannelSite, events: list[tuple[str, bool]]
                ) -> tuple[str, ...]:
    """The modules inside chain module ``start`` that a copy need not run: the largest ones that finish before the
    site's call begins, then the site itself (last); ``()`` when the site is not inside ``start`` or one of them is
    called more than once (``events``: :func:`module_events`). Stubbed with the original's outputs (the site's
    substituted), a copy runs only the block's code after the site."""
    owner = chain.names[start] if start > 0 else ""
    if not site.activation.startswith(f"{owner}.") or chain.owner(site.activation) != start:
        return ()
    inside = [(name, done) for name, done in events if name.startswith(f"{owner}.")]
    starts = [i for i, (name, done) in enumerate(inside) if name == site.activation and not done]
    if len(starts) != 1:
        return ()
    finished = [name for name, done in inside[:starts[0]] if done]
    largest = [name for name in finished if not any(name.startswith(f"{other}.") for other in finished)]
    stubs = (*largest, site.activation)
    calls = Counter(name for name, done in inside if not done)
    return stubs if all(calls[name] == 1 for name in stubs) else ()


def unread_stubs(model: nn.Module, stubs: tuple[str, ...]) -> frozenset[str]:
    """Stubs whose output no code reads: each followed in its ``nn.Sequential`` by another stub."""
    unread = set()
    for name in stubs[:-1]:
        parent, _, child = name.rpartition(".")
        container = model.get_submodule(parent)
        if isinstance(container, nn.Sequential):
            siblings = list(container._modules)
            following = siblings.index(child) + 1
            if following < len(siblings) and f"{parent}.{siblings[following]}" in stubs:
                unread.add(name)
    return frozenset(unread)


def calls_after_site(model: nn.Module, site: ChannelSite, events: list[tuple[str, bool]]) -> list[str]:
    """The modules without children called after the site's call (``events``: :func:`module_events`), in order, each
    once (a module called more than once in the pass is left out)."""
    ends = [i for i, (name, done) in enumerate(events) if name == site.activation and done]
    if len(ends) <= site.activation_call:
        return []
    calls = [(i, name) for i, (name, done) in enumerate(events)
             if not done and not is_container(model.get_submodule(name))]
    counts = Counter(name for _, name in calls)
    return [name for i, name in calls if i > ends[site.activation_call] and counts[name] == 1]


def first_reader(model: nn.Module, later: list[str]) -> str | None:
    """The first groups-1 convolution with zero padding among the ``later`` calls: a lesion changes one channel of
    its input, so its output changes by that channel's term alone (:meth:`LesionedCopies.reader_forward`)."""
    return next((name for name in later if isinstance(conv := model.get_submodule(name), nn.Conv2d)
                 and conv.groups == 1 and conv.padding_mode == "zeros"), None)


def folded_around(model: nn.Module, site: ChannelSite | Sequence[ChannelSite], x: torch.Tensor) -> nn.Module:
    """A copy of ``model`` with every foldable BatchNorm folded into its convolution
    (:func:`~fl_core.networks.batchnorm.folded_copy`) except the site chains', whose layer input, pre-BatchNorm
    output and activation stay observable, when its output on ``x`` is the original's (``model`` itself otherwise):
    the network the statistics pass (of one site or several) and the lesion passes run."""
    sites = [site] if isinstance(site, ChannelSite) else site
    kept = {name for s in sites for name in (s.layer, *s.chain)}
    pairs, output = conv_batchnorm_pairs(model, x)
    pairs = [(conv, norm) for conv, norm in pairs if not {conv, norm} & kept]
    if not pairs:
        return model
    folded = folded_copy(model, pairs)
    return folded if same_output(folded(x), output) else model


class LesionedCopies:
    """G substituted copies of one network run together, their G·B samples copy-major (module docstring).

    From ``start`` on the suffix runs on the original's input of that chain module repeated G times (substituted
    first when ``at_start``); from 0 the input is replicated. With ``inner`` stubs (:func:`inner_stubs`) the modules
    of the start's block that come before the site return the original's outputs (repeated G times where read) and
    the site its substituted output. Otherwise the substitution happens in a hook at the site. With a ``reader``
    (:func:`first_reader`) that convolution adds each copy's one changed input channel's term to the original's
    output instead of convolving all its channels again.
    """

    def __init__(self, model: nn.Module, site: ChannelSite, chain: ModuleChain, start: int, at_start: bool,
                 inner: tuple[str, ...] = (), reader: str | None = None) -> None:
        self.model, self.site, self.chain = model, site, chain
        self.start, self.at_start, self.inner, self.reader = start, at_start, inner, reader
        self.unread = unread_stubs(model, inner)
        self.subs: Substitutions | None = None
        self.batch = 0
        self.copies_running = False

    def _at_site(self, _module: nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        return None if self.subs is None else substituted(output, self.subs, self.batch)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The site hook (it fires only where the site runs: never when the copies start after it)."""
        with on_call(self.model, self.model.get_submodule(self.site.activation), self.site.activation_call,
                     self._at_site):
            yield

    @contextlib.contextmanager
    def recording(self) -> Iterator[dict[str, torch.Tensor]]:
        """During the original's passes in this context, a copy of each inner stub's output (by module name) and of
        the reader's input (``"<name>:input"``) and output."""
        recorded: dict[str, torch.Tensor] = {}

        def record(name: str):
            def hook(_module, args, output):
                if not self.copies_running:
                    recorded[name] = output.clone()
                    if name == self.reader:
                        recorded[f"{name}:input"] = args[0].clone()
            return hook

        names = [*self.inner, *([self.reader] if self.reader else [])]
        handles = [self.model.get_submodule(name).register_forward_hook(record(name)) for name in names]
        try:
            yield recorded
        finally:
            for handle in handles:
                handle.remove()

    def _inner_outputs(self, recorded: dict[str, torch.Tensor], subs: Substitutions) -> dict[str, torch.Tensor]:
        n = len(subs)
        *before, site = self.inner
        outputs = {name: recorded[name] if name in self.unread
                   else recorded[name].repeat(n, *([1] * (recorded[name].ndim - 1))) for name in before}
        return outputs | {site: substituted(recorded[site], subs, self.batch)}

    def reader_forward(self, u: torch.Tensor, recorded: dict[str, torch.Tensor]) -> torch.Tensor:
        """The reader convolution on the copies' input ``u`` (G·B samples): where each copy's input differs from the
        original's ``u₀`` in one channel c_g at most, ``conv(u) = conv(u₀) + W[:, c_g] ⊛ (u − u₀)[c_g]`` (a convolution
        is linear; zero padding too); else the whole convolution."""
        conv = self.model.get_submodule(self.reader)
        u0, out0 = recorded[f"{self.reader}:input"], recorded[self.reader]
        n = len(u) // len(u0)
        if n * len(u0) != len(u):
            return type(conv).forward(conv, u)
        delta = u.reshape(n, *u0.shape) - u0
        changed = delta.ne(0).flatten(3).any(3).any(1)  # (G, C)
        if int(changed.sum(1).max()) > 1:
            return type(conv).forward(conv, u)
        channel = changed.to(torch.uint8).argmax(1)  # a copy without change: any channel (its difference is 0)
        difference = delta[torch.arange(n, device=u.device), :, channel]  # (G, B, H, W)
        weight = conv.weight[:, channel].transpose(0, 1).to(difference.dtype)  # (G, O, kh, kw)
        if weight.shape[2:] == (1, 1) and conv.padding in ((0, 0), "valid"):  # a product per position
            sampled = difference[..., ::conv.stride[0], ::conv.stride[1]]
            terms = sampled.unsqueeze(2) * weight.reshape(n, 1, -1, 1, 1)
        else:  # one input channel per copy: a grouped convolution
            terms = F.conv2d(difference.transpose(0, 1), weight.reshape(-1, 1, *weight.shape[2:]), None, conv.stride,
                             conv.padding, conv.dilation, groups=n)
            terms = terms.reshape(len(u0), n, *out0.shape[1:]).transpose(0, 1).contiguous()
        terms += out0  # (G, B, O, H', W')
        return terms.reshape(len(u), *out0.shape[1:])

    @contextlib.contextmanager
    def _reader_installed(self, recorded: dict[str, torch.Tensor] | None) -> Iterator[None]:
        if self.reader is None or not recorded or self.reader not in recorded:
            yield
            return
        conv = self.model.get_submodule(self.reader)
        object.__setattr__(conv, "forward", lambda u: self.reader_forward(u, recorded))
        try:
            yield
        finally:
            object.__delattr__(conv, "forward")

    def logits(self, x: torch.Tensor, activation: torch.Tensor | None, subs: Substitutions,
               recorded: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Logits ``(G, B, K)`` of the copies on images ``x``; ``activation``: the original's input of the start;
        ``recorded``: the original's outputs of the inner stubs and the reader's (:meth:`recording`)."""
        n, self.batch = len(subs), len(x)
        substituted_first = self.at_start and self.start > 0
        inner = bool(self.inner) and self.start > 0
        self.subs = None if substituted_first or inner else subs  # (a stubbed site module's hooks still fire)
        self.copies_running = True
        try:
            if self.start == 0:
                return self.model(x.repeat(n, *([1] * (x.ndim - 1)))).reshape(n, len(x), -1).float()
            expanded = (substituted(activation, subs, len(x)) if substituted_first
                        else activation.repeat(n, *([1] * (activation.ndim - 1))))
            stubs = self._inner_outputs(recorded, subs) if inner else None
            with self._reader_installed(recorded):
                out = suffix_forward(self.model, self.chain, self.start, expanded, x, stubs)
        finally:
            self.subs = None
            self.copies_running = False
        return out.reshape(n, len(x), -1).float()

    def check(self, x: torch.Tensor, activation: torch.Tensor | None, subs: Substitutions,
              recorded: dict[str, torch.Tensor] | None = None) -> bool:
        """Whether the copies' suffix reproduces their full forward passes on ``x`` (in full precision: reduced-
        precision kernels differ by batch size) and leaves the original's recorded outputs unchanged."""
        if self.start == 0:
            return True
        recorded = recorded or {}
        kept = {name: t.clone() for name, t in recorded.items()}
        with torch.autocast(x.device.type, enabled=False):
            split = self.logits(x, activation, subs, recorded)
            plan = self.start, self.at_start, self.inner, self.reader
            self.start, self.at_start, self.inner, self.reader = 0, False, (), None
            try:
                full = self.logits(x, None, subs)
            finally:
                self.start, self.at_start, self.inner, self.reader = plan
        return same_output(split, full) and all(torch.equal(t, kept[name]) for name, t in recorded.items())

    def fall_back(self) -> None:
        """The next plan after a failed :meth:`check`: without the reader's shortcut, without the inner stubs, then
        the whole network."""
        if self.reader:
            self.reader = None
        elif self.inner:
            self.inner, self.unread = (), frozenset()
        else:
            self.start, self.at_start = 0, False

    @property
    def computed_from(self) -> str | None:
        """The site (its output) with inner stubs, else the chain module the copies run from (its input)."""
        return self.inner[-1] if self.inner and self.start else self.chain.name(self.start)


@dataclass(frozen=True)
class SubstitutionEffects(Result):
    """Loss and accuracy of every substituted copy on the evaluation set, and of the intact model.

    Attributes:
        loss: ``(G,)`` mean cross-entropy per copy.
        accuracy: ``(G,)`` top-1 per copy.
        base_loss, base_accuracy: the intact model on the same images.
        mode: ``"suffix"`` (the copies ran from ``computed_from`` on, on the intact network's activation there) or
            ``"full"`` (whole copies, the input replicated).
        computed_from: the chain module the copies ran from (from its input), or the site when they ran from its
            output inside its block (:func:`inner_stubs`); ``None``: the whole network.
        reader: the convolution after the site that added each copy's changed channel's term to the original's
            output (:func:`first_reader`) rather than running whole; ``None``: none did.
        passes: batched runs of copies; copies_per_pass: lesioned copies per run; n_images: evaluation images.
        image_loss: ``(G, N)`` cross-entropy of every copy on every evaluation image (float32; ``None`` above
            :data:`IMAGE_LOSS_VALUES` values), for intervals over images; base_image_loss: ``(N,)`` the intact
            model's.
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
    reader: str | None = None
    image_loss: np.ndarray | None = None
    base_image_loss: np.ndarray | None = None

    _private_fields = ("image_loss", "base_image_loss")


IMAGE_LOSS_VALUES = 1 << 24
"""The most per-image losses (copies × evaluation images) kept for intervals over images (64 MB of float32)."""
CPU_PASS_BYTES = 16 << 20
"""On a CPU the largest activation of one batched pass (copies × images × its bytes per image) stays under this: glibc
serves larger blocks as fresh pages that the kernel zero-fills on every pass, at a cost above the convolutions'
(docs/results.md, "Measurements behind design choices")."""


def plan_passes(sample_bytes: int, n_substitutions: int, batch_size: int, memory_bytes: int,
                max_samples: int | None = None) -> tuple[int, int]:
    """``(images per pass, copies per pass)`` so that copies × images × 4 × ``sample_bytes`` (an activation per
    image, with room for the temporaries) fits ``memory_bytes`` and copies × images ≤ ``max_samples``."""
    samples = memory_bytes // (4 * max(sample_bytes, 1))
    if max_samples is not None:
        samples = min(samples, max_samples)
    images = int(np.clip(samples // max(n_substitutions, 1), 2, max(batch_size, 2)))
    copies = int(np.clip(samples // images, 1, max(n_substitutions, 1)))
    return images, copies


def substitution_effects(model: nn.Module, site: ChannelSite, inputs: LabelledInputs, subs: Substitutions, *,
                         device: torch.device, batch_size: int = 32, memory_bytes: int = 1 << 30,
                         progress: Progress | None = None) -> SubstitutionEffects:
    """Evaluate G substituted copies of ``model`` on ``inputs``, each run from the chain module where it first
    differs on the intact network's activation there (:mod:`fl_core.networks.partial_forward`; module docstring).

    The intact network runs once per batch (its loss is the baseline); the copies' suffixes are checked against
    their full forward passes on the first images and run whole if they differ.

    Args:
        model: a private copy of the network, on ``device`` and in eval mode.
        site: from :func:`locate_site`.
        inputs: the labelled evaluation set.
        subs: the substitutions, one per copy.
        device: where to run.
        batch_size: largest number of images per pass.
        memory_bytes: activation memory to plan the copies per pass with (on a CPU, passes also stay under
            :data:`CPU_PASS_BYTES`).
        progress: ``progress(fraction, message)``.
    """
    n = len(subs)
    example = inputs.head(PROBE_IMAGES)[0].to(device)
    with torch.no_grad():
        model = folded_around(model, site, example)
        chain, _ = module_chain(model, example)
        start, at_start = lesion_start(chain, site)
        events = module_events(model, example)
        copies = LesionedCopies(model, site, chain, start, at_start, inner_stubs(chain, start, site, events),
                                first_reader(model, calls_after_site(model, site, events)))
    sample_bytes = max(site.sample_bytes, example[0].numel() * example.element_size())
    pass_samples = CPU_PASS_BYTES // max(site.sample_bytes, 1) if device.type == "cpu" else None
    images_per_pass, per_pass = plan_passes(sample_bytes, n, batch_size, memory_bytes, pass_samples)
    passes = PrefixPasses(model, chain, {copies.start}, lambda: inputs.batches(images_per_pass), device, 0)
    loss = torch.zeros(n, dtype=torch.float64)
    correct = torch.zeros(n, dtype=torch.float64)
    keep_images = n * len(inputs) <= IMAGE_LOSS_VALUES
    image_loss: list[torch.Tensor] = []
    base_image_loss: list[torch.Tensor] = []
    base_loss = base_correct = 0.0
    runs = seen = 0
    checked = False
    with copies.installed(), copies.recording() as recorded, torch.no_grad(), inference_autocast(device):
        for batch in passes:
            x, y, activation = batch.x, batch.y, batch.activations.get(copies.start)
            if not checked:
                probe = subs[torch.tensor([0, n - 1])] if n > 1 else subs
                while not copies.check(x[:PROBE_IMAGES], None if activation is None else activation[:PROBE_IMAGES],
                                       probe, {name: t[:PROBE_IMAGES] for name, t in recorded.items()}):
                    copies.fall_back()
                checked = True
            base_losses = F.cross_entropy(batch.output.float(), y, reduction="none")
            base_loss += float(base_losses.sum())
            base_correct += float((batch.output.argmax(1) == y).sum())
            batch_losses = torch.empty(n, len(y)) if keep_images else None
            for first in range(0, n, per_pass):
                part = subs[first: first + per_pass]
                logits = copies.logits(x, activation, part, recorded)
                losses = F.cross_entropy(logits.flatten(0, 1), y.repeat(len(part)), reduction="none")
                losses = losses.view(len(part), -1)
                loss[first: first + len(part)] += losses.sum(1).double().cpu()
                correct[first: first + len(part)] += (logits.argmax(2) == y).sum(1).double().cpu()
                if batch_losses is not None:
                    batch_losses[first: first + len(part)] = losses.float().cpu()
                runs += 1
            if batch_losses is not None:
                image_loss.append(batch_losses)
                base_image_loss.append(base_losses.float().cpu())
            seen += len(y)
            report(progress, seen / len(inputs), f"lesions: {seen}/{len(inputs)} images")
    if seen == 0:
        raise AnalysisError("The evaluation set is empty: give more images.")
    return SubstitutionEffects(loss=(loss / seen).numpy(), accuracy=(correct / seen).numpy(),
                               base_loss=base_loss / seen, base_accuracy=base_correct / seen,
                               mode="suffix" if copies.start else "full", passes=runs,
                               copies_per_pass=min(per_pass, n), n_images=seen, computed_from=copies.computed_from,
                               reader=copies.reader if copies.start else None,
                               image_loss=torch.cat(image_loss, 1).numpy() if keep_images else None,
                               base_image_loss=torch.cat(base_image_loss).numpy() if keep_images else None)


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
        image_dloss: ``{kind: (C, N)}`` Δloss of every channel on every evaluation image (empty when not kept:
            :data:`IMAGE_LOSS_VALUES`), whose mean over the images is ``dloss``.
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
    image_dloss: dict[str, np.ndarray] = field(default_factory=dict)

    _private_fields = ("replacement_peers", "replacement_beta", "replacement_intercept", "image_dloss")


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
    image_dloss = {} if effects.image_loss is None else {
        k: effects.image_loss[i * n:(i + 1) * n] - effects.base_image_loss for i, k in enumerate(kinds)}
    return ChannelInterventions(dloss=dloss, daccuracy=daccuracy, peer_support=support,
                                base_loss=effects.base_loss, base_accuracy=effects.base_accuracy, effects=effects,
                                replacement_peers=peers.cpu().numpy(), replacement_beta=beta.cpu().numpy(),
                                replacement_intercept=intercept.cpu().numpy(), image_dloss=image_dloss)


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

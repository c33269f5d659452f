"""One streaming pass over the calibration set per layer, and the two axes computed from it.

Section numbers (§) refer to docs/methods.md, "Channel axes"; every definition there is the project's
**proposed** one. The pass hooks three places of a private copy of the network (float64 accumulators on the device,
memory independent of the number of images except the per-image values the copula ranks need):

* the conv's input: per-column variances of its zero-padded im2col patches → ``tr Σ_X`` per group (§1), from box
  sums of the input and its square (:func:`patch_column_sums`: no im2col);
* the conv's output ``u`` (pre-activation): per-position channel moments → Var(u_i) = w_iᵀΣ_X w_i and the
  channel correlation (§1, §2);
* the site's output ``a`` (post-BN-activation, :func:`fl_core.channelaxes.site.locate_site`): per-position
  moments in two halves (alternate images; held-out R², ridge replacement, §4-5) and the pooled ``ā (N, C)`` (§3);
* the logits: the true-class margin ``m`` (target of §3), loss and accuracy.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.information import (
    PairwiseInformation,
    TripletSynergy,
    copula_normalize,
    gaussian_mi,
    logit_margin,
    pairwise_information,
    target_excess,
    triplet_synergy,
)
from fl_core.channelaxes.moments import (
    ChannelMoments,
    FeatureVariance,
    InputCapture,
    PeerOverlap,
    PeerReconstruction,
    input_capture,
    peer_overlap,
    peer_r2_all,
    peer_r2_topk_heldout,
    ridge_peer_coefficients,
    top_peers,
)
from fl_core.channelaxes.settings import AxisSettings
from fl_core.channelaxes.significance import TaskInformation, task_information
from fl_core.channelaxes.site import ChannelSite, on_call
from fl_core.compute.device import statistics_dtype
from fl_core.compute.progress import Progress, report
from fl_core.errors import AnalysisError
from fl_core.networks.evaluation import evaluate_classifier
from fl_core.results import Result


@dataclass(frozen=True)
class LayerStatistics:
    """What one pass over the calibration set collected for a layer (float64 on the device).

    Attributes:
        site: where ``a`` was observed.
        weight: the conv weight ``(C, C_in/groups, kh, kw)``.
        pre: per-position moments of ``u`` (the conv output).
        post_fit, post_test: per-position moments of ``a`` on even / odd calibration images.
        pooled: ``ā (N, C)``, the spatial mean of ``a`` per image.
        margin: ``m (N,)``, the true-class logit margin.
        input_trace: ``tr Σ_X`` per group of the conv.
        loss, accuracy: of the network on the calibration images.
        positions: spatial positions of ``a`` per image.
        capture_sums, capture_squares: ``(N, C)`` per-image sums of ``u − s`` and ``(u − s)²`` over positions (``s``:
            the first batch's channel means), from which Var(u_i) = w_iᵀΣ_X w_i of any resample of the images follows
            (:func:`resampled_output_variance`).
        pre_positions: spatial positions of ``u`` per image.
    """

    site: ChannelSite
    weight: torch.Tensor
    pre: ChannelMoments
    post_fit: ChannelMoments
    post_test: ChannelMoments
    pooled: torch.Tensor
    margin: torch.Tensor
    input_trace: torch.Tensor
    loss: float
    accuracy: float
    positions: int
    capture_sums: torch.Tensor
    capture_squares: torch.Tensor
    pre_positions: int

    @property
    def n_images(self) -> int:
        return int(self.pooled.shape[0])

    @property
    def post(self) -> ChannelMoments:
        """Moments of ``a`` over all calibration images (the two halves merged)."""
        merged = ChannelMoments(self.post_fit.n_channels, self.post_fit.device, self.post_fit.dtype)
        return merged.merge(self.post_fit).merge(self.post_test)


def padded_input(x: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """``x`` padded exactly as ``conv`` pads it (zeros, or its padding mode)."""
    if conv.padding == "valid":
        return x
    if conv.padding == "same":
        total = [d * (k - 1) for d, k in zip(conv.dilation, conv.kernel_size)]
        padding = (total[1] // 2, total[1] - total[1] // 2, total[0] // 2, total[0] - total[0] // 2)
    else:
        padding = conv._reversed_padding_repeated_twice
    return F.pad(x, padding, mode="constant" if conv.padding_mode == "zeros" else conv.padding_mode)


def patch_column_sums(x: torch.Tensor, conv: nn.Conv2d, dtype: torch.dtype) -> tuple[int, torch.Tensor, torch.Tensor]:
    """``(n, Σ p, Σ p²)`` over the conv's im2col patches ``p`` of ``x``, per column (``C_in·kh·kw``, the order of
    ``conv.weight.flatten(1)``), without materialising the patches.

    Column ``(c, dy, dx)`` holds ``x_pad[·, c, dy·d + s·i, dx·d + s·j]`` over the output grid (stride s, dilation d),
    so its sums are box sums of ``Σ_n x_pad`` and ``Σ_n x_pad²`` over that grid at offset ``(dy·d, dx·d)``: one
    correlation of the two sums with a ones kernel of the grid's size, stride d and dilation s.
    """
    x = padded_input(x, conv).to(dtype)
    (kh, kw), (sh, sw), (dh, dw) = conv.kernel_size, conv.stride, conv.dilation
    n, channels, height, width = x.shape
    rows, columns = (height - dh * (kh - 1) - 1) // sh + 1, (width - dw * (kw - 1) - 1) // sw + 1
    sums = torch.cat([x.sum(0), x.square().sum(0)]).unsqueeze(1)  # (2·C_in, 1, H, W)
    grid = torch.ones(1, 1, rows, columns, dtype=dtype, device=x.device)
    boxes = F.conv2d(sums, grid, stride=(dh, dw), dilation=(sh, sw))[..., :kh, :kw]
    total, squares = boxes.reshape(2, channels * kh * kw)
    return n * rows * columns, total, squares


@dataclass
class _SiteAccumulators:
    """The running sums of one layer during the shared pass (:func:`collect_statistics`)."""

    site: ChannelSite
    conv: nn.Conv2d
    pre: ChannelMoments
    halves: tuple[ChannelMoments, ChannelMoments]
    patches: FeatureVariance
    pooled: list[torch.Tensor]
    capture_sums: list[torch.Tensor]
    capture_squares: list[torch.Tensor]
    shift: torch.Tensor | None = None
    positions: int = 0
    pre_positions: int = 0

    def add_output(self, u: torch.Tensor, dtype: torch.dtype) -> None:
        """Moments of ``u`` and its per-image sums around a fixed shift (the first batch's channel means)."""
        self.pre.update(u)
        values = u.detach().to(self.pre.device, dtype).flatten(2)
        if self.shift is None:
            self.shift = values.mean(dim=(0, 2))
        centred = values - self.shift[:, None]
        self.pre_positions = values.shape[2]
        self.capture_sums.append(centred.sum(2))
        self.capture_squares.append(centred.square().sum(2))

    def add_site(self, a: torch.Tensor, first: int, dtype: torch.dtype) -> None:
        self.positions = int(a[0, 0].numel())
        self.pooled.append(a.detach().flatten(2).mean(2).to(dtype))
        parity = (first + torch.arange(a.shape[0], device=a.device)) % 2
        for half, moments in enumerate(self.halves):
            moments.update(a[parity == half])

    def statistics(self, margin: torch.Tensor, loss: float, accuracy: float, dtype: torch.dtype) -> LayerStatistics:
        if not self.pooled:
            raise AnalysisError(f"{self.site.activation} was not reached: the layer's channels could not be observed.")
        conv = self.conv
        return LayerStatistics(site=self.site, weight=conv.weight.detach().to(dtype), pre=self.pre,
                               post_fit=self.halves[0], post_test=self.halves[1], pooled=torch.cat(self.pooled),
                               margin=margin, input_trace=self.patches.variance().view(conv.groups, -1).sum(1),
                               loss=loss, accuracy=accuracy, positions=self.positions,
                               capture_sums=torch.cat(self.capture_sums),
                               capture_squares=torch.cat(self.capture_squares), pre_positions=self.pre_positions)


def collect_statistics(model: nn.Module, sites: list[ChannelSite], inputs: LabelledInputs, *,
                       device: torch.device, batch_size: int = 32,
                       progress: Progress | None = None) -> list[LayerStatistics]:
    """One streaming pass of the calibration set through ``model`` for every layer of ``sites`` at once (module
    docstring): the margin, loss and accuracy are shared.

    Args:
        model: a private copy of the network on ``device``, in eval mode (hooks are added and removed).
        sites: from :func:`fl_core.channelaxes.site.locate_site`, one per layer.
        inputs: the labelled calibration set.
        device: where to run and accumulate.
        batch_size: images per forward pass.
        progress: ``progress(fraction, message)``.
    """
    dtype = statistics_dtype(device)
    accumulators = []
    for site in sites:
        conv = model.get_submodule(site.layer)
        n = conv.out_channels
        accumulators.append(_SiteAccumulators(
            site, conv, ChannelMoments(n, device), (ChannelMoments(n, device), ChannelMoments(n, device)),
            FeatureVariance(conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1], device), [], [], []))
    margins = []
    state = {"first": 0}

    def on_logits(logits: torch.Tensor, y: torch.Tensor) -> None:
        margins.append(logit_margin(logits, y).to(dtype))
        state["first"] += len(y)
        report(progress, state["first"] / len(inputs), f"statistics: {state['first']}/{len(inputs)} images")

    with contextlib.ExitStack() as hooks:
        for acc in accumulators:
            def on_input(module, args, acc=acc):
                acc.patches.add(*patch_column_sums(args[0].detach(), acc.conv, dtype))

            def on_output(module, args, output, acc=acc):
                acc.add_output(output, dtype)

            def on_site(module, args, a, acc=acc):
                acc.add_site(a, state["first"], dtype)

            hooks.enter_context(on_call(model, acc.conv, 0, on_input, pre=True))
            hooks.enter_context(on_call(model, acc.conv, 0, on_output))
            hooks.enter_context(on_call(model, model.get_submodule(acc.site.activation), acc.site.activation_call,
                                        on_site))
        loss, accuracy = evaluate_classifier(model, inputs.batches(batch_size), device, on_logits=on_logits)
    margin = torch.cat(margins) if margins else torch.zeros(0, dtype=dtype)
    return [acc.statistics(margin, loss, accuracy, dtype) for acc in accumulators]


def collect_layer_statistics(model: nn.Module, site: ChannelSite, inputs: LabelledInputs, *,
                             device: torch.device, batch_size: int = 32,
                             progress: Progress | None = None) -> LayerStatistics:
    """:func:`collect_statistics` of one layer."""
    return collect_statistics(model, [site], inputs, device=device, batch_size=batch_size, progress=progress)[0]


# ---------------------------------------------------------------------------------------------------- axes


@dataclass(frozen=True)
class LocalAxis(Result):
    """Local-axis metrics of a layer's channels (proposed, §1, §2, §4).

    Attributes:
        capture: I_X raw / Rayleigh / layer-normalized.
        overlap: R̄_X (mean |ρ|), max, top-k mean, on the per-position pre-activation correlation.
        peers: ``(C, k)`` top-|ρ| peers of each channel (pre-activation).
        r2_all_pre, r2_all_post: all-peer R² ``1 − 1/[Ĉ⁻¹]_ii`` on ``u`` and on ``a``.
        reconstruction: held-out top-k ridge R² on ``a`` (fit on even, tested on odd calibration images).
        replacement_peers, replacement_beta, replacement_intercept: ridge reconstruction of each channel from its
            top-k peers on ``a``, fitted on all calibration images (peer replacement, §5).
        post_means: ``(C,)`` calibration means of ``a`` (mean-ablation values).
        dead: ``(C,)`` channels whose ``a`` is constant on every calibration image (peer R² 1, task information 0).
    """

    capture: InputCapture
    overlap: PeerOverlap
    peers: torch.Tensor
    r2_all_pre: torch.Tensor
    r2_all_post: torch.Tensor
    reconstruction: PeerReconstruction
    replacement_peers: torch.Tensor
    replacement_beta: torch.Tensor
    replacement_intercept: torch.Tensor
    post_means: torch.Tensor
    dead: torch.Tensor


def reconstructed_when_constant(r2: torch.Tensor, variance: torch.Tensor) -> torch.Tensor:
    """All-peer R² with channels of zero variance set to 1: the intercept alone reconstructs a constant channel (its
    correlations are 0, which would give 0)."""
    return torch.where(variance.to(r2.device) > 0, r2, 1.0)


def local_axis(stats: LayerStatistics, settings: AxisSettings | None = None) -> LocalAxis:
    """Input capture, peer overlap and peer reconstruction from the layer's statistics."""
    settings = settings or AxisSettings()
    pre_variance = stats.pre.variance(ddof=0)
    capture = input_capture(stats.weight, pre_variance, stats.input_trace)
    corr_pre = stats.pre.correlation()
    post = stats.post
    corr_post = post.correlation()
    replacement_peers = top_peers(corr_post, settings.k)
    beta, intercept = ridge_peer_coefficients(post.covariance(ddof=0), post.mean(), replacement_peers,
                                              settings.ridge)
    return LocalAxis(capture=capture, overlap=peer_overlap(corr_pre, settings.k), peers=top_peers(corr_pre, settings.k),
                     r2_all_pre=reconstructed_when_constant(peer_r2_all(corr_pre, settings.shrinkage), pre_variance),
                     r2_all_post=reconstructed_when_constant(peer_r2_all(corr_post, settings.shrinkage),
                                                             post.variance(ddof=0)),
                     reconstruction=peer_r2_topk_heldout(stats.post_fit, stats.post_test, settings.k, settings.ridge),
                     replacement_peers=replacement_peers, replacement_beta=beta, replacement_intercept=intercept,
                     post_means=post.mean(), dead=post.variance(ddof=0) <= 0)


@dataclass(frozen=True)
class TargetAxis(Result):
    """Target-axis metrics (proposed, §3), in nats, on the pooled ``ā`` and the margin ``m``.

    Attributes:
        task_info: I(ā_i; m), Gaussian-copula (primary).
        task_info_gauss: I(ā_i; m), plain Gaussian.
        target_excess: TE(i) = I(ā_i; m | ā_P(i)) over the top-k peers (copula).
        pairwise: mean MMI redundancy / synergy / net synergy with the top-k peers (copula).
        triplets: mean triplet synergy over sampled peer pairs (copula), or ``None`` with fewer than 2 peers.
        significance: the task information's noise floor and per-channel permutation p-values.
    """

    task_info: torch.Tensor
    task_info_gauss: torch.Tensor
    target_excess: torch.Tensor
    pairwise: PairwiseInformation
    triplets: TripletSynergy | None
    significance: TaskInformation


def target_axis(stats: LayerStatistics, peers: torch.Tensor, settings: AxisSettings | None = None) -> TargetAxis:
    """Task information, target-excess and the synergy proxies of every channel."""
    settings = settings or AxisSettings()
    if stats.n_images < settings.k + 4:
        raise AnalysisError(f"The target axis needs more calibration images than peers + 3 ({settings.k + 4}); "
                            f"got {stats.n_images}.")
    x, m = stats.pooled, stats.margin
    xc, mc = copula_normalize(x), copula_normalize(m)
    alpha = settings.shrinkage
    return TargetAxis(
        task_info=gaussian_mi(xc, mc), task_info_gauss=gaussian_mi(x, m),
        target_excess=target_excess(xc, mc, peers, shrinkage=alpha),
        pairwise=pairwise_information(xc, mc, peers, shrinkage=alpha),
        triplets=triplet_synergy(xc, mc, peers, settings.n_triplets, settings.seed, shrinkage=alpha)
        if peers.shape[1] >= 2 else None,
        significance=task_information(x, m, copula=True, n_permutations=settings.permutations, seed=settings.seed))

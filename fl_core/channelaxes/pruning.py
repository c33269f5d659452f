"""Structured pruning of one conv layer's channels by each criterion: accuracy vs FLOPs removed, with and without a
short recovery fine-tune, and the area under each curve (docs/methods.md §6).

* **Removal is physical** (:mod:`fl_core.channelaxes.pruner`: Torch-Pruning's DepGraph, built once; each pruned copy
  is scored from the first layer that reads the remaining channels). FLOPs are the multiply-accumulates (MACs) of the
  pruned networks' convolutions and linear layers, counted on their weights (:meth:`LayerPruner.cost`), and
  parameters are counted likewise.
* **Mean compensation [proposed].** Removing a post-activation channel also removes its mean (the zero-ablation
  pitfall of §5), which can swamp every criterion before any fine-tune. By default the removed channels' calibration
  means are folded into the biases of the convolutions that read them directly, so removal acts like mean-ablation.
* **FLOPs-matched [proposed].** Every channel of one layer costs the same, so each point of the grid removes the same
  number of channels whatever the criterion: the criteria differ only in *which* channels go. The FLOPs removed
  are measured once per point on the physically pruned network.
* **Criteria** (:data:`CRITERIA`, configs as data): importance scores, higher = keep. The two-axis scores come from
  :mod:`fl_core.channelaxes.analysis`; the baselines reuse Torch-Pruning's importance classes on the layer's own filters
  (``group_reduction="first"``, no normalizer): L1/L2 filter norm (Li et al. 2017), BN |γ| (Liu et al. 2017), FPGM
  (He et al. 2019), first-order Taylor (Molchanov et al. 2019) and random (seeded).
* **Recovery fine-tune [proposed]**: the intact network distilled back into each pruned copy (KL to its softmax, SGD
  with momentum 0.9, eval mode) on the calibration images, the same schedule for every pruned network.
* **AUC [proposed]**: :func:`fl_core.channelaxes.comparison.auc_accuracy_vs_flops`, trapezoid area under top-1 vs the
  FLOPs-removed fraction (the intact network at 0) divided by the grid's range, in accuracy units.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.pruner import LayerPruner, NetworkPruner, PrunedEvaluation, model_loss_and_correct
from fl_core.channelaxes.settings import CRITERIA, Criterion, PruningSettings
from fl_core.channelaxes.significance import Bootstrap, bootstrap
from fl_core.compute.progress import Progress, report
from fl_core.errors import AnalysisError
from fl_core.networks.evaluation import evaluate_classifier
from fl_core.results import Result

TP_CRITERIA = ("l1", "l2", "bn_gamma", "fpgm", "taylor", "random")


def evaluate_model(model: nn.Module, inputs: LabelledInputs, device: torch.device, batch_size: int = 64
                   ) -> tuple[float, float]:
    """Mean cross-entropy and top-1 accuracy of ``model`` on labelled inputs, under autocast; the model is left in
    eval mode."""
    return evaluate_classifier(model.eval(), inputs.batches(batch_size), device, autocast=True)


FINETUNE_MAX_GRAD_NORM = 10.0  # unclipped SGD at lr 0.01 diverged on a pruned SqueezeNet (first gradient norm 301)


def recovery_finetune(model: nn.Module, x: torch.Tensor, teacher_logits: torch.Tensor, settings: PruningSettings,
                      device: torch.device, frozen: Collection[str] = (), progress: Progress | None = None
                      ) -> nn.Module:
    """Distil the intact network back into a pruned (or filter-swapped) copy, in place [proposed].

    ``settings.finetune_steps`` SGD steps (momentum 0.9, gradient norm clipped to :data:`FINETUNE_MAX_GRAD_NORM`) on
    KL(softmax(teacher) ‖ softmax(copy)) over calibration images ``x``, in eval mode (BatchNorm statistics and dropout
    fixed). The intact network is a fixed point, so small steps only pull the copy back toward the original; hard
    labels on a few hundred images of 1000 classes overfit and wreck a pretrained network (10 steps at lr 1e-3 took
    SqueezeNet from 61.5 % to 13.5 % top-1). Parameters named in ``frozen`` are not trained (they stay bit for bit).
    ``progress`` hears of every step (with its KL). Returns the copy in eval mode.
    """
    model.to(device).eval().requires_grad_(True)
    for name in frozen:
        model.get_parameter(name).requires_grad_(False)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trained, lr=settings.finetune_lr, momentum=0.9)
    generator = torch.Generator().manual_seed(settings.seed)
    batch = min(settings.finetune_batch, len(x))
    for step in range(settings.finetune_steps):
        index = torch.randperm(len(x), generator=generator)[:batch]
        student = F.log_softmax(model(x[index].to(device)).float(), dim=1)
        teacher = F.log_softmax(teacher_logits[index].to(device), dim=1)
        loss = F.kl_div(student, teacher, log_target=True, reduction="batchmean")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(trained, FINETUNE_MAX_GRAD_NORM)
        optimizer.step()
        report(progress, (step + 1) / settings.finetune_steps,
               f"distillation step {step + 1}/{settings.finetune_steps} · KL {loss.item():.3f}")
    return model.requires_grad_(False).eval()


def batched_logits(model: nn.Module, x: torch.Tensor, device: torch.device, batch_size: int) -> torch.Tensor:
    """``model(x)`` in full precision, batched, on CPU."""
    with torch.no_grad():
        return torch.cat([model(chunk.to(device)).float().cpu() for chunk in x.split(batch_size)])


@dataclass(frozen=True)
class PruningCurve(Result):
    """Accuracy vs FLOPs removed for one criterion (the intact network first).

    Attributes:
        criterion, label, axis: the criterion.
        flops_removed: fraction of the whole network's MACs removed at each point.
        accuracy, loss: on the evaluation set without fine-tuning.
        auc: normalized area under accuracy vs flops_removed.
        accuracy_finetuned, auc_finetuned: after the recovery fine-tune (``None`` when not run).
        removed: channels removed at each point.
        auc_ci, auc_finetuned_ci: bootstrap intervals of the AUCs over the evaluation images (``None``: not
            resampled).
    """

    criterion: str
    label: str
    axis: str
    flops_removed: list[float]
    accuracy: list[float]
    loss: list[float]
    auc: float
    accuracy_finetuned: list[float] | None
    auc_finetuned: float | None
    removed: list[list[int]]
    auc_ci: list[float] | None = None
    auc_finetuned_ci: list[float] | None = None


@dataclass(frozen=True)
class PruningResult(Result):
    """FLOPs-matched pruning curves of one layer (proposed protocol, §6).

    Attributes:
        layer: the pruned conv; coupled_layers: layers pruned with it (DepGraph groups).
        channels_removed: channels removed at each point (0 first); flops_removed: fraction of MACs removed.
        macs, params: physical MACs and parameters of the pruned networks at each point.
        base_accuracy, base_loss: the intact network on the evaluation set.
        curves: one :class:`PruningCurve` per criterion.
        scores: importance per criterion ``(C,)`` (higher = keep).
        skipped: criteria that could not run, with the reason.
        settings: the protocol; n_images: evaluation images.
        notes: how removal treats the channels' means, and pruned networks that ran whole.
        computed_from: the module every pruned network ran from (:class:`PrunedEvaluation`; ``None``: the whole
            network, or not the same for all).
    """

    layer: str
    coupled_layers: list[str]
    channels_removed: list[int]
    flops_removed: list[float]
    macs: list[int]
    params: list[int]
    base_accuracy: float
    base_loss: float
    curves: dict[str, PruningCurve]
    scores: dict[str, np.ndarray]
    skipped: dict[str, str]
    settings: PruningSettings
    n_images: int = 0
    notes: list[str] = field(default_factory=list)
    computed_from: str | None = None

    _private_fields = ("scores",)

    _figures: ClassVar[dict[str, str]] = {"curves": "fl_core.channelaxes.plots:pruning_curves_figure"}

    def curves_dict(self) -> dict[str, dict]:
        """``{criterion: {flops_removed, accuracy, auc, ...}}`` (the ``pruning`` key of docs/cli.md, "JSON output")."""
        return {name: curve.to_dict() for name, curve in self.curves.items()}


def auc_text(auc_pp: float, ci_pp: Sequence[float] | None, n_images: int) -> str:
    """An AUC in percentage points with its interval and the evaluation set's size: ``61.2 pp [58.0, 64.1], n = 64``
    (with n images, one image moves an accuracy by 100/n points)."""
    interval = f" [{ci_pp[0]:.1f}, {ci_pp[1]:.1f}]" if ci_pp is not None and ci_pp[0] == ci_pp[0] else ""
    return f"{auc_pp:.1f} pp{interval}, n = {n_images}"


def curve_auc_text(curve: PruningCurve, n_images: int, finetuned: bool = False) -> str:
    """:func:`auc_text` of a one-layer curve's AUC (before or after its fine-tune)."""
    auc, ci = (curve.auc_finetuned, curve.auc_finetuned_ci) if finetuned else (curve.auc, curve.auc_ci)
    return auc_text(100 * auc, None if ci is None else [100 * v for v in ci], n_images)


def removal_counts(n_channels: int, fractions: Sequence[float]) -> list[int]:
    """Channels removed at each grid point: ``round(f·C)`` clipped to [1, C − 1], distinct, increasing."""
    counts = sorted({int(np.clip(round(f * n_channels), 1, n_channels - 1)) for f in fractions})
    if n_channels < 2 or not counts:
        raise AnalysisError("Pruning curves need a layer with at least 2 channels and one pruning fraction.")
    return counts


def lowest_first(scores: np.ndarray, count: int) -> list[int]:
    """The ``count`` channels of lowest importance (ties by index); an undefined (NaN) score is never taken first: it
    ranks after every defined one."""
    ranked = np.where(np.isnan(scores), np.inf, scores)
    return sorted(np.argsort(ranked, kind="stable")[:count].tolist())


def ranking(scores: np.ndarray, criterion: Criterion, layer: str) -> np.ndarray:
    """A criterion's ``scores`` of the channels of ``layer``, refused when every channel scores the same: its curve
    would remove them in index order (a BatchNorm folded into the convolution leaves every |γ| at 1)."""
    if np.ptp(scores) == 0:
        raise AnalysisError(f"every channel of {layer} has the same {criterion.label} ({scores[0]:.3g}), so it ranks "
                            "none of them" + (": the BatchNorm was folded into the convolution"
                                              if criterion.name == "bn_gamma" else ""))
    return scores


def criterion_scores(pruner: LayerPruner, criteria: Sequence[str], axis_scores: Mapping[str, np.ndarray],
                     calibration: LabelledInputs, settings: PruningSettings, device: torch.device
                     ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Each criterion's importance of the layer's channels (higher = keep), and the criteria that cannot rank them
    with the reason (:func:`ranking`)."""
    scores, skipped = {}, {}
    for name in criteria:
        if name in TP_CRITERIA:
            try:
                scores[name] = ranking(pruner.importance(name, calibration, device, settings.gradient_images,
                                                         settings.seed), CRITERIA[name], pruner.layer)
            except AnalysisError as err:
                skipped[name] = str(err)
        elif name in axis_scores:
            scores[name] = np.asarray(axis_scores[name], dtype=np.float64)
        else:
            skipped[name] = "the two-axis scores were not computed"
    return scores, skipped


def auc_intervals(flops_removed: Sequence[float], correct: Mapping[str, np.ndarray], resamples: int, seed: int,
                  differences: Sequence[tuple[str, str]] = ()) -> dict[str, Bootstrap]:
    """Percentile bootstrap over the evaluation images of each curve's AUC (:func:`auc_accuracy_vs_flops`) and of
    the paired differences ``a − b`` of ``differences`` (named ``"a-b"``).

    ``correct[name]`` is ``(points, n)``: each image's top-1 correctness at each point of the grid; a resample
    weights the images (``w``, how often each is drawn), so its accuracy at a point is ``Σ w·correct / Σ w``.
    """
    x = np.asarray(flops_removed, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    span = x[order[-1]] - x[order[0]]
    if span <= 0:
        raise AnalysisError("The pruning AUC needs at least two different FLOPs reductions.")
    n = next(iter(correct.values())).shape[1]

    def statistic(weights: np.ndarray) -> dict[str, np.ndarray]:
        auc = {name: np.trapezoid((weights @ k.T / weights.sum(1, keepdims=True))[:, order], x[order], axis=1) / span
               for name, k in correct.items()}
        return auc | {f"{a}-{b}": auc[a] - auc[b] for a, b in differences if a in auc and b in auc}

    return bootstrap(statistic, [n], resamples=resamples, seed=seed)


def prune_curves(model: nn.Module, layer: str, calibration: LabelledInputs, evaluation: LabelledInputs,
                 axis_scores: Mapping[str, np.ndarray], settings: PruningSettings | None = None, *,
                 device: torch.device, means: np.ndarray | None = None, readers: Sequence[str] = (),
                 batch_size: int = 64, memory_bytes: int = 1 << 30, resamples: int = 0, seed: int = 0,
                 progress: Progress | None = None) -> PruningResult:
    """Prune ``layer`` by every criterion at every grid point, evaluate, fine-tune, and integrate the curves.

    Args:
        model: a private copy of the network on ``device`` (it becomes the pruning template).
        layer: the conv to prune.
        calibration: images for gradients (Taylor) and the recovery fine-tune.
        evaluation: held-out images for the accuracies.
        axis_scores: importance of the two-axis criteria (``local``, ``target``, ...) computed elsewhere.
        settings: the protocol (default: ``PruningSettings()``).
        device: where to run.
        means: calibration means of the layer's channels at the site (for ``settings.compensate_mean``).
        readers: the layers that read the site directly (groups-1 convs / linear layers) and absorb the means.
        batch_size: evaluation batch size.
        memory_bytes: images kept in memory for the repeated evaluations and the fine-tune.
        resamples, seed: bootstrap resamples of the evaluation images for the AUCs' intervals (0: none).
        progress: ``progress(fraction, message)``.
    """
    settings = settings or PruningSettings()
    example, _ = calibration.head(1)
    evaluation = evaluation.materialized(memory_bytes)
    pruner = LayerPruner(model, layer, example.to(device))
    evaluator = PrunedEvaluation(pruner, evaluation, device, batch_size, memory_bytes)
    counts = removal_counts(pruner.n_channels, settings.fractions)
    compensation = means if settings.compensate_mean and means is not None and len(readers) else None
    notes = [compensation_note(settings, means, readers)]
    base_loss, base_correct = evaluator.template_scores()
    base_macs, base_params = pruner.cost(pruner.template)
    recovery = Recovery(pruner.template, calibration, settings, settings.finetune_steps, device, batch_size,
                        memory_bytes)
    scores, skipped = criterion_scores(pruner, settings.criteria, axis_scores, calibration, settings, device)

    macs, params, losses, correct, tuned, removed = [int(base_macs)], [int(base_params)], {}, {}, {}, {}
    total = max(len(scores) * len(counts), 1)
    for c_index, (name, score) in enumerate(scores.items()):
        losses[name], correct[name], tuned[name], removed[name] = [base_loss], [base_correct], [base_correct], [[]]
        for p_index, count in enumerate(counts):
            report(progress, (c_index * len(counts) + p_index) / total,
                   f"pruning by {CRITERIA[name].label}: {count}/{pruner.n_channels}")
            channels = lowest_first(score, count)
            pruned = pruner.pruned_copy(channels, compensation, readers)
            first_at_count = len(macs) <= len(counts)
            if first_at_count:
                ops, n_params = pruner.cost(pruned.model)
                macs.append(ops)
                params.append(n_params)
            loss, right = evaluator.scores(pruned, f"{count} channels removed", check=first_at_count)
            losses[name].append(loss)
            correct[name].append(right)
            removed[name].append(channels)
            if recovery.steps:
                tuned[name].append(recovery.correct(pruned.model, evaluation))
            del pruned
    flops = [1.0 - m / base_macs for m in macs]
    curves = {name: pruning_curve(name, flops, np.stack(correct[name]), np.stack(tuned[name]) if recovery.steps
                                  else None, resamples, seed, loss=losses[name], removed=removed[name])
              for name in scores}
    report(progress, 1.0, "pruning done")
    return PruningResult(layer=layer, coupled_layers=pruner.coupled_layers(), channels_removed=[0, *counts],
                         flops_removed=flops, macs=macs, params=params, base_accuracy=float(base_correct.mean()),
                         base_loss=base_loss, curves=curves, scores=scores, skipped=skipped, settings=settings,
                         n_images=len(evaluation), notes=notes + evaluator.notes, computed_from=evaluator.computed_from)


def compensation_note(settings: PruningSettings, means: np.ndarray | None, readers: Sequence[str]) -> str:
    """How removal treats the removed channels' means."""
    if settings.compensate_mean and means is not None and len(readers):
        return f"the removed channels' calibration means are folded into {', '.join(readers)}"
    reason = ("switched off" if not settings.compensate_mean else "no calibration means" if means is None
              else "no convolution reads the channels directly")
    return f"removal zeroes the channels (no mean compensation: {reason})"


def pruning_curve(name: str, flops: Sequence[float], correct: np.ndarray, tuned: np.ndarray | None, resamples: int,
                  seed: int, **fields) -> PruningCurve:
    """One criterion's :class:`PruningCurve` from each image's correctness at each point (``(points, n)``, before
    and after the recovery fine-tune), with the AUCs' bootstrap intervals."""
    curves = {"auc": correct} | ({"tuned": tuned} if tuned is not None else {})
    intervals = auc_intervals(flops, curves, resamples, seed)
    criterion = CRITERIA[name]
    return PruningCurve(
        criterion=name, label=criterion.label, axis=criterion.axis, flops_removed=list(flops),
        accuracy=correct.mean(1).tolist(), auc=intervals["auc"].estimate,
        accuracy_finetuned=None if tuned is None else tuned.mean(1).tolist(),
        auc_finetuned=None if tuned is None else intervals["tuned"].estimate,
        auc_ci=intervals["auc"].interval if resamples else None,
        auc_finetuned_ci=intervals["tuned"].interval if resamples and tuned is not None else None, **fields)


class Recovery:
    """The fixed recovery fine-tune of every pruned copy (:func:`recovery_finetune`: ``steps`` distillation steps of
    the intact ``template`` on the calibration images that fit in memory), then its per-image correctness."""

    def __init__(self, template: nn.Module, calibration: LabelledInputs, settings: PruningSettings, steps: int,
                 device: torch.device, batch_size: int, memory_bytes: int) -> None:
        self.steps, self.device, self.batch_size = steps, device, batch_size
        self.settings = settings if steps == settings.finetune_steps else replace(settings, finetune_steps=steps)
        if steps:
            example, _ = calibration.head(1)
            image_bytes = example[0].numel() * example.element_size()
            self.x, _ = calibration.head(max(2, min(len(calibration), memory_bytes // image_bytes)))
            self.teacher = batched_logits(template.eval(), self.x, device, batch_size)

    @property
    def n_images(self) -> int:
        return len(self.x) if self.steps else 0

    def correct(self, pruned: nn.Module, evaluation: LabelledInputs) -> np.ndarray:
        """Fine-tune a private copy of ``pruned`` (it shares the template's tensors) and score each image."""
        tuned = recovery_finetune(copy.deepcopy(pruned), self.x, self.teacher, self.settings, self.device)
        return model_loss_and_correct(tuned, evaluation, self.device, self.batch_size)[1]


# ------------------------------------------------------------------------------- several layers to a FLOPs target


@dataclass(frozen=True)
class NetworkCurve(Result):
    """Top-1 accuracy of one criterion's networks pruned to each FLOPs target, before and after the recovery
    fine-tune, and the AUCs in percentage points with their bootstrap intervals over the evaluation images.

    Attributes:
        criterion, label, axis: the criterion.
        accuracy, accuracy_recovered: at the intact network and each target reached (recovered: ``None`` without a
            recovery fine-tune).
        auc_pp, auc_pp_ci: 100 × :func:`auc_accuracy_vs_flops` and its interval.
        auc_recovered_pp, auc_recovered_pp_ci: the same after the recovery fine-tune.
    """

    criterion: str
    label: str
    axis: str
    accuracy: list[float]
    accuracy_recovered: list[float] | None
    auc_pp: float
    auc_pp_ci: list[float] | None
    auc_recovered_pp: float | None
    auc_recovered_pp_ci: list[float] | None


@dataclass(frozen=True)
class NetworkPruningResult(Result):
    """Several layers pruned together to FLOPs targets by each criterion (:func:`prune_network`).

    Attributes:
        layers: the layers pruned (one per dependency group); targets: the FLOPs targets reached.
        flops_removed: fraction of the network's MACs removed at the intact network (0) and each target (the least
            fraction of every layer's channels that reaches it, the same for every criterion).
        channels_removed: channels removed from each layer at each point.
        macs: MACs per image of the pruned networks; base_accuracy, base_loss: the intact network.
        curves: one :class:`NetworkCurve` per criterion.
        differences: paired bootstrap of ``local − target`` (AUC in percentage points, ``estimate`` and ``ci``),
            before (``auc``) and after (``recovered``) the recovery fine-tune, when both axes ran.
        skipped: criteria that could not rank some layer, with the reason; unreachable: targets beyond the MACs
            the layers hold (each keeps at least one channel).
        recovery_steps, recovery_images: the fixed recovery schedule (steps of ``settings``' fine-tune on that many
            calibration images); n_images: evaluation images; resamples: bootstrap resamples.
        settings: the protocol; notes: layers pruned through another, mean compensation, whole-network runs.
    """

    layers: list[str]
    targets: list[float]
    flops_removed: list[float]
    channels_removed: list[dict[str, int]]
    macs: list[int]
    base_accuracy: float
    base_loss: float
    curves: dict[str, NetworkCurve]
    differences: dict[str, dict]
    skipped: dict[str, str]
    unreachable: list[float]
    recovery_steps: int
    recovery_images: int
    n_images: int
    resamples: int
    settings: PruningSettings
    notes: list[str] = field(default_factory=list)

    _figures: ClassVar[dict[str, str]] = {"curves": "fl_core.channelaxes.plots:network_pruning_figure"}

    def to_frame(self) -> pd.DataFrame:
        """One row per criterion, then the paired ``local − target`` difference: the AUC (pp) with its 95 % interval
        before and after the recovery fine-tune (NaN where not run), the evaluation images and the protocol."""
        rows = [[c.label, c.axis, c.auc_pp, c.auc_pp_ci, c.auc_recovered_pp, c.auc_recovered_pp_ci]
                for c in self.curves.values()]
        if self.differences:
            auc, recovered = self.differences.get("auc", {}), self.differences.get("recovered", {})
            rows.append(["local − target", "difference", auc.get("local_minus_target_pp"), auc.get("ci"),
                         recovered.get("local_minus_target_pp"), recovered.get("ci")])
        return pd.DataFrame([{"criterion": label, "axis": axis, **_pp_columns("auc_pp", auc, ci),
                              **_pp_columns("auc_recovered_pp", recovered, recovered_ci)}
                             for label, axis, auc, ci, recovered, recovered_ci in rows]).assign(
            n_images=self.n_images, recovery_steps=self.recovery_steps,
            flops_targets=", ".join(f"{t:g}" for t in self.targets), layers=", ".join(self.layers))


def _pp_columns(name: str, value: float | None, ci: Sequence[float] | None) -> dict[str, float]:
    """``{name, name_low, name_high}``: a value in percentage points and its interval, NaN where missing."""
    low, high = ci if ci is not None else (None, None)
    return {name: _number(value), f"{name}_low": _number(low), f"{name}_high": _number(high)}


def _number(value: float | None) -> float:
    return np.nan if value is None else float(value)


def layer_counts(pruner: NetworkPruner, fraction: float) -> dict[str, int]:
    """Channels removed from each layer at ``fraction`` of its channels: ``round(f·C)``, at most ``C − 1``."""
    return {layer: min(round(fraction * p.n_channels), p.n_channels - 1) for layer, p in pruner.pruners.items()}


def flops_matched_counts(pruner: NetworkPruner, targets: Sequence[float], steps: int = 30
                         ) -> tuple[list[float], list[dict[str, int]], list[int], list[float]]:
    """For each target fraction of the network's MACs, the least common fraction ``f`` of every layer's channels
    (:func:`layer_counts`, bisection over ``f``) whose removal reaches it, measured on pruned copies.

    Returns ``(targets reached, counts per point, MACs per point, unreachable targets)``; targets that give the same
    counts as a smaller one are kept once.
    """
    base = pruner.cost(pruner.template)[0]

    def macs(counts: dict[str, int]) -> int:
        return pruner.cost(pruner.pruned_copy({layer: range(n) for layer, n in counts.items()}).model)[0]

    reached, points, point_macs, unreachable = [], [], [], []
    most = layer_counts(pruner, 1.0)
    most_macs = macs(most)
    for target in sorted(set(targets)):
        if 1 - most_macs / base < target:
            unreachable.append(float(target))
            continue
        low, high = 0.0, 1.0
        for _ in range(steps):
            middle = (low + high) / 2
            low, high = (middle, high) if 1 - macs(layer_counts(pruner, middle)) / base < target else (low, middle)
        counts = layer_counts(pruner, high)
        if counts not in points:
            reached.append(float(target))
            points.append(counts)
            point_macs.append(macs(counts))
    return reached, points, point_macs, unreachable


def prune_network(model: nn.Module, layers: Sequence[str], calibration: LabelledInputs, evaluation: LabelledInputs,
                  axis_scores: Mapping[str, Mapping[str, np.ndarray]], settings: PruningSettings | None = None, *,
                  device: torch.device, means: Mapping[str, np.ndarray] | None = None,
                  readers: Mapping[str, Sequence[str]] | None = None, batch_size: int = 64,
                  memory_bytes: int = 1 << 30, resamples: int = 0, seed: int = 0,
                  progress: Progress | None = None) -> NetworkPruningResult:
    """Prune ``layers`` together to each of ``settings.flops_targets`` by every criterion, recover each pruned network
    with the fixed fine-tune, and integrate the curves (docs/methods.md, "Pruning several layers to a FLOPs target").

    Every criterion removes as many channels from each layer (:func:`flops_matched_counts`), so the curves are
    matched in FLOPs and differ only in which channels go; each criterion ranks the channels within each layer.

    Args:
        model: a private copy of the network on ``device`` (the pruning template).
        layers: the convolutions pruned together.
        calibration, evaluation: images for the gradients and the fine-tune; held-out images for the accuracies.
        axis_scores: per layer, the two-axis criteria's importance (``local``, ``target``, ...).
        settings: the protocol (``flops_targets``, ``criteria``, ``recovery_steps`` with the fine-tune's ``finetune_lr``
            and ``finetune_batch``).
        device: where to run.
        means, readers: per layer, the calibration means and the layers that absorb them (mean compensation).
        batch_size, memory_bytes: how to run.
        resamples, seed: bootstrap resamples of the evaluation images for the AUCs' intervals (0: none).
        progress: ``progress(fraction, message)``.
    """
    settings = settings or PruningSettings()
    if not settings.flops_targets:
        raise AnalysisError("Give one or more FLOPs targets (flops_targets) to prune several layers together.")
    example, _ = calibration.head(1)
    evaluation = evaluation.materialized(memory_bytes)
    pruner = NetworkPruner(model, layers, example.to(device))
    means, readers = means or {}, readers or {}
    compensation = {layer: means[layer] for layer in pruner.layers if settings.compensate_mean
                    and layer in means and len(readers.get(layer, ()))}
    notes = [*pruner.notes, *(f"{layer}: {compensation_note(settings, means.get(layer), readers.get(layer, ()))}"
                              for layer in pruner.layers)]
    report(progress, 0.0, "finding each FLOPs target's channel counts")
    targets, counts, macs, unreachable = flops_matched_counts(pruner, settings.flops_targets)
    if not targets:
        raise AnalysisError(f"{', '.join(pruner.layers)} hold at most {1 - macs_at_most(pruner):.1%} of the network's "
                            "MACs: no FLOPs target can be reached; prune more layers.")
    evaluator = PrunedEvaluation(pruner, evaluation, device, batch_size, memory_bytes)
    base_loss, base_correct = evaluator.template_scores()
    base_macs = pruner.cost(pruner.template)[0]
    recovery = Recovery(pruner.template, calibration, settings, settings.recovery_steps, device, batch_size,
                        memory_bytes)
    scores, skipped = {}, {}
    for layer, layer_pruner in pruner.pruners.items():
        layer_scores, layer_skipped = criterion_scores(layer_pruner, settings.criteria, axis_scores.get(layer, {}),
                                                       calibration, settings, device)
        for name, score in layer_scores.items():
            scores.setdefault(name, {})[layer] = score
        skipped.update({name: f"{layer}: {reason}" for name, reason in layer_skipped.items() if name not in skipped})
    scores = {name: by_layer for name, by_layer in scores.items() if name not in skipped}

    correct, tuned = {}, {}
    total = max(len(scores) * len(counts), 1)
    for c_index, (name, by_layer) in enumerate(scores.items()):
        correct[name], tuned[name] = [base_correct], [base_correct]
        for p_index, (target, point) in enumerate(zip(targets, counts)):
            report(progress, 0.05 + 0.95 * (c_index * len(counts) + p_index) / total,
                   f"pruning by {CRITERIA[name].label} to {target:.0%} of the MACs")
            pruned = pruner.pruned_copy({layer: lowest_first(by_layer[layer], n) for layer, n in point.items()},
                                        compensation, readers)
            correct[name].append(evaluator.scores(pruned, f"{target:.0%} of the MACs removed",
                                                  check=c_index == 0)[1])
            if recovery.steps:
                tuned[name].append(recovery.correct(pruned.model, evaluation))
            del pruned
    flops = [0.0, *(1.0 - m / base_macs for m in macs)]
    curves, differences = network_curves(flops, correct, tuned if recovery.steps else None, resamples, seed)
    report(progress, 1.0, "pruning done")
    return NetworkPruningResult(
        layers=pruner.layers, targets=targets, flops_removed=flops,
        channels_removed=[dict.fromkeys(pruner.layers, 0), *counts], macs=[int(base_macs), *macs],
        base_accuracy=float(base_correct.mean()), base_loss=base_loss, curves=curves, differences=differences,
        skipped=skipped, unreachable=unreachable, recovery_steps=recovery.steps, recovery_images=recovery.n_images,
        n_images=len(evaluation), resamples=resamples, settings=settings, notes=notes + evaluator.notes)


def macs_at_most(pruner: NetworkPruner) -> float:
    """The pruned network's MACs as a fraction of the intact one's when every layer keeps one channel."""
    most = pruner.pruned_copy({layer: range(n) for layer, n in layer_counts(pruner, 1.0).items()})
    return pruner.cost(most.model)[0] / pruner.cost(pruner.template)[0]


def network_curves(flops: Sequence[float], correct: Mapping[str, list[np.ndarray]],
                   tuned: Mapping[str, list[np.ndarray]] | None, resamples: int, seed: int
                   ) -> tuple[dict[str, NetworkCurve], dict[str, dict]]:
    """Each criterion's :class:`NetworkCurve` and the paired ``local − target`` differences, in percentage points."""
    matrices = {name: np.stack(rows) for name, rows in correct.items()}
    if tuned is not None:
        matrices |= {f"{name}/recovered": np.stack(rows) for name, rows in tuned.items()}
    intervals = auc_intervals(flops, matrices, resamples, seed,
                              differences=[("local", "target"), ("local/recovered", "target/recovered")])

    def pp(name: str) -> tuple[float | None, list[float] | None]:
        if name not in intervals:
            return None, None
        return 100 * intervals[name].estimate, [100 * v for v in intervals[name].interval] if resamples else None

    curves = {}
    for name in correct:
        criterion = CRITERIA[name]
        (auc, auc_ci), (recovered, recovered_ci) = pp(name), pp(f"{name}/recovered")
        curves[name] = NetworkCurve(
            criterion=name, label=criterion.label, axis=criterion.axis, accuracy=matrices[name].mean(1).tolist(),
            accuracy_recovered=None if tuned is None else matrices[f"{name}/recovered"].mean(1).tolist(),
            auc_pp=auc, auc_pp_ci=auc_ci, auc_recovered_pp=recovered, auc_recovered_pp_ci=recovered_ci)
    differences = {}
    for key, name in (("auc", "local-target"), ("recovered", "local/recovered-target/recovered")):
        estimate, ci = pp(name)
        if estimate is not None:
            differences[key] = {"local_minus_target_pp": estimate, "ci": ci}
    return curves, differences

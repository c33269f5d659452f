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
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fl_core.backend import Progress, evaluate_classifier, report
from fl_core.channelaxes.calibration import LabelledInputs
from fl_core.channelaxes.comparison import auc_accuracy_vs_flops
from fl_core.channelaxes.pruner import LayerPruner, PrunedEvaluation
from fl_core.channelaxes.settings import CRITERIA, Criterion, PruningSettings
from fl_core.errors import AnalysisError
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


def prune_curves(model: nn.Module, layer: str, calibration: LabelledInputs, evaluation: LabelledInputs,
                 axis_scores: Mapping[str, np.ndarray], settings: PruningSettings | None = None, *,
                 device: torch.device, means: np.ndarray | None = None, readers: Sequence[str] = (),
                 batch_size: int = 64, memory_bytes: int = 1 << 30,
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
        progress: ``progress(fraction, message)``.
    """
    settings = settings or PruningSettings()
    example, _ = calibration.head(1)
    evaluation = evaluation.materialized(memory_bytes)
    if settings.finetune_steps > 0:
        image_bytes = example[0].numel() * example.element_size()
        tune_x, _ = calibration.head(max(2, min(len(calibration), memory_bytes // image_bytes)))
    pruner = LayerPruner(model, layer, example.to(device))
    evaluator = PrunedEvaluation(pruner, evaluation, device, batch_size, memory_bytes)
    counts = removal_counts(pruner.n_channels, settings.fractions)
    compensation = means if settings.compensate_mean and means is not None and len(readers) else None
    reason = ("switched off" if not settings.compensate_mean else "no calibration means" if means is None
              else "no convolution reads the channels directly")
    notes = [f"the removed channels' calibration means are folded into {', '.join(readers)}"
             if compensation is not None else f"removal zeroes the channels (no mean compensation: {reason})"]
    base_loss, base_accuracy = evaluator.template_scores()
    base_macs, base_params = pruner.cost(pruner.template)
    if settings.finetune_steps > 0:
        teacher_logits = batched_logits(pruner.template.eval(), tune_x, device, batch_size)

    scores, skipped = {}, {}
    for name in settings.criteria:
        if name in TP_CRITERIA:
            try:
                scores[name] = ranking(pruner.importance(name, calibration, device, settings.gradient_images,
                                                         settings.seed), CRITERIA[name], layer)
            except AnalysisError as err:
                skipped[name] = str(err)
        elif name in axis_scores:
            scores[name] = np.asarray(axis_scores[name], dtype=np.float64)
        else:
            skipped[name] = "the two-axis scores were not computed"

    macs, params, curves = [int(base_macs)], [int(base_params)], {}
    total = max(len(scores) * len(counts), 1)
    for c_index, (name, score) in enumerate(scores.items()):
        accuracy, losses, tuned, removed = [base_accuracy], [base_loss], [base_accuracy], [[]]
        for p_index, count in enumerate(counts):
            step = c_index * len(counts) + p_index
            report(progress, step / total, f"pruning by {CRITERIA[name].label}: {count}/{pruner.n_channels}")
            channels = lowest_first(score, count)
            pruned = pruner.pruned_copy(channels, compensation, readers)
            first_at_count = len(macs) <= len(counts)
            if first_at_count:
                ops, n_params = pruner.cost(pruned.model)
                macs.append(ops)
                params.append(n_params)
            loss, acc = evaluator.scores(pruned, f"{count} channels removed", check=first_at_count)
            losses.append(loss)
            accuracy.append(acc)
            removed.append(channels)
            if settings.finetune_steps > 0:  # (on a copy of its own: the pruned copy shares the template's tensors)
                tuned_model = recovery_finetune(copy.deepcopy(pruned.model), tune_x, teacher_logits, settings, device)
                tuned.append(evaluate_model(tuned_model, evaluation, device, batch_size)[1])
            del pruned
        flops = [1.0 - m / base_macs for m in macs]
        finetuned = tuned if settings.finetune_steps > 0 else None
        criterion = CRITERIA[name]
        curves[name] = PruningCurve(
            criterion=name, label=criterion.label, axis=criterion.axis, flops_removed=flops, accuracy=accuracy,
            loss=losses, auc=auc_accuracy_vs_flops(flops, accuracy), accuracy_finetuned=finetuned,
            auc_finetuned=auc_accuracy_vs_flops(flops, finetuned) if finetuned else None, removed=removed)
    report(progress, 1.0, "pruning done")
    return PruningResult(layer=layer, coupled_layers=pruner.coupled_layers(), channels_removed=[0, *counts],
                         flops_removed=[1.0 - m / base_macs for m in macs], macs=macs, params=params,
                         base_accuracy=base_accuracy, base_loss=base_loss, curves=curves, scores=scores,
                         skipped=skipped, settings=settings, n_images=len(evaluation), notes=notes + evaluator.notes,
                         computed_from=evaluator.computed_from)


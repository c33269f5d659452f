"""Swap → recover → re-score, the papers' protocol: idealized depthwise filters frozen, the rest of the network trained.

Babaiee et al. train networks whose depthwise filters are frozen master keys, and Lindeberg et al. write the idealized
filters into a checkpoint and fine-tune it with the depthwise layers frozen (docs/methods.md, "Recovery
protocol"). Scoring a swapped network without that step measures something else: every layer's small error
compounds (MobileNetV2 with all depthwise layers swapped by method B falls from 78.7 % to 3.8 % top-1). Here, on a
private copy of each swapped network:

1. **Split.** The images are split at random (seeded) into a calibration set and a disjoint held-out set
   (:func:`split_calibration`; the two image lists are checked never to overlap). Everything is scored on the
   held-out set only: the original, each swap unrecovered and each swap recovered, on the same decoded batches.
2. **BatchNorm recalibration** (:func:`fl_core.networks.batchnorm.recalibrate_batchnorm`): the new filters change the
   mean and variance of every later activation; the running statistics are re-estimated on the calibration images.
3. **Distillation** (:func:`fl_core.channelaxes.pruning.recovery_finetune`, the recovery of the pruning curves):
   ``steps`` SGD steps on KL(p_original ‖ p_copy) over the calibration images, the swapped filters frozen bit for bit,
   every other parameter (pointwise convs, BatchNorm γ and β, the classifier) trained [proposed: the papers fine-tune on
   all of ImageNet-1k train; this is the few-minute version on a few hundred images, with no labels needed].
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fl_core.channelaxes.pruning import batched_logits, recovery_finetune
from fl_core.channelaxes.settings import PruningSettings
from fl_core.compute.progress import Progress, report, sub_progress
from fl_core.errors import AnalysisError, DataError
from fl_core.io.images import ImageSet, iter_input_batches
from fl_core.io.models import LoadedModel
from fl_core.masterkeys.settings import RecoverySettings
from fl_core.masterkeys.swap import FilterSwap, swapped_model
from fl_core.networks.batchnorm import fold_batchnorm, recalibrate_batchnorm
from fl_core.results import Result


@dataclass(frozen=True)
class RecoveryInfo(Result):
    """What a recovery did, for the result.

    Attributes:
        settings: the protocol.
        n_calibration: calibration images (never scored).
        n_held_out: held-out images (all scores).
        batchnorm_layers: BatchNorm layers recalibrated per network (0 when switched off or none).
        frozen: swapped filter tensors frozen, per swap.
        seconds: wall time of all recoveries (decoding the calibration images included).
    """

    settings: RecoverySettings
    n_calibration: int
    n_held_out: int
    batchnorm_layers: int
    frozen: tuple[int, ...]
    seconds: float


def split_calibration(images: ImageSet, n_calibration: int, seed: int) -> tuple[ImageSet, ImageSet]:
    """``(calibration, held_out)``: ``n_calibration`` images drawn at random (seeded), and all the others.

    Raises:
        DataError: too few images for both sets, or an image (by name) in both.
    """
    if not 1 <= n_calibration < len(images):
        raise DataError(f"Recovery needs calibration images and held-out images: {n_calibration} calibration images "
                        f"leave none of {len(images)} to score. Give more images or fewer calibration images.")
    order = np.random.default_rng(seed).permutation(len(images))
    calibration = images.subset(np.sort(order[:n_calibration]).tolist())
    held_out = images.subset(np.sort(order[n_calibration:]).tolist())
    shared = set(calibration.names) & set(held_out.names)
    if shared:
        raise DataError(f"{len(shared)} images (e.g. {sorted(shared)[0]}) would be both calibration and held-out "
                        "images: give a set whose images have distinct names.")
    return calibration, held_out


def recover_swap(loaded: LoadedModel, swap: FilterSwap, x: torch.Tensor, teacher_logits: torch.Tensor,
                 settings: RecoverySettings, device: torch.device, progress: Progress | None = None
                 ) -> tuple[nn.Module, int]:
    """A private swapped copy, recovered with its swapped filters frozen (module docstring, steps 2-3).

    Args:
        loaded: the model (never changed).
        swap: the swap to recover.
        x: calibration inputs (N, 3, S, S).
        teacher_logits: the original network's logits on ``x``.
        settings: the protocol.
        device: where to train.
        progress: ``progress(fraction, message)``.

    Returns:
        (the recovered copy in eval mode on ``device``, BatchNorm layers recalibrated).
    """
    model = swapped_model(loaded, swap).to(device)
    matching = 2 * len(x) if settings.recalibrate_batchnorm else 0  # forward passes, against 3 per distilled image
    share = matching / max(matching + 3 * settings.steps * settings.batch, 1)
    recalibrated = 0
    if settings.recalibrate_batchnorm:
        recalibrated = recalibrate_batchnorm(model, loaded.forward_copy(device), x.split(settings.batch), device,
                                             sub_progress(progress, 0.0, share))
    schedule = PruningSettings(finetune_steps=settings.steps, finetune_lr=settings.lr, finetune_batch=settings.batch,
                               seed=settings.seed)
    if settings.steps:
        recovery_finetune(model, x, teacher_logits, schedule, device, frozen=tuple(swap.weights),
                          progress=sub_progress(progress, share, 1.0))
    return model.eval(), recalibrated


def recovered_states(loaded: LoadedModel, swaps: Sequence[FilterSwap], calibration: ImageSet,
                     settings: RecoverySettings, template: nn.Module, example: torch.Tensor, device: torch.device,
                     progress: Progress | None = None) -> tuple[list[dict[str, torch.Tensor]], int, float]:
    """Recover every swap and return each recovered network as a full state of the scoring ``template``.

    The template is the private inference copy of :func:`fl_core.masterkeys.rescore.rescore` (BatchNorm folded with
    ``example``); each recovered copy is folded the same way, so its state has the template's keys and can be
    copied into it before a forward pass.

    Returns:
        (one state per swap, BatchNorm layers recalibrated per network, seconds).

    Raises:
        AnalysisError: a recovered copy does not fold like the template.
    """
    start = time.perf_counter()
    report(progress, 0.0, f"decoding {len(calibration)} calibration images")
    x = torch.cat([x for x, _ in iter_input_batches(calibration, loaded.input_config, batch_size=settings.batch)])
    teacher = batched_logits(template.eval(), x, device, settings.batch)
    keys = set(template.state_dict())
    states, recalibrated = [], 0
    for i, swap in enumerate(swaps):
        step = sub_progress(progress, i / len(swaps), (i + 1) / len(swaps))
        report(step, 0.0, f"recovering {swap.replacement} ({i + 1}/{len(swaps)})")
        model, recalibrated = recover_swap(loaded, swap, x, teacher, settings, device, step)
        fold_batchnorm(model, example.to(device))
        state = model.state_dict()  # detached tensors, the copy's own
        if set(state) != keys:
            raise AnalysisError(f"The recovered {swap.replacement} network does not fold its BatchNorms like the "
                                "original: re-score it without recovery, or report the model.")
        states.append(state)
    return states, recalibrated, time.perf_counter() - start

"""Re-scoring: top-1 / top-5 / loss of a model and of swapped variants on an ImageFolder tree, each image decoded once.

* Data: the standard ImageNet val layout (``val/<wnid>/*.JPEG``, sorted wnids = class indices) or any ImageFolder
  tree, with the model's own preprocessing (:func:`fl_core.io.images.input_transform`), batched by a ``DataLoader`` with
  worker processes (threads inside a daemonic process, such as a Dask worker, which may not start processes); forward
  passes run in channels-last memory layout (faster on the CPU, the layout tensor cores want on GPU) under
  :func:`fl_core.compute.device.inference_autocast` (bf16/fp16 on GPU).
* Classes: each tree folder is mapped onto a model output by ImageNet-1k wnid, by the model's class name (ignoring
  case, spaces, underscores and hyphens) or by index; accuracy is on the images of the folders that map (the others
  count for agreement only, and the result's warnings say how many); when no folder maps, by sorted position if the
  counts agree, else there is no accuracy, only agreement with the original model
  (:func:`fl_core.io.classes.map_tree_classes`, which says what it did and why).
* Inference copy: every eval-mode BatchNorm (also timm's ``BatchNormAct2d``) that reads a conv's output is folded into
  that conv (:func:`fold_batchnorm`; faster: docs/results.md, "Measurements behind design choices"), and swapped filters
  are scaled the same way, so the numbers are those of the unfolded network up to float rounding.
* Variants: the original and every swap run on each decoded batch, so decoding is shared by all variants. Each swap
  is a copy of the private model built once, sharing every tensor it does not change (no parameters are copied per
  batch). A variant that differs from the original only from some module on (a stage-wise swap, one layer of a sweep)
  runs only from there, on the original's activation at that point (:mod:`fl_core.networks.partial_forward`, checked on
  the first batch against its full forward pass).
* Per variant: top-1, top-5, mean cross-entropy (labelled images), the top-1 agreement with the original and the
  mean KL(p_original ‖ p_variant) in nats (all images).
* Resumable: with ``resume=PATH`` the running sums are saved after every batch and a rerun with the same model,
  images and variants continues where it stopped (a finished run returns at once). The path is written under the path
  policy (:func:`fl_core.io.paths.check_writable`); a file there that is not a resume file, or the resume file of
  other inputs (another fingerprint), is refused before the model loads or scores, and left as it is.
* Distributed (:mod:`fl_core.masterkeys.distributed`): under ``torchrun`` (``WORLD_SIZE`` > 1) each rank scores a
  contiguous shard and the integer counts and float64 sums are all-reduced, so every rank returns the numbers of one
  process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from fl_core.arguments import ImagesLike, ModelLike, as_images, as_model, as_settings
from fl_core.compute.device import DeviceLike, inference_autocast, statistics_dtype
from fl_core.compute.progress import Progress, ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import AnalysisError, ArgumentError, DataError, value_text
from fl_core.io.classes import map_tree_classes
from fl_core.io.images import ImageSet, TransformedImages, input_transform, threaded_batches
from fl_core.io.models import LoadedModel
from fl_core.io.paths import check_writable, open_readable
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.distributed import all_reduce_sums, distributed_rank, rank_device, shard_range
from fl_core.masterkeys.recovery import RecoveryInfo
from fl_core.masterkeys.settings import (
    DEFAULT_BATCH_SIZE,
    RecoverySettings,
    RescoreOverrides,
    RescoreSettings,
    ScoringSettings,
)
from fl_core.masterkeys.swap import FilterSwap, parameter_patch, swap_filters
from fl_core.networks.batchnorm import fold_batchnorm, folded_patch
from fl_core.networks.partial_forward import (
    PROBE_IMAGES,
    SuffixPlan,
    changed_keys,
    full_forwards,
    plan_suffixes,
    shared_copy,
)
from fl_core.results import Result, with_model_columns

log = logging.getLogger(__name__)

ORIGINAL = "original"
TALLY_COLUMNS = ("images", "labelled", "loss", "top1", "top5", "agreement", "kl")
MAX_RESUME_BYTES = 16 << 20
"""Size of a resume file (its sums: 7 numbers per variant)."""

if TYPE_CHECKING:
    from typing_extensions import Unpack


# ---------------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Scores(Result):
    """What a variant scores on the images, against the original.

    Attributes:
        top1, top5: accuracy on the labelled images (fractions; ``None`` without labels).
        loss: mean cross-entropy in nats (``None`` without labels).
        delta_top1: top-1 minus the original's (``None`` without labels).
        agreement: fraction of images with the same top-1 class as the original.
        kl: mean KL(p_original ‖ p_variant) in nats.
    """

    top1: float | None
    top5: float | None
    loss: float | None
    delta_top1: float | None
    agreement: float
    kl: float


@dataclass(frozen=True)
class RecoveredScore(Scores):
    """:class:`Scores` of a swap after recovery (:mod:`fl_core.masterkeys.recovery`), on the same held-out images as
    the unrecovered one.

    Attributes:
        steps: distillation steps taken.
    """

    steps: int


@dataclass(frozen=True)
class VariantScore(Scores):
    """:class:`Scores` of one variant (the original or a swap).

    Attributes:
        method: ``"original"`` or the swap's replacement name.
        n_images: images scored.
        relative_error: ‖W - Ŵ‖/‖W‖ of the swap (``None`` for the original).
        recovered: the same swap's scores after recovery, when recovery ran.
        computed_from: the module from which this variant's own forward passes ran, on the original's activation
            there (:mod:`fl_core.networks.partial_forward`); ``None``: the whole network ran.
    """

    method: str
    n_images: int
    relative_error: float | None
    recovered: RecoveredScore | None = None
    computed_from: str | None = None

    def row(self) -> dict:
        """A flat table row, the variant first: ``method``, ``n_images``, the scores, and the recovered scores as
        ``recovered_*`` columns."""
        row = self.to_dict()
        recovered = row.pop("recovered") or {}
        return {"method": row.pop("method"), "n_images": row.pop("n_images"), **row,
                **{f"recovered_{key}": value for key, value in recovered.items()}}


@dataclass(frozen=True)
class RescoreResult(Result):
    """Original vs swapped accuracy; ``to_dict()`` is the ``rescore`` CLI JSON.

    Attributes:
        spec, label: the model.
        images: description of the image source.
        n_images, top1, top5, loss: the original model's scores (accuracy ``None`` without labels).
        n_labelled: the images of the model's classes, on which accuracy is computed (``None`` without labels;
            below ``n_images`` when some folders name none of the model's classes: ``warnings`` says which).
        swaps: one :class:`VariantScore` per swap, in order.
        classes: how tree classes were mapped (:class:`~fl_core.io.classes.ClassMapping`.how).
        warnings: tree/model disagreements.
        seconds: wall time of the scoring (this run; resumed work not included).
        images_per_second: decoded images per second (each used by every variant).
        world_size: processes that shared the work.
        device: where the forward passes ran (rank 0's device).
        resumed_images: images taken from a resume file instead of being scored again.
        recovery: the recovery protocol and split, when recovery ran (every score is then on the held-out images).
        sharing: why variants that differ only from some module on still ran the whole network
            (:mod:`fl_core.networks.partial_forward`).
    """

    spec: str
    label: str
    images: str
    n_images: int
    top1: float | None
    top5: float | None
    loss: float | None
    swaps: tuple[VariantScore, ...]
    classes: str
    warnings: tuple[str, ...]
    seconds: float
    images_per_second: float
    world_size: int
    device: str
    resumed_images: int
    recovery: RecoveryInfo | None = None
    sharing: tuple[str, ...] = ()
    n_labelled: int | None = None

    _figures: ClassVar[dict[str, str]] = {"scores": "fl_core.masterkeys.plots:scores_figure"}

    def to_frame(self) -> pd.DataFrame:
        """One row per variant (the original first) after the model's label and spec, with Δ top-1, agreement, KL,
        reconstruction error and, when recovery ran, the recovered scores (``recovered_*``)."""
        original = VariantScore(method=ORIGINAL, n_images=self.n_images, top1=self.top1, top5=self.top5,
                                loss=self.loss, delta_top1=0.0 if self.top1 is not None else None, agreement=1.0,
                                kl=0.0, relative_error=None)
        return with_model_columns(pd.DataFrame([v.row() for v in (original, *self.swaps)]), self.label, self.spec)


# ----------------------------------------------------------------------------------------------------- resume


def _fingerprint(loaded: LoadedModel, images: ImageSet, names: Sequence[str],
                 patches: Sequence[Mapping[str, torch.Tensor]], shard: range) -> str:
    """Hash of everything that determines the sums: model, preprocessing, images, variants and their weights."""
    digest = hashlib.sha256()
    header = {"spec": loaded.spec, "sha256": loaded.sha256, "input": loaded.input_config.to_dict(),
              "images": images.description, "names": list(names), "shard": [shard.start, shard.stop]}
    digest.update(json.dumps(header, sort_keys=True).encode())
    digest.update("\n".join(images.names).encode())
    for patch in patches:
        for key in sorted(patch):
            digest.update(key.encode())
            digest.update(patch[key].detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def _resume_file(resume: Path, rank: int, world: int) -> Path:
    return resume if world == 1 else resume.with_name(f"{resume.stem}.rank{rank}of{world}{resume.suffix}")


def check_resume(path: str | Path) -> Path:
    """``path``, where the path policy lets the library write it and, if a file is there, one this module wrote
    (:func:`read_resume`): checked before anything is scored, so no other file is ever overwritten.

    Raises:
        DataError: outside the folders the library may write, or a file there that is not a resume file.
    """
    path = check_writable(path)
    if path.exists():
        read_resume(path)
    return path


def read_resume(path: Path) -> dict:
    """The state saved in the resume file ``path`` (``fingerprint``, ``done``, ``columns``, ``sums``).

    Raises:
        DataError: not a resume file (another file, too large, or not a regular file).
    """
    refused = (f"{path} is not a FilterLens re-score resume file: refused, and left as it is. Give the path of a new "
               "file, or of one a re-score wrote.")
    try:
        with open_readable(path) as handle:
            state = json.loads(handle.read(MAX_RESUME_BYTES + 1))
    except (OSError, ValueError) as err:
        raise DataError(refused) from err
    if not (isinstance(state, dict) and set(state) == {"fingerprint", "done", "columns", "sums"}
            and state["columns"] == list(TALLY_COLUMNS) and isinstance(state["fingerprint"], str)
            and isinstance(state["done"], int) and isinstance(state["sums"], list)):
        raise DataError(refused)
    return state


def _load_resume(path: Path | None, fingerprint: str, variants: int) -> tuple[int, np.ndarray]:
    """(images already done, sums) from the resume file of these inputs, else (0, zeros) when there is none yet.

    Raises:
        DataError: the file is not a resume file, or one of other inputs (left as it is).
    """
    empty = (0, np.zeros((variants, len(TALLY_COLUMNS))))
    if path is None or not check_writable(path).exists():
        return empty
    state = read_resume(path)
    if state["fingerprint"] != fingerprint:
        raise DataError(f"{path} is the resume file of another model, image set or set of swaps: refused, and left as "
                        "it is. Give another path, or delete the file to start afresh.")
    sums = np.asarray(state["sums"], dtype=np.float64)
    if sums.shape != empty[1].shape or not 0 <= state["done"] <= sums[0, 0]:
        raise DataError(f"{path} holds sums of another shape than its inputs': refused, and left as it is.")
    return state["done"], sums


def _save_resume(path: Path, fingerprint: str, done: int, sums: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps({"fingerprint": fingerprint, "done": done, "columns": TALLY_COLUMNS,
                                     "sums": sums.tolist()}))
    temporary.replace(path)


# ---------------------------------------------------------------------------------------------------- scoring


def _batch_tally(logits: torch.Tensor, labels: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Sums of one batch for one variant in :data:`TALLY_COLUMNS` order, in ``reference``'s (statistics) dtype.

    ``reference`` holds the original's log-probabilities; ``labels`` are -1 where unknown.
    """
    dtype = reference.dtype
    log_probs = F.log_softmax(logits.to(dtype), dim=1)
    known = labels >= 0
    safe = labels.clamp_min(0)
    top = logits.topk(min(5, logits.shape[1]), dim=1).indices
    hit = top == safe[:, None]
    kl = (reference.exp() * (reference - log_probs)).sum(dim=1)
    return torch.stack([
        torch.tensor(float(len(labels)), dtype=dtype, device=logits.device),
        known.to(dtype).sum(),
        -(log_probs.gather(1, safe[:, None]).squeeze(1) * known).sum(),
        (hit[:, 0] & known).to(dtype).sum(),
        (hit.any(dim=1) & known).to(dtype).sum(),
        (top[:, 0] == reference.argmax(dim=1)).to(dtype).sum(),
        kl.sum()])


def _default_workers(n_images: int, batch_size: int) -> int:
    """CPU cores - 1 (at most 8) decoding in parallel with the forward passes; none for a single batch."""
    return 0 if n_images <= batch_size else min(8, max(1, (os.cpu_count() or 2) - 1))


def _batches(images: ImageSet, loaded: LoadedModel, batch_size: int, workers: int,
             device: torch.device) -> Iterable[list[torch.Tensor]]:
    """``(x, labels)`` batches of ``images`` in the model's input space, in order, decoded by ``workers`` DataLoader
    processes; inside a daemonic process (a Dask worker: the dashboard's jobs), which may not start processes, by as
    many threads of its own (:func:`~fl_core.io.images.threaded_batches`)."""
    dataset, pin = TransformedImages(images, input_transform(loaded.input_config)), device.type == "cuda"
    if workers > 0 and multiprocessing.current_process().daemon:
        return threaded_batches(dataset, batch_size, workers, pin_memory=pin)
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=workers, pin_memory=pin,
                      persistent_workers=False, prefetch_factor=4 if workers > 0 else None)


def _eta(seconds: float) -> str:
    minutes, secs = divmod(round(max(seconds, 0.0)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


def score_variants(model: nn.Module, patches: Sequence[Mapping[str, torch.Tensor]], loaded: LoadedModel,
                   images: ImageSet, label_map: np.ndarray | None, *, device: torch.device,
                   batch_size: int = DEFAULT_BATCH_SIZE, workers: int | None = None, resume: Path | None = None,
                   names: Sequence[str] = (), share_prefix: bool = True, progress: Progress | None = None
                   ) -> tuple[np.ndarray, int, float, SuffixPlan]:
    """Run every variant on each decoded batch of this rank's shard; return the all-reduced sums.

    Args:
        model: a private model on ``device`` (never changed: each variant is a copy sharing its unchanged tensors,
            built once, :func:`fl_core.networks.partial_forward.shared_copy`).
        patches: per variant, parameter or buffer name -> tensor (the first must be ``{}``, the original).
        loaded: the model's spec, hash and preprocessing (for the data and the resume fingerprint).
        images: the image set (labels are tree class indices).
        label_map: tree class -> model output, or ``None`` to ignore labels.
        device: where to run.
        batch_size, workers: data loading.
        resume: resume file (module docstring).
        names: variant names (for the fingerprint and the sharing notes).
        share_prefix: run variants that differ only from some module on from there
            (:mod:`fl_core.networks.partial_forward`; the plan is made on the first batch).
        progress: ``progress(fraction, message)`` with speed and ETA.

    Returns:
        (sums (variants, len(TALLY_COLUMNS)) over all ranks, images resumed from files, seconds of this run, how
        the variants after the original ran on this rank).
    """
    if patches and patches[0]:
        raise AnalysisError("The first variant must be the original (an empty patch).")
    rank, world = distributed_rank()
    shard = shard_range(len(images), rank, world)
    resume_path = _resume_file(Path(resume), rank, world) if resume else None
    fingerprint = _fingerprint(loaded, images, names, patches, shard) if resume_path else ""
    done, sums = _load_resume(resume_path, fingerprint, len(patches))
    resumed = done
    mapping = None if label_map is None else torch.as_tensor(np.append(label_map, -1), device=device)
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    changed = changed_keys(patches[1:], tensors)
    copies = [shared_copy(model, {key: patch[key] for key in keys}) for patch, keys in zip(patches[1:], changed)]
    todo = images.subset(shard[done:])
    workers = _default_workers(len(todo), batch_size) if workers is None else workers
    start = time.perf_counter()
    scored = 0
    tally = torch.as_tensor(sums, dtype=statistics_dtype(device), device=device)
    plan = None
    for x, labels in _batches(todo, loaded, batch_size, workers, device):
        x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        labels = mapping[labels.to(device)] if mapping is not None else torch.full_like(labels, -1).to(device)
        with torch.no_grad(), inference_autocast(device):
            if plan is None:
                plan = (plan_suffixes(model, copies, changed, x[:PROBE_IMAGES], names[1:])
                        if share_prefix and copies else full_forwards(len(copies)))
                for note in plan.notes:
                    log.warning("prefix sharing: %s", note)
            outputs = [logits.float() for logits in plan.outputs(model, copies, x)]
        reference = F.log_softmax(outputs[0].to(statistics_dtype(device)), dim=1)
        tally += torch.stack([_batch_tally(logits, labels, reference) for logits in outputs])
        scored += len(x)
        if resume_path is not None:  # (copying the sums to the CPU waits for the device)
            _save_resume(resume_path, fingerprint, done + scored, tally.cpu().numpy())
        elapsed = time.perf_counter() - start
        rate = scored / elapsed
        report(progress, (done + scored) / max(len(shard), 1),
               f"{done + scored}/{len(shard)} images × {len(patches)} variants · {rate:.1f} img/s · "
               f"ETA {_eta((len(shard) - done - scored) / rate)}")
    return (*all_reduce_sums(tally, resumed, time.perf_counter() - start), plan or full_forwards(len(copies)))


def _scores(row: np.ndarray, original: np.ndarray) -> dict[str, float | None]:
    """The :class:`Scores` fields of one variant's sums (``original``: the original's sums, for Δ top-1)."""
    values = dict(zip(TALLY_COLUMNS, row))
    images, labelled = max(int(values["images"]), 1), values["labelled"]

    def per_label(column: str, sums: np.ndarray = row) -> float | None:
        return float(dict(zip(TALLY_COLUMNS, sums))[column] / labelled) if labelled > 0 else None

    top1 = per_label("top1")
    return {"top1": top1, "top5": per_label("top5"), "loss": per_label("loss"),
            "delta_top1": None if top1 is None else top1 - per_label("top1", original),
            "agreement": float(values["agreement"] / images), "kl": float(values["kl"] / images)}


def _variant(name: str, row: np.ndarray, original: np.ndarray, error: float | None,
             computed_from: str | None = None) -> VariantScore:
    return VariantScore(method=name, n_images=int(row[TALLY_COLUMNS.index("images")]), relative_error=error,
                        computed_from=computed_from, **_scores(row, original))


def analyze_rescore(model: ModelLike, data: ImagesLike | None = None, settings: RescoreSettings | None = None, *,
                    swaps: Sequence[FilterSwap] | None = None, resume: str | Path | None = None,
                    device: DeviceLike = None, progress: ProgressLike = None,
                    **setting_overrides: Unpack[RescoreOverrides]) -> RescoreResult:
    """Score the original model and every swap on the same decoded images (module docstring).

    Args:
        model: a full model (spec string, :class:`LoadedModel` or ``nn.Module``; never changed: a private copy is
            scored).
        data: an ImageFolder tree (:attr:`~fl_core.io.images.ImageSet.labelled`: accuracy) or any image source
            (agreement with the original only, e.g. the bundled photos, the default, whose labels are photo names).
        settings: the swaps (replacements, layers, stages, k, seed), recovery and batching; ``setting_overrides``
            replace fields (``replacements=("B",)``, ``batch_size=32``, ``recovery=RecoverySettings()``).
        **setting_overrides: fields of ``settings`` to replace, by name.
        swaps: variants made by :func:`fl_core.masterkeys.swap.swap_filters`, scored instead of the settings' ones.
        resume: file of running sums; a rerun with the same inputs continues from it.
        device: where to run (under torchrun with CUDA: this rank's GPU).
        progress: ``progress(fraction, message)``.

    Raises:
        AnalysisError: recovery under torchrun (it runs in one process); replacements for a model without depthwise
            filters.
        ArgumentError: ``swaps`` that are not :class:`FilterSwap` variants.
        DataError: a ``resume`` path outside the folders the library may write, a file there that is not a resume
            file or the resume file of other inputs (left as it is), images that cannot be read.
    """
    if isinstance(settings, Sequence):
        raise ArgumentError("settings must be a RescoreSettings (or None); pass FilterSwap variants as swaps=[...].")
    settings = as_settings(RescoreSettings, settings, setting_overrides)
    swaps = None if swaps is None else checked_swaps(swaps)
    if resume is not None:
        check_resume(resume)
    device, progress = rank_device(device), progress_callback(progress)
    images = as_images(data)
    loaded = as_model(model, progress=progress)
    swaps = variant_swaps(loaded, settings, settings.replacements, device) if swaps is None else swaps
    recovery = settings.recovery
    classes = images.classes if images.labelled else ()
    mapping = map_tree_classes(classes, loaded.num_classes, loaded.class_names, images.labels if classes else None)
    for warning in mapping.warnings:
        log.warning(warning)
    model = loaded.copy_model().eval()
    size = loaded.input_config.input_size
    example = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    scales = fold_batchnorm(model, example)
    model = model.to(device, memory_format=torch.channels_last)
    names = [ORIGINAL, *(s.replacement for s in swaps)]
    patches = [{}, *(folded_patch(parameter_patch(model, s), scales) for s in swaps)]
    info, scoring = None, progress
    if recovery is not None and swaps:
        info, recovered, images, scoring = _recover(loaded, swaps, images, recovery, model, example, device, progress)
        names += [f"{s.replacement} recovered" for s in swaps]
        patches += recovered
    sums, resumed, seconds, plan = score_variants(model, patches, loaded, images, mapping.label_map, device=device,
                                                  batch_size=settings.batch_size, workers=settings.workers,
                                                  resume=resume, names=names, share_prefix=settings.share_prefix,
                                                  progress=scoring)
    original = _variant(ORIGINAL, sums[0], sums[0], None)
    scored = original.n_images - resumed
    variants = [_variant(s.replacement, row, sums[0], s.relative_error, plan.start_name(i))
                for i, (s, row) in enumerate(zip(swaps, sums[1:]))]
    if info is not None:
        variants = [dataclasses.replace(v, recovered=RecoveredScore(steps=recovery.steps, **_scores(row, sums[0])))
                    for v, row in zip(variants, sums[1 + len(swaps):])]
    return RescoreResult(
        spec=loaded.spec, label=loaded.label, images=images.description, n_images=original.n_images,
        top1=original.top1, top5=original.top5, loss=original.loss, swaps=tuple(variants),
        n_labelled=None if original.top1 is None else int(sums[0][TALLY_COLUMNS.index("labelled")]),
        classes=mapping.how, warnings=mapping.warnings, seconds=seconds,
        images_per_second=scored / seconds if seconds > 0 else 0.0, world_size=distributed_rank()[1],
        device=str(device), resumed_images=resumed, recovery=info, sharing=plan.notes)


def checked_swaps(swaps: object) -> list[FilterSwap]:
    """``swaps`` as a list, every item a :class:`FilterSwap` (checked before the model loads).

    Raises:
        ArgumentError: naming the first item that is not one.
    """
    items = list(swaps) if isinstance(swaps, Sequence) and not isinstance(swaps, str | bytes) else [swaps]
    if wrong := [item for item in items if not isinstance(item, FilterSwap)]:
        raise ArgumentError(f"swaps takes FilterSwap variants made by swap_filters(bank, 'B'), not "
                            f"{value_text(wrong[0])}; to score replacements by name, pass replacements=('B', ...).")
    return items


rescore = analyze_rescore
"""The earlier name of :func:`analyze_rescore`, kept as an alias."""


def variant_swaps(loaded: LoadedModel, settings: ScoringSettings, replacements: Sequence[str],
                  device: torch.device | str | None) -> list[FilterSwap]:
    """One swap per replacement of the settings' layers and stages (k and seed for ``centroid`` / ``random``)."""
    if not replacements:
        return []
    bank = depthwise_bank(loaded)
    return [swap_filters(bank, name, layers=settings.layers, stages=settings.stages, k=settings.k, seed=settings.seed,
                         device=device) for name in replacements]


def _recover(loaded: LoadedModel, swaps: Sequence[FilterSwap], images: ImageSet, settings: RecoverySettings,
             model: nn.Module, example: torch.Tensor, device: torch.device, progress: Progress | None
             ) -> tuple[RecoveryInfo, list[dict[str, torch.Tensor]], ImageSet, Progress | None]:
    """Split the images, recover every swap; return the record, the recovered states, the held-out images and the
    progress of the scoring that follows."""
    from fl_core.masterkeys.recovery import (  # (recovery -> pruning -> here)
        RecoveryInfo,
        recovered_states,
        split_calibration,
    )

    if distributed_rank()[1] > 1:
        raise AnalysisError("Recovery runs in one process: re-score with recovery without torchrun.")
    calibration, held_out = split_calibration(images, settings.calibration, settings.seed)
    recovering = len(calibration) * (1 + len(swaps)) + 3 * settings.steps * settings.batch * len(swaps)
    share = recovering / (recovering + len(held_out) * (1 + 2 * len(swaps)))
    states, recalibrated, seconds = recovered_states(loaded, swaps, calibration, settings, model, example, device,
                                                     sub_progress(progress, 0.0, share))
    info = RecoveryInfo(settings=settings, n_calibration=len(calibration), n_held_out=len(held_out),
                        batchnorm_layers=recalibrated, frozen=tuple(len(s.weights) for s in swaps), seconds=seconds)
    return info, states, held_out, sub_progress(progress, share, 1.0)

"""Swap & re-score: replace a model's depthwise filters by idealized master-key models (methods A-D), cluster
centroids or random filters, and score top-1 / top-5 / loss of the original and every swap on an ImageFolder tree
(ImageNet val: val/<wnid>/*.JPEG), each image decoded once. Runs on one device, or on several with torchrun:

    python -m fl_core rescore --model torchvision:mobilenet_v2=mnv2.pt --mean .5 .5 .5 --std .5 .5 .5 \\
        --images /data/imagenet/val --json rescore.json
    torchrun --nproc_per_node=4 -m fl_core rescore --model timm:convnext_tiny@pretrained --images /data/imagenet/val

Without --swap the six idealized-model methods are scored (the original plus six variants); a model without depthwise
convolutions is then scored alone.

Swap → recover → re-score (the papers' protocol, fl_core.masterkeys.recovery): with --recover-steps N, --calibration M
images are drawn at random (--seed) for calibration and every variant is scored on the disjoint rest. Each swapped copy
has its BatchNorm statistics matched to the original's on the calibration images, then N distillation steps from the
original with the swapped filters frozen; each entry of "swaps" in the JSON gains "recovered" scores:

    python -m fl_core rescore --model torchvision:mobilenet_v2=mnv2.pt --mean .5 .5 .5 --std .5 .5 .5 \\
        --images /data/imagenet-sample --swap B --recover-steps 20 --calibration 256 --json recovered.json

--sweep swaps (by the one --swap, default B) and zeroes each depthwise layer alone: one row per layer, with the
share of the layer's effect that its idealized models reproduce (fl_core.masterkeys.layersweep).
"""

from __future__ import annotations

import argparse

from fl_core.cli import add_image_arguments, add_model_arguments, add_selection_arguments, single_model
from fl_core.errors import AnalysisError
from fl_core.masterkeys.settings import (
    FIT_METHODS,
    REPLACEMENTS,
    LayerSweepSettings,
    RecoverySettings,
    RescoreSettings,
)
from fl_core.settings import add_settings_arguments, settings_from_args

SET_BY_THE_COMMAND = ("layers", "stages", "recovery", "replacements", "replacement")
"""Settings read from the repeatable ``--layer`` / ``--stage`` / ``--swap`` and the recovery group instead."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_image_arguments(parser)
    add_selection_arguments(parser, RescoreSettings)
    parser.add_argument("--swap", action="append", choices=list(REPLACEMENTS), default=None, metavar="REPLACEMENT",
                        help=f"replacement to score (repeatable; default: {' '.join(FIT_METHODS)}). "
                             + "; ".join(f"{k}: {v}" for k, v in REPLACEMENTS.items()))
    add_settings_arguments(parser, RescoreSettings, exclude=SET_BY_THE_COMMAND)
    parser.add_argument("--resume", default=None, metavar="PATH",
                        help="file of running sums: an interrupted run continues from it")
    parser.add_argument("--sweep", action="store_true",
                        help="per-layer sweep: swap (by the one --swap, default B) and zero each depthwise layer alone")
    recovery = parser.add_argument_group("recovery (swap -> recover -> re-score; every score on the held-out images; "
                                         "on with --recover-steps, the random split seeded by --seed)")
    add_settings_arguments(recovery, RecoverySettings, defaults={"steps": None})


def run(args: argparse.Namespace, progress):
    from fl_core.io.images import open_images
    from fl_core.masterkeys.distributed import distributed_session, rank_device
    from fl_core.masterkeys.rescore import analyze_rescore, check_resume

    with distributed_session() as (rank, _world):
        if rank != 0:  # one report and one set of files, from rank 0
            progress, args.json, args.csv = None, None, None
        if args.resume:  # cheap checks first: the resume file and the images before the model loads
            check_resume(args.resume)
        images = open_images(args.images, args.max_images)
        loaded = single_model(args)
        device = rank_device(args.device)
        if args.sweep:
            return _sweep(loaded, images, args, device, progress)
        settings = settings_from_args(RescoreSettings, args, replacements=_replacements(loaded, args),
                                      **_selection(args))
        result = analyze_rescore(loaded, images, settings, resume=args.resume, device=device, progress=progress)
    if rank == 0:
        _print_summary(result)
    return result


def _recovery(args: argparse.Namespace) -> RecoverySettings | None:
    """The recovery settings, when ``--recover-steps`` asks for recovery."""
    return None if args.steps is None else settings_from_args(RecoverySettings, args)


def _selection(args: argparse.Namespace) -> dict:
    """The settings the command reads from its own options: layers, stages and recovery."""
    return {"layers": args.layer, "stages": args.stage, "recovery": _recovery(args)}


def _sweep(loaded, images, args: argparse.Namespace, device, progress):
    from fl_core.masterkeys.layersweep import sweep_layers

    if args.swap and len(args.swap) > 1:
        raise AnalysisError("--sweep swaps each layer by one replacement: give a single --swap.")
    settings = settings_from_args(LayerSweepSettings, args, replacement=(args.swap or ["B"])[0], **_selection(args))
    result = sweep_layers(loaded, images, settings, device=device, progress=progress)
    print(f"{result.label}: each of {len(result.rows)} depthwise layers swapped by {result.replacement} / zeroed "
          f"alone, on {result.n_images} images in {result.seconds:.0f} s")
    _print_recovery(result.recovery)
    metric = "top1" if result.top1 is not None else "agreement"
    columns = ["layer", "stage", "relative_error", f"swapped_{metric}", f"zeroed_{metric}", "theory_share"]
    if result.recovery is not None:
        columns += [f"swapped_recovered_{metric}", f"zeroed_recovered_{metric}", "recovered_theory_share"]
    if result.top1 is not None:
        print(f"original top-1 {100 * result.top1:.1f}%")
    print(_percent(result.to_frame()[columns].copy()).round(4).to_string(index=False))
    return result


def _replacements(loaded, args: argparse.Namespace) -> tuple[str, ...]:
    """The requested replacements; none for a model without depthwise filters when no swap was asked for."""
    from fl_core.masterkeys.depthwise import depthwise_bank

    if args.swap:
        return tuple(args.swap)
    try:
        depthwise_bank(loaded)
    except AnalysisError:
        print(f"{loaded.label} has no depthwise filters: scoring the original model only.")
        return ()
    return FIT_METHODS


def _print_summary(result) -> None:
    variants = len(result.swaps) * (2 if result.recovery else 1) + 1
    print(f"{result.label} on {result.images}: {result.n_images} images, {result.images_per_second:.1f} img/s "
          f"× {variants} variants, {result.world_size} process(es), device {result.device}")
    print(result.classes)
    for warning in result.warnings:
        print(f"warning: {warning}")
    _print_recovery(result.recovery)
    frame = result.to_frame().drop(columns=["recovered_steps"], errors="ignore")
    print(_percent(frame).round(4).to_string(index=False))


def _print_recovery(recovery) -> None:
    if recovery is not None:
        s = recovery.settings
        print(f"recovered on {recovery.n_calibration} calibration images (seed {s.seed}: BatchNorm statistics "
              f"{'matched' if s.recalibrate_batchnorm else 'kept'}, {s.steps} distillation steps at lr {s.lr:g}) in "
              f"{recovery.seconds:.0f} s; every score on the {recovery.n_held_out} held-out images")


def _percent(frame):
    """Accuracy columns as percentages for the summary."""
    for column in frame:
        if column.endswith(("top1", "top5", "agreement")):
            frame[column] = frame[column].map(lambda v: "" if v is None or v != v else f"{100 * v:.1f}%")
    return frame

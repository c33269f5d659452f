"""Swap & re-score: replace a model's depthwise filters by idealized master-key models (methods A-D), cluster
centroids or random filters, and score top-1 / top-5 / loss of the original and every swap on an ImageFolder tree
(ImageNet val: val/<wnid>/*.JPEG), each image decoded once. Runs on one device, or on several with torchrun:

    python -m fl_core rescore --model torchvision:mobilenet_v2=mnv2.pt --mean .5 .5 .5 --std .5 .5 .5 \\
        --images /data/imagenet/val --json rescore.json
    torchrun --nproc_per_node=4 -m fl_core rescore --model timm:convnext_tiny@pretrained --images /data/imagenet/val

Without --swap the six idealized-model methods are scored (the original plus six variants); a model without depthwise
convolutions is then scored alone.
"""

from __future__ import annotations

import argparse

from fl_core.cli import add_image_arguments, add_model_arguments
from fl_core.cli.masterkeys import add_selection_arguments, single_model
from fl_core.depthwise import depthwise_bank
from fl_core.errors import AnalysisError
from fl_core.evaluate import DEFAULT_BATCH_SIZE, distributed_session, rank_device, rescore
from fl_core.images import open_images
from fl_core.masterkeys import DEFAULT_K
from fl_core.scalefit import FIT_METHODS
from fl_core.swap import REPLACEMENTS, swap_filters


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_image_arguments(parser)
    add_selection_arguments(parser)
    parser.add_argument("--swap", action="append", choices=list(REPLACEMENTS), default=None, metavar="REPLACEMENT",
                        help=f"replacement to score (repeatable; default: {' '.join(FIT_METHODS)}). "
                             + "; ".join(f"{k}: {v}" for k, v in REPLACEMENTS.items()))
    parser.add_argument("--k", type=int, default=DEFAULT_K, help="clusters per kernel size for --swap centroid")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random and centroid swaps")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers per process")
    parser.add_argument("--resume", default=None, metavar="PATH",
                        help="file of running sums: an interrupted run continues from it")


def run(args: argparse.Namespace, progress):
    with distributed_session() as (rank, _world):
        if rank != 0:  # one report and one set of files, from rank 0
            progress, args.json, args.csv = None, None, None
        loaded = single_model(args)
        device = rank_device(args.device)
        swaps = _swaps(loaded, args, device)
        images = open_images(args.images, args.max_images)
        result = rescore(loaded, images, swaps, device=device, batch_size=args.batch_size, workers=args.workers,
                         resume=args.resume, use_labels=args.images != "bundled", progress=progress)
    if rank == 0:
        _print_summary(result)
    return result


def _swaps(loaded, args: argparse.Namespace, device) -> list:
    """The requested swaps; none for a model without depthwise filters when no swap was asked for."""
    try:
        bank = depthwise_bank(loaded)
    except AnalysisError:
        if args.swap:
            raise
        print(f"{loaded.label} has no depthwise filters: scoring the original model only.")
        return []
    return [swap_filters(bank, name, layers=args.layer, stages=args.stage, k=args.k, seed=args.seed, device=device)
            for name in args.swap or FIT_METHODS]


def _print_summary(result) -> None:
    print(f"{result.label} on {result.images}: {result.n_images} images, {result.images_per_second:.1f} img/s "
          f"× {len(result.swaps) + 1} variants, {result.world_size} process(es), device {result.device}")
    print(result.classes)
    for warning in result.warnings:
        print(f"warning: {warning}")
    frame = result.to_frame()
    for column in ("top1", "top5", "delta_top1", "agreement"):
        frame[column] = frame[column].map(lambda v: "" if v is None or v != v else f"{100 * v:.1f}%")
    print(frame.round(4).to_string(index=False))

"""Idealized scale-space models of the 8 master key filters: σ (and α for filter 7) by one fitting method (A, B,
C1, C2, D1, D2) for the published filters, or, with --model, for the per-key mean filters of a model's depthwise
filters.

Example:
    python -m fl_core scalespace --method B --json sigma_B.json
    python -m fl_core scalespace --model torchvision:mobilenet_v2=mobilenet_v2.pt --method D1
"""

from __future__ import annotations

import argparse

from fl_core.cli import add_model_arguments, add_selection_arguments, single_model
from fl_core.masterkeys.assignment import fit_model_master_keys
from fl_core.masterkeys.fitting import FIT_METHOD_DESCRIPTIONS, FIT_METHODS, fit_published_filters


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser, required=False)
    add_selection_arguments(parser)
    parser.add_argument("--method", choices=FIT_METHODS, default="B",
                        help="; ".join(f"{k}: {v}" for k, v in FIT_METHOD_DESCRIPTIONS.items()))
    parser.add_argument("--kernel-size", type=int, default=None, help="with --model: k of the k×k filters")


def run(args: argparse.Namespace, progress):
    if args.model:
        result = fit_model_master_keys(single_model(args), args.method, kernel_size=args.kernel_size,
                                       layers=args.layer, stages=args.stage, device=args.device, progress=progress)
    else:
        result = fit_published_filters(args.method)
    print(f"method {args.method} ({FIT_METHOD_DESCRIPTIONS[args.method]}) on {result.source}:")
    print(result.to_frame().round(4).to_string(index=False))
    return result

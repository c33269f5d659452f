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
from fl_core.masterkeys.settings import FIT_METHOD_DESCRIPTIONS, FIT_METHODS, ScaleSpaceSettings
from fl_core.settings import add_settings_arguments, settings_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser, required=False)
    add_selection_arguments(parser, ScaleSpaceSettings)
    parser.add_argument("--method", choices=FIT_METHODS, default=ScaleSpaceSettings.method,
                        help="; ".join(f"{k}: {v}" for k, v in FIT_METHOD_DESCRIPTIONS.items()))
    add_settings_arguments(parser, ScaleSpaceSettings, exclude=("layers", "stages"))


def run(args: argparse.Namespace, progress):
    from fl_core.masterkeys.assignment import analyze_scale_space

    settings = settings_from_args(ScaleSpaceSettings, args, layers=args.layer, stages=args.stage)
    result = analyze_scale_space(single_model(args) if args.model else None, settings=settings, device=args.device,
                                 progress=progress)
    print(f"method {args.method} ({FIT_METHOD_DESCRIPTIONS[args.method]}) on {result.source}:")
    print(result.to_frame().round(4).to_string(index=False))
    return result

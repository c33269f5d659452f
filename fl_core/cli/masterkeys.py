"""Master keys of a depthwise-separable model: sign- and scale-invariant clusters of its depthwise filters (k chosen
by you, with an elbow / silhouette sweep), their assignment to the 8 published master key filters per layer and
stage, and the centroids compared with the published filters.

Example:
    python -m fl_core masterkeys --model timm:convnext_atto --k 8 --sweep 2-12 --json masterkeys.json
    python -m fl_core masterkeys --model torchvision:mobilenet_v2=mobilenet_v2.pt --stage 3 --stage 4
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from fl_core.cli import add_model_arguments, add_selection_arguments, single_model
from fl_core.errors import ArgumentError
from fl_core.masterkeys.settings import MasterKeySettings
from fl_core.settings import add_settings_arguments, check_setting, settings_fields, settings_from_args

SET_BY_THE_COMMAND = ("layers", "stages", "sweep")
SWEEP = next(f for f in settings_fields(MasterKeySettings) if f.name == "sweep")
"""Settings read from the repeatable ``--layer`` / ``--stage`` and the ``--sweep`` range instead of one option each."""


def parse_range(text: str) -> list[int]:
    """``"2-12"`` -> [2, ..., 12]; ``"4,8,16"`` -> [4, 8, 16]; within the bounds of ``MasterKeySettings.sweep``
    (checked before a range is listed)."""
    try:
        if "-" in text:
            low, high = (int(v) for v in text.split("-", 1))
            values: Sequence[int] = range(low, high + 1)
        else:
            values = [int(v) for v in text.split(",") if v]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"'{text[:40]}' is not a range like 2-12 or a list like 4,8,16") from err
    try:
        return list(check_setting(SWEEP, values, SWEEP.option))
    except ArgumentError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_selection_arguments(parser, MasterKeySettings)
    add_settings_arguments(parser, MasterKeySettings, exclude=SET_BY_THE_COMMAND)
    parser.add_argument("--sweep", type=parse_range, default=None, metavar="KS",
                        help="also cluster for these k (e.g. 2-12) and report mean |cos| and silhouette")


def settings_of(args: argparse.Namespace) -> MasterKeySettings:
    """The analysis settings of a parsed ``masterkeys`` command line."""
    return settings_from_args(MasterKeySettings, args, layers=args.layer, stages=args.stage, sweep=args.sweep)


def run(args: argparse.Namespace, progress):
    from fl_core.masterkeys.clustering import analyze_master_keys

    result = analyze_master_keys(single_model(args), settings=settings_of(args), device=args.device, progress=progress)
    assignment = result.published_assignment
    print(f"{result.label}: {result.n_filters:,} {result.kernel_size}×{result.kernel_size} depthwise filters "
          f"({result.n_constant} constant), {result.k} clusters, mean |cos| to centroid {result.objective:.3f}")
    print(result.cluster_frame().round(3).to_string(index=False))
    print(f"assignment to {assignment.templates}: counts {assignment.counts.tolist()}, median best |cos| "
          f"{assignment.median_abs_cosine:.3f}")
    print(assignment.stage_frame().to_string(index=False))
    if result.sweep is not None:
        print(f"sweep (best silhouette at k = {result.sweep.best_k}):")
        print(result.sweep.to_frame().round(3).to_string(index=False))
    return result

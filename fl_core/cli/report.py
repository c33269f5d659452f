"""One self-contained HTML report of a checkpoint (or of the checkpoints of one run): what was loaded, the
first-layer energy profile against theory and random init, whitening, master keys and scale-space fits (depthwise
models), per-layer weight statistics, accuracy and channel axes (runnable models on labelled images), and the
trajectory over several checkpoints. The file opens offline (plotly.js inlined once, nothing fetched).

Examples:
    python -m fl_core report --model weights:resnet20_cifar10.th --html resnet20.html --json resnet20.json
    python -m fl_core report --model weights:runs/ckpts/ --html run.html    # checkpoints of one run, in order
    python -m fl_core report --model weights:assets/runs/lab_vgg_true_s0 --html lab.html   # a Training Lab run
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from fl_core.cli import add_model_arguments, input_overrides, write_output
from fl_core.masterkeys.fitting import FIT_METHODS
from fl_core.report.build import PART_TITLES, SECTIONS, Report, ReportSettings, build_report
from fl_core.report.html import report_html
from fl_core.report.series import load_series

DEFAULTS = ReportSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--html", type=Path, required=True, metavar="PATH",
                        help="write the HTML report here ('-': stdout)")
    parser.add_argument("--images", default=DEFAULTS.images, metavar="SOURCE",
                        help="'bundled' (offline natural photos), a folder, or a labelled ImageFolder tree")
    parser.add_argument("--max-images", type=int, default=DEFAULTS.max_images, help="use at most this many images")
    parser.add_argument("--seeds", type=int, default=DEFAULTS.seeds, help="random-init seeds")
    parser.add_argument("--max-distance", type=int, default=DEFAULTS.max_distance,
                        help="largest whitening distance δ in pixels")
    parser.add_argument("--trajectory-distance", type=int, default=DEFAULTS.trajectory_distance,
                        help="δ at which whitening is followed over the checkpoints")
    parser.add_argument("--k", type=int, default=DEFAULTS.k, help="master-key clusters")
    parser.add_argument("--method", choices=FIT_METHODS, default=DEFAULTS.method,
                        help="scale-space fitting method of the per-key mean filters")
    parser.add_argument("--channel-layer", default=DEFAULTS.channel_layer,
                        help="layer of the channel-axes summary (default: the Channel Axes page's)")
    parser.add_argument("--restarts", type=int, default=DEFAULTS.restarts, help="master-key k-means++ restarts")
    parser.add_argument("--max-eval-images", type=int, default=DEFAULTS.max_eval_images,
                        help="labelled images scored for accuracy")
    parser.add_argument("--n-calibration", type=int, default=DEFAULTS.n_calibration,
                        help="calibration images of the channel axes")
    parser.add_argument("--n-evaluation", type=int, default=DEFAULTS.n_evaluation,
                        help="evaluation images of the channel axes")
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="seed of clustering and data splits")


def settings_from(args: argparse.Namespace) -> ReportSettings:
    """The report settings the arguments name (every field of :class:`ReportSettings` that has one)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(ReportSettings) if hasattr(args, f.name)}
    return ReportSettings(**given)


def run(args: argparse.Namespace, progress) -> Report:
    models = load_series(args.model, input_overrides(args))
    result = build_report(models, settings_from(args), device=args.device, progress=progress)
    where = write_output(args.html, report_html(result), args.stdout)
    print(f"report of {result.models[-1]['label']} ({len(result.models)} checkpoint(s)) written to {where}")
    for name, title in PART_TITLES.items():
        if name not in SECTIONS and name not in result.timings:
            continue
        state = f"skipped: {result.skipped[name]}" if name in result.skipped else "done"
        print(f"  {title:38s} {result.timings.get(name, 0.0):6.1f} s  {state}")
    return result

"""One self-contained HTML report of a checkpoint (or of the checkpoints of one run): what was loaded, the
first-layer energy profile against theory and random init, whitening, master keys and scale-space fits (depthwise
models), per-layer weight statistics, accuracy and channel axes (runnable models on labelled images), and the
trajectory over several checkpoints. The file opens offline (plotly.js inlined once, nothing fetched).

Examples:
    python -m fl_core report --model weights:resnet20_cifar10.th --html resnet20.html --json resnet20.json
    python -m fl_core report --model weights:runs/ckpts/ --html run.html    # checkpoints of one run, in order
    python -m fl_core report --model weights:fl_core/assets/runs/lab_vgg_true_s0 --html lab.html   # a Training Lab run
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from fl_core.cli import add_model_arguments, input_overrides, write_output
from fl_core.report.settings import ReportSettings
from fl_core.settings import add_settings_arguments, settings_from_args

MORE_CHECKPOINTS = "Give several --model specs, or weights:DIR with the checkpoints of one run, to follow them."
"""How the command line asks for a trajectory (the report's own reason names no option: pages show it too)."""

if TYPE_CHECKING:
    from fl_core.report.build import Report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--html", type=Path, required=True, metavar="PATH",
                        help="write the HTML report here ('-': stdout)")
    add_settings_arguments(parser, ReportSettings)


def run(args: argparse.Namespace, progress) -> Report:
    from fl_core.report.build import PART_TITLES, SECTIONS, build_report
    from fl_core.report.html import report_html
    from fl_core.report.series import load_series

    models = load_series(args.model, input_overrides(args))
    settings = settings_from_args(ReportSettings, args)
    result = build_report(models, settings=settings, device=args.device, progress=progress)
    where = write_output(args.html, report_html(result), args.stdout)
    print(f"report of {result.models[-1]['label']} ({len(result.models)} checkpoint(s)) written to {where}")
    for name, title in PART_TITLES.items():
        if name not in SECTIONS and name not in result.timings:
            continue
        state = f"skipped: {result.skipped[name]}" if name in result.skipped else "done"
        if name == "trajectory" and len(result.models) == 1:
            state += f" {MORE_CHECKPOINTS}"
        print(f"  {title:38s} {result.timings.get(name, 0.0):6.1f} s  {state}")
    return result

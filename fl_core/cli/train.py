"""Train a small CNN (or any timm net that takes 32×32 input) on labelled crops and record its first layer: a run
folder with first-layer snapshots, checkpoints (safetensors) and metrics, plus the profile trajectory against the
linear theory (Chowers & Weiss). With ``--suite``, train a whole experiment and compare it with the paper.

Examples:
    python -m fl_core train --out runs/vgg --json vgg.json
    python -m fl_core train --labels random --steps 1200 --out runs/vgg_random
    python -m fl_core train --alpha 4 --alpha-component 15 --out runs/d2
    python -m fl_core train --steps 200 --channel-axes features.7 --out runs/vgg_axes --json t.json
    python -m fl_core train --suite quick --images /data/imagenet/val --max-images 100 --out runs/inet --json s.json
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from fl_core.cli import add_image_arguments
from fl_core.lab.settings import DERIVED_TRAIN_FIELDS, RunSettings
from fl_core.lab.suites import SUITES

if TYPE_CHECKING:
    from fl_core.lab.summary import TrainReport
from fl_core.settings import add_settings_arguments, bounded, settings_fields, settings_from_args, settings_to_argv

OPTION_GROUPS = {
    "model": ("arch", "width", "body_widths", "first_kernel", "freeze_first"),
    "label and input variants (App. D)": ("labels", "label_component", "alpha", "alpha_component"),
    "optimizer (plain SGD with cross-entropy, as the authors)": ("seed", "steps", "batch_size", "lr", "momentum",
                                                                 "weight_decay", "snapshots"),
    "a layer's channel axes over training (Safaai et al. 2026, claims 1, 2 and 5)": ("channel_axes",
                                                                                     "axes_bootstrap"),
}
"""Help sections of the :class:`RunSettings` options (the others, ``--crops-per-image``, stand with the data
options)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_image_arguments(parser)
    parser.add_argument("--out", type=Path, help="run folder (with --suite: the folder of run folders); default: "
                                                 "FL_RUNS_DIR/<run name>")
    parser.add_argument("--suite", choices=list(SUITES), help="train a whole experiment instead of one run")
    parser.add_argument("--steps-scale", type=bounded(float, 0.001, 10.0, "steps-scale"), default=1.0,
                        help="with --suite: multiply every run's steps")
    names = [f.name for f in settings_fields(RunSettings)]
    for title, group in OPTION_GROUPS.items():
        add_settings_arguments(parser.add_argument_group(title), RunSettings,
                               exclude=[name for name in names if name not in group])
    add_settings_arguments(parser, RunSettings, exclude=DERIVED_TRAIN_FIELDS)
    parser.add_argument("--no-checkpoints", action="store_true", help="skip init/final safetensors checkpoints")


def config_from_args(args: argparse.Namespace) -> RunSettings:
    """The :class:`RunSettings` named by the command line."""
    return settings_from_args(RunSettings, args)


def cli_flags(config: RunSettings) -> str:
    """The options of this command that give back ``config`` (defaults left out): :func:`config_from_args` of
    them is ``config``."""
    return shlex.join(settings_to_argv(config, exclude=DERIVED_TRAIN_FIELDS))


def run(args: argparse.Namespace, progress) -> TrainReport:
    from fl_core.cli.channels import print_trajectory
    from fl_core.lab.experiments import run_suite, suite_runs
    from fl_core.lab.runs import train_run, user_runs_dir
    from fl_core.lab.summary import train_report

    if args.suite:
        items = suite_runs(args.suite, images=args.images, max_images=args.max_images,
                           crops_per_image=args.crops_per_image, steps_scale=args.steps_scale)
        runs = run_suite(items, args.out or user_runs_dir() / args.suite, device=args.device,
                         save_checkpoints=not args.no_checkpoints, progress=progress)
    else:
        config = config_from_args(args)
        runs = [train_run(config, args.out or user_runs_dir() / config.slug(), device=args.device,
                          save_checkpoints=not args.no_checkpoints, progress=progress)]
    report = train_report(runs)
    for run_ in runs:
        if run_.channel_axes is not None:
            print_trajectory(run_.channel_axes)
    for entry in report.runs:
        print(f"{entry['name']}: validation accuracy {entry['val_accuracy']:.1%}, theory fit r = "
              f"{entry['theory_r']:.3f} (ηt = {entry['eta_t']:.3g}), vs init {entry['vs_init']:+.3f}, "
              f"ρ(step, ηt) = {entry['eta_t_trend']:+.2f} → {entry['path']}")
    measured = report.claims.to_frame().query("n > 0")[["claim", "paper", "ours", "n"]]
    print(measured.to_string(index=False))
    return report

"""Train a small CNN (or any timm net that takes 32×32 input) on labelled crops and record its first layer: a run
folder with first-layer snapshots, checkpoints (safetensors) and metrics, plus the profile trajectory against the
linear theory (Chowers & Weiss). With ``--suite``, train a whole experiment and compare it with the paper.

Examples:
    python -m fl_core train --out runs/vgg --json vgg.json
    python -m fl_core train --labels random --steps 1200 --out runs/vgg_random
    python -m fl_core train --alpha 4 --alpha-component 15 --out runs/d2
    python -m fl_core train --suite quick --images /data/imagenet/val --max-images 100 --out runs/inet --json s.json
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd

from fl_core.cli import add_image_arguments
from fl_core.lab.claims import ClaimSummary, run_trajectory, summarize_runs
from fl_core.lab.experiments import SUITES, run_suite, suite_runs
from fl_core.lab.runs import RunConfig, train_run, user_runs_dir
from fl_core.lab.trainsets import LABEL_VARIANTS
from fl_core.results import Result

DEFAULTS = RunConfig()


@dataclass(frozen=True)
class TrainReport(Result):
    """The runs trained (or resumed), their trajectories, and the claims they test.

    Attributes:
        runs: per run: ``name``, ``path``, ``config``, ``val_accuracy``, ``train_accuracy``, ``training_seconds``,
            and at the last snapshot ``theory_r`` (w−w₀), ``eta_t``, ``vs_init``; ``eta_t_trend``; ``trajectory``
            (one entry per snapshot step).
        claims: the paper's claims measured on these runs (see :class:`fl_core.lab.claims.ClaimSummary`).
    """

    runs: list[dict]
    claims: ClaimSummary

    def to_frame(self) -> pd.DataFrame:
        """One row per (run, snapshot step)."""
        return pd.DataFrame([{"run": run["name"], **row} for run in self.runs for row in run["trajectory"]])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_image_arguments(parser)
    parser.add_argument("--out", type=Path, help="run folder (with --suite: the folder of run folders); default: "
                                                 "FL_RUNS_DIR/<run name>")
    parser.add_argument("--suite", choices=list(SUITES), help="train a whole experiment instead of one run")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="with --suite: multiply every run's steps")
    parser.add_argument("--crops-per-image", type=int, help="training crops per image")
    model = parser.add_argument_group("model")
    model.add_argument("--arch", default=DEFAULTS.arch, help="small_vgg, small_resnet or timm:NAME (random init)")
    model.add_argument("--width", type=int, default=DEFAULTS.width, help="first-layer width (small nets)")
    model.add_argument("--body-widths", type=int, nargs="+", default=list(DEFAULTS.body_widths),
                       help="widths of the later stages (small nets)")
    model.add_argument("--first-kernel", type=int, choices=(3, 5, 7), default=DEFAULTS.first_kernel)
    model.add_argument("--freeze-first", action="store_true", help="keep the first layer at its random init")
    variants = parser.add_argument_group("label and input variants (App. D)")
    variants.add_argument("--labels", choices=LABEL_VARIANTS, default=DEFAULTS.labels)
    variants.add_argument("--label-component", type=int, default=DEFAULTS.label_component,
                          help="1-based PCA component whose patch-energy deciles are the labels (--labels energy)")
    variants.add_argument("--alpha", type=float, default=DEFAULTS.alpha,
                          help="scale this component of every first-layer tile (App. D.2; 1 = off)")
    variants.add_argument("--alpha-component", type=int, default=DEFAULTS.alpha_component)
    sgd = parser.add_argument_group("optimizer (plain SGD with cross-entropy, as the authors)")
    sgd.add_argument("--seed", type=int, default=DEFAULTS.seed)
    sgd.add_argument("--steps", type=int, default=DEFAULTS.steps)
    sgd.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size)
    sgd.add_argument("--lr", type=float, default=DEFAULTS.lr)
    sgd.add_argument("--momentum", type=float, default=DEFAULTS.momentum)
    sgd.add_argument("--weight-decay", type=float, default=DEFAULTS.weight_decay)
    sgd.add_argument("--snapshots", type=int, default=DEFAULTS.snapshots, help="log-spaced first-layer snapshots")
    parser.add_argument("--no-checkpoints", action="store_true", help="skip init/final safetensors checkpoints")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The :class:`RunConfig` named by the command line."""
    return RunConfig(**{f.name: getattr(args, f.name) for f in fields(RunConfig) if hasattr(args, f.name)})


def run_summary(run) -> dict:
    """The JSON entry of one run."""
    traj = run_trajectory(run)
    return {"name": run.name, "path": run.path, "config": run.config.to_dict(),
            "val_accuracy": run.history.final_val_accuracy, "train_accuracy": run.history.final_train_accuracy,
            "training_seconds": run.provenance.get("training_seconds"), "theory_r": traj.r[-1],
            "eta_t": traj.eta_t[-1], "vs_init": traj.vs_init[-1], "eta_t_trend": traj.eta_t_trend,
            "trajectory": traj.steps_frame().to_dict(orient="records")}


def run(args: argparse.Namespace, progress) -> TrainReport:
    if args.suite:
        items = suite_runs(args.suite, images=args.images, max_images=args.max_images,
                           crops_per_image=args.crops_per_image, steps_scale=args.steps_scale)
        runs = run_suite(items, args.out or user_runs_dir() / args.suite, device=args.device,
                         save_checkpoints=not args.no_checkpoints, progress=progress)
    else:
        config = config_from_args(args)
        runs = [train_run(config, args.out or user_runs_dir() / config.slug(), device=args.device,
                          save_checkpoints=not args.no_checkpoints, progress=progress)]
    report = TrainReport(runs=[run_summary(r) for r in runs], claims=summarize_runs(runs))
    for entry in report.runs:
        print(f"{entry['name']}: validation accuracy {entry['val_accuracy']:.1%}, theory fit r = "
              f"{entry['theory_r']:.3f} (ηt = {entry['eta_t']:.3g}), vs init {entry['vs_init']:+.3f}, "
              f"ρ(step, ηt) = {entry['eta_t_trend']:+.2f} → {entry['path']}")
    measured = report.claims.to_frame().query("n > 0")[["claim", "paper", "ours", "n"]]
    print(measured.to_string(index=False))
    return report

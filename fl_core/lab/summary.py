"""The report of a set of Training Lab runs (what ``python -m fl_core train`` returns): each run's accuracy and
first-layer trajectory against the linear theory, and the paper's claims measured on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from fl_core.lab.claims import ClaimSummary, run_trajectory, summarize_runs
from fl_core.lab.runs import Run
from fl_core.results import Result


@dataclass(frozen=True)
class TrainReport(Result):
    """The runs trained (or resumed), their trajectories, and the claims they test.

    Attributes:
        runs: per run: ``name``, ``path``, ``config``, ``val_accuracy``, ``train_accuracy``, ``training_seconds``,
            and at the last snapshot ``theory_r`` (w−w₀), ``eta_t``, ``vs_init``; ``eta_t_trend``; ``trajectory``
            (one entry per snapshot step); ``channel_axes``: the followed layer's axes at every snapshot (``layer``,
            ``snapshots``: ``step``, ``spearman`` with ``spearman_ci``, ``ari`` with ``ari_ci``,
            ``significant_share``, ``cosines`` with ``cosines_ci``, ...; ``None``: not followed); ``axes_claims``: the
            two-axis paper's claims 1, 2 and 5 measured on them (``claim``, ``paper``, ``measured``, ``ci_low``,
            ``ci_high``, ``verdict``, ``why``: :func:`fl_core.channelaxes.claims.trajectory_claims`).
        claims: the paper's claims measured on these runs (see :class:`fl_core.lab.claims.ClaimSummary`).
    """

    runs: list[dict]
    claims: ClaimSummary

    def to_frame(self) -> pd.DataFrame:
        """One row per (run, snapshot step)."""
        return pd.DataFrame([{"run": run["name"], **row} for run in self.runs for row in run["trajectory"]])


def run_summary(run: Run) -> dict:
    """The report's entry of one run (see :attr:`TrainReport.runs`)."""
    traj = run_trajectory(run)
    return {"name": run.name, "path": run.path, "config": run.config.to_dict(),
            "val_accuracy": run.history.final_val_accuracy, "train_accuracy": run.history.final_train_accuracy,
            "training_seconds": run.provenance.get("training_seconds"), "theory_r": traj.r[-1],
            "eta_t": traj.eta_t[-1], "vs_init": traj.vs_init[-1], "eta_t_trend": traj.eta_t_trend,
            "trajectory": traj.steps_frame().to_dict(orient="records"),
            "channel_axes": None if run.channel_axes is None else run.channel_axes.to_dict(),
            "axes_claims": None if run.channel_axes is None else run.channel_axes.claims().rows()}


def train_report(runs: Sequence[Run]) -> TrainReport:
    """The report of ``runs``: :func:`run_summary` of each and :func:`~fl_core.lab.claims.summarize_runs`."""
    return TrainReport(runs=[run_summary(r) for r in runs], claims=summarize_runs(runs))

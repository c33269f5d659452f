"""Figures of the Training Lab drawn from the shipped runs (what the page shows on first open)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_core.lab.claims import run_correlations, run_trajectory, summarize_runs
from fl_core.lab.plots import (
    claims_figure,
    fit_over_steps_figure,
    run_correlation_figure,
    training_curves_figure,
    trajectory_figure,
)
from fl_core.lab.runs import SHIPPED_RUNS_DIR, list_runs, load_run


@pytest.fixture(scope="module")
def runs():
    return [load_run(folder) for folder in list_runs(SHIPPED_RUNS_DIR)]


def test_the_trajectory_animates_every_snapshot_and_starts_where_asked(runs):
    traj = run_trajectory(runs[0])
    fig = trajectory_figure(traj, subtract_init=True, start=1)
    assert [f.name for f in fig.frames] == [str(int(s)) for s in traj.steps]
    assert fig.layout.sliders[0].active == 1 and len(fig.layout.sliders[0].steps) == len(traj.steps)
    profile = fig.data[1]  # the shown profile is the start snapshot's (floored for the log axis)
    assert np.asarray(fig.frames[1].data[1].y) == pytest.approx(np.asarray(profile.y))
    assert fig.layout.yaxis.type == "log"


def test_the_fit_over_steps_leaves_out_step_zero_and_plots_r_and_eta_t(runs):
    traj = run_trajectory(runs[0])
    fig = fit_over_steps_figure(traj)
    moving = traj.steps > 0
    by_name = {trace.name: trace for trace in fig.data}
    assert list(by_name["fit r (w_t − w_0)"].x) == list(traj.steps[moving])
    assert np.asarray(by_name["fitted ηt (w_t − w_0)"].y) == pytest.approx(traj.eta_t[moving])
    assert f"{traj.eta_t_trend:+.2f}" in fig.layout.title.text


def test_training_curves_show_validation_and_training_of_every_run_and_chance(runs):
    fig = training_curves_figure(runs[:3])
    assert len(fig.data) == 3 * 4  # loss and accuracy, validation and training
    assert {t.legendgroup for t in fig.data} == {run.name for run in runs[:3]}
    assert any(shape.line.dash == "dot" for shape in fig.layout.shapes)  # the chance line


@pytest.mark.slow
def test_run_consistency_and_claims_figures_show_every_run_and_claim(runs):
    corr = run_correlations(runs)
    fig = run_correlation_figure(corr)
    assert list(fig.data[0].x) == list(corr.names) and np.asarray(fig.data[0].z).shape == (len(runs), len(runs))
    summary = summarize_runs(runs)
    fig = claims_figure(summary)
    shown = [c for c in summary.claims if c.ours is not None and c.key != "frozen"]
    assert list(fig.data[0].y) == [c.claim for c in shown]
    assert list(fig.data[0].x) == pytest.approx([c.ours for c in shown])

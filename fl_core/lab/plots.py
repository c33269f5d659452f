"""Figures of the Training Lab (:mod:`fl_core.lab.claims`, :mod:`fl_core.lab.runs`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fl_core.figures import REFERENCE_COLORS, color, heatmap_figure, log_axis, readable
from fl_core.lab.claims import PAPER_CLAIMS, ClaimSummary, RunCorrelations, Trajectory
from fl_core.lab.runs import Run

MIN_ENERGY = 1e-3
"""Floor of the log axis (a max-normalized profile rarely goes below it)."""


def _profile_traces(traj: Trajectory, index: int, subtract_init: bool) -> list[go.Scatter]:
    """Profile, fitted theory and initial profile at snapshot ``index`` (raw where nothing has moved yet)."""
    x = np.arange(1, len(traj.lambdas) + 1)
    subtract_init = subtract_init and bool(np.isfinite(traj.profiles[index]).any())
    profile, theory = (traj.profiles, traj.theory) if subtract_init else (traj.raw_profiles, traj.raw_theory)
    r, tau = (traj.r, traj.eta_t) if subtract_init else (traj.raw_r, traj.raw_eta_t)
    name = "w_t − w_0" if subtract_init else "w_t"
    fit = f"theory fit (r = {r[index]:.2f}, ηt = {tau[index]:.3g})" if np.isfinite(r[index]) else "theory fit (—)"
    return [
        go.Scatter(x=x, y=np.maximum(traj.raw_profiles[0], MIN_ENERGY), mode="lines", name="initialization w_0",
                   line=dict(color=REFERENCE_COLORS["rgb"], dash="dot", width=1)),
        go.Scatter(x=x, y=np.maximum(profile[index], MIN_ENERGY), mode="lines+markers", name=f"profile of {name}",
                   line=dict(color=color(0)), marker=dict(size=5),
                   hovertemplate="component %{x}<br>e = %{y:.3f}<extra></extra>"),
        go.Scatter(x=x, y=np.maximum(theory[index], MIN_ENERGY), mode="lines", name=fit,
                   line=dict(color=REFERENCE_COLORS["theory"], dash="dash"),
                   hovertemplate="component %{x}<br>theory = %{y:.3f}<extra></extra>"),
    ]


def _step_title(traj: Trajectory, index: int) -> str:
    return f"{traj.run}: first layer at step {int(traj.steps[index])}"


def trajectory_figure(traj: Trajectory, subtract_init: bool = True, start: int | None = None) -> go.Figure:
    """The profile at each snapshot against its fitted theory, as an animation with a step slider and play button."""
    start = len(traj.steps) - 1 if start is None else start
    frames = [go.Frame(data=_profile_traces(traj, i, subtract_init), name=str(int(step)),
                       layout=go.Layout(title=_step_title(traj, i))) for i, step in enumerate(traj.steps)]
    fig = go.Figure(data=_profile_traces(traj, start, subtract_init), frames=frames)
    steps = [dict(method="animate", label=str(int(step)),
                  args=[[str(int(step))], dict(mode="immediate", frame=dict(duration=0, redraw=True),
                                               transition=dict(duration=0))]) for step in traj.steps]
    play = dict(label="▶ play", method="animate", args=[None, dict(frame=dict(duration=600, redraw=True),
                                                                   fromcurrent=False, transition=dict(duration=0))])
    pause = dict(label="❚❚", method="animate", args=[[None], dict(mode="immediate", frame=dict(duration=0))])
    fig.update_layout(title=_step_title(traj, start), height=540, margin=dict(l=10, r=10, t=90, b=10),
                      xaxis_title="PCA component (1 = largest variance)", yaxis_title="energy e_i (max-normalized)",
                      updatemenus=[dict(type="buttons", buttons=[play, pause], x=0, y=-0.2, xanchor="left",
                                        yanchor="top", direction="left", showactive=False, pad=dict(t=10))],
                      sliders=[dict(active=start, steps=steps, currentvalue=dict(prefix="step ", xanchor="right"),
                                    x=0.16, len=0.84,
                                    y=-0.2, yanchor="top", pad=dict(t=10))])
    fig.update_yaxes(**log_axis([MIN_ENERGY, 10 ** 0.1], range=[np.log10(MIN_ENERGY), 0.1]))
    return readable(fig)


def fit_over_steps_figure(traj: Trajectory) -> go.Figure:
    """Theory-fit r (left) and fitted τ = ηt (right, log) at every snapshot: does τ grow with the steps?"""
    fig = make_subplots(specs=[[dict(secondary_y=True)]])
    moving = traj.steps > 0
    x = traj.steps[moving]
    fig.add_trace(go.Scatter(x=x, y=traj.r[moving], mode="lines+markers", name="fit r (w_t − w_0)",
                             line=dict(color=color(0))), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=traj.raw_r[moving], mode="lines+markers", name="fit r (raw w_t)",
                             line=dict(color=color(0), dash="dot")), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=traj.vs_init[moving], mode="lines", name="r with initial profile",
                             line=dict(color=REFERENCE_COLORS["random"])), secondary_y=False)
    if traj.reference_r is not None:
        fig.add_trace(go.Scatter(x=x, y=traj.reference_r[moving], mode="lines+markers",
                                 name="fit r on the unmodified spectrum", line=dict(color=color(2), dash="dash")),
                      secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=traj.eta_t[moving], mode="lines+markers", name="fitted ηt (w_t − w_0)",
                             line=dict(color=color(1))), secondary_y=True)
    fig.update_layout(title=f"Theory fit over training (Spearman ρ(step, ηt) = {traj.eta_t_trend:+.2f})",
                      height=400, margin=dict(l=10, r=10, t=50, b=10))
    fig.update_xaxes(title_text="SGD step", **log_axis(x))
    fig.update_yaxes(title_text="Pearson r", range=[-1.05, 1.05], secondary_y=False)
    fig.update_yaxes(title_text="ηt (units of 1/λ²)", secondary_y=True, **log_axis(traj.eta_t[moving]))
    return readable(fig)


def training_curves_figure(runs: Sequence[Run]) -> go.Figure:
    """Loss and accuracy over steps (training: running mean, dashed; validation: solid) for each run."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cross-entropy loss", "accuracy"))
    for i, run in enumerate(runs):
        h = run.history
        for col, (train, val) in enumerate(((h.train_loss, h.val_loss), (h.train_accuracy, h.val_accuracy)), 1):
            fig.add_trace(go.Scatter(x=h.steps, y=val, mode="lines+markers", name=f"{run.name} (validation)",
                                     line=dict(color=color(i)), marker=dict(size=4), showlegend=col == 1,
                                     legendgroup=run.name), row=1, col=col)
            fig.add_trace(go.Scatter(x=h.steps, y=train, mode="lines", name=f"{run.name} (training)",
                                     line=dict(color=color(i), dash="dash"), showlegend=col == 1,
                                     legendgroup=run.name), row=1, col=col)
    chance = min((run.provenance.get("chance_accuracy", np.nan) for run in runs), default=np.nan)
    if np.isfinite(chance):
        fig.add_hline(y=chance, line=dict(color=REFERENCE_COLORS["random"], dash="dot"), row=1, col=2,
                      annotation_text="chance", annotation_position="bottom right")
    fig.update_xaxes(title_text="SGD step")
    fig.update_yaxes(range=[0, 1.02], row=1, col=2)
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=40, b=10))
    return readable(fig)


def run_correlation_figure(corr: RunCorrelations, raw: bool = False) -> go.Figure:
    """The consistency matrix between runs' final profiles."""
    what = "raw weights w_T" if raw else "w_T − w_0"
    return heatmap_figure(corr.raw_matrix if raw else corr.matrix, corr.names,
                          f"Profile correlation between runs ({what}, Pearson r)")


def claims_left_out(summary: ClaimSummary) -> list[str]:
    """The claims :func:`claims_figure` does not draw, each with why: measured in other units than a correlation, or
    tested by none of the runs."""
    return [f"“{c.claim}” ({why})" for c in summary.claims if c.ours is None or PAPER_CLAIMS[c.key].unit
            for why in ["no pair of these runs tests it" if c.ours is None else
                        f"{PAPER_CLAIMS[c.key].measure}, not a correlation: in the table"]]


def claims_figure(summary: ClaimSummary) -> go.Figure:
    """Ours (mean ± sd) against the paper's CIFAR10 value for every claim measured as a correlation; the title names
    the claims left out and why (:func:`claims_left_out`; more than two: their count, the page lists them)."""
    rows = [c for c in summary.claims if c.ours is not None and not PAPER_CLAIMS[c.key].unit]
    left_out = claims_left_out(summary)
    fig = go.Figure()
    names = [c.claim for c in rows]
    fig.add_trace(go.Scatter(x=[c.ours for c in rows], y=names, mode="markers", name="ours (mean ± sd)",
                             marker=dict(color=color(0), size=11),
                             error_x=dict(type="data", array=[c.ours_sd or 0 for c in rows], visible=True)))
    matched = [c for c in rows if c.matched is not None]
    fig.add_trace(go.Scatter(x=[c.matched for c in matched], y=[c.claim for c in matched], mode="markers",
                             name="ours at matched ηt (proposed)", marker=dict(color=color(2), size=9,
                                                                                 symbol="triangle-up")))
    published = [c for c in rows if c.paper_value is not None]
    fig.add_trace(go.Scatter(x=[c.paper_value for c in published], y=[c.claim for c in published], mode="markers",
                             name="paper (CIFAR10)", marker=dict(color=color(1), size=11, symbol="diamond-open",
                                                                 line=dict(width=2))))
    title = "Our runs against the paper" + (f". Not drawn: {'; '.join(left_out)}" if 0 < len(left_out) <= 2 else
                                            f". {len(left_out)} claims not drawn (listed below the chart)"
                                            if left_out else "")
    fig.update_layout(title=title, height=120 + 34 * len(rows),
                      margin=dict(l=10, r=10, t=50, b=10), xaxis=dict(title="value (Pearson r / Spearman ρ)",
                                                                         range=[-1.05, 1.05]))
    fig.update_yaxes(autorange="reversed")
    return readable(fig)

"""Figures of the checkpoint report that no other page draws: weight statistics per layer and the trajectory of a
run's checkpoints (:mod:`fl_core.report.build`, :mod:`fl_core.report.weightstats`)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from fl_core.figures import REFERENCE_COLORS, color, count_axis, log_axis, readable
from fl_core.firstlayer.whitening import REFERENCE_NAMES
from fl_core.masterkeys.plots import KEY_NAMES
from fl_core.report.build import CheckpointTrajectory
from fl_core.report.weightstats import WeightStatistics

MIN_ENERGY = 1e-3
"""Floor of the log axis of the profiles (a max-normalized profile rarely goes below it)."""


LAYER_ROW_PX = 24
"""Height of one convolution's row in the weight statistics figure: its name at the theme's 14-px tick size with a gap,
so a 52-layer MobileNetV2 reads row by row (1,360 px tall)."""
FLAWS = (("dead", "dead filters"), ("duplicates", "duplicate filters (peer R² ≈ 1)"),
         ("copies", "copies of one peer (|cos| ≈ 1)"))
"""The per-layer counts of filters that do nothing or repeat a peer (:mod:`fl_core.report.weightstats`)."""


def weight_norms_figure(stats: WeightStatistics) -> go.Figure:
    """A row per convolution, in forward order: the mean filter norm (whiskers: smallest and largest) and, beside
    it, the dead and duplicate filters — a panel drawn only when some layer has any (the title says when none has).
    Layers run down the page, one readable name each, however many the network has."""
    frame = stats.to_frame()
    counts = frame[[column for column, _ in FLAWS]].fillna(0)
    flawed = bool((counts.to_numpy() > 0).any())
    fig = make_subplots(rows=1, cols=2 if flawed else 1, shared_yaxes=True, horizontal_spacing=0.04,
                        column_widths=[0.6, 0.4] if flawed else None)
    fig.add_trace(go.Scatter(
        x=frame["norm_mean"], y=frame["layer"], mode="markers", name="mean ‖w‖ (whiskers: min, max)",
        marker=dict(color=color(0), size=7),
        error_x=dict(type="data", symmetric=False, array=frame["norm_max"] - frame["norm_mean"],
                     arrayminus=frame["norm_mean"] - frame["norm_min"], color=color(0), thickness=1),
        customdata=np.column_stack([frame["kind"], frame["filters"]]),
        hovertemplate="%{y} (%{customdata[0]}, %{customdata[1]} filters)<br>mean ‖w‖ = %{x:.4g}<extra></extra>"),
        row=1, col=1)
    fig.update_xaxes(title_text="filter norm ‖w‖", row=1, col=1, **log_axis(frame[["norm_min", "norm_max"]]))
    if flawed:
        for i, (column, name) in enumerate(FLAWS):
            fig.add_trace(go.Bar(x=counts[column], y=frame["layer"], orientation="h", name=name,
                                 marker_color=color(i + 1)), row=1, col=2)
        fig.update_xaxes(title_text="filters", row=1, col=2, **count_axis(counts.to_numpy().max()))
        title = f"{stats.label}: filter norms and dead or duplicate filters per convolution"
    else:
        title = f"{stats.label}: filter norms per convolution (no dead, duplicate or copied filters)"
    fig.update_yaxes(autorange="reversed", type="category", dtick=1)
    fig.update_layout(title=title, height=max(320, 110 + LAYER_ROW_PX * len(frame)), barmode="group", showlegend=flawed,
                      margin=dict(l=10, r=10, t=60, b=10))
    return readable(fig)


def _profile_traces(traj: CheckpointTrajectory, index: int) -> list[go.Scatter]:
    x = np.arange(1, len(traj.lambdas) + 1)
    return [
        go.Scatter(x=x, y=np.maximum(traj.profiles[0], MIN_ENERGY), mode="lines", name=f"first: {traj.labels[0]}",
                   line=dict(color=REFERENCE_COLORS["rgb"], dash="dot", width=1)),
        go.Scatter(x=x, y=np.maximum(traj.profiles[index], MIN_ENERGY), mode="lines+markers", name="profile",
                   line=dict(color=color(0)), marker=dict(size=5),
                   hovertemplate="component %{x}<br>e = %{y:.3f}<extra></extra>"),
        go.Scatter(x=x, y=np.maximum(traj.theory[index], MIN_ENERGY), mode="lines",
                   name=f"theory fit (r = {traj.r[index]:.2f}, ηt = {traj.eta_t[index]:.3g})",
                   line=dict(color=REFERENCE_COLORS["theory"], dash="dash")),
    ]


def trajectory_profiles_figure(traj: CheckpointTrajectory) -> go.Figure:
    """The first-layer profile of each checkpoint against its fitted theory, with a checkpoint slider."""
    last = len(traj.labels) - 1
    names = [f"{i + 1}" for i in range(len(traj.labels))]
    frames = [go.Frame(data=_profile_traces(traj, i), name=names[i],
                       layout=go.Layout(title=f"Checkpoint {i + 1}/{last + 1}: {label}"))
              for i, label in enumerate(traj.labels)]
    steps = [dict(method="animate", label=names[i],
                  args=[[names[i]], dict(mode="immediate", frame=dict(duration=0, redraw=True),
                                         transition=dict(duration=0))]) for i in range(len(names))]
    fig = go.Figure(data=_profile_traces(traj, last), frames=frames)
    fig.update_layout(title=f"Checkpoint {last + 1}/{last + 1}: {traj.labels[last]}", height=500,
                      xaxis_title="PCA component (1 = largest variance)", yaxis_title="energy e_i (max-normalized)",
                      margin=dict(l=10, r=10, t=90, b=10),
                      sliders=[dict(active=last, steps=steps, currentvalue=dict(prefix="checkpoint "), y=-0.12,
                                    yanchor="top", pad=dict(t=10))])
    values = np.concatenate([traj.profiles.ravel(), traj.theory.ravel()])
    floor = max(MIN_ENERGY, 0.8 * float(np.min(values[values > 0], initial=1.0)))
    fig.update_yaxes(**log_axis([floor, 10 ** 0.1], range=[np.log10(floor), 0.1]))  # one range for every checkpoint
    return readable(fig)


def trajectory_summary_figure(traj: CheckpointTrajectory) -> go.Figure:
    """Small multiples over the checkpoints: fitted ηt, the theory fit r (with the random-init r) and whitening."""
    rows = 3 if traj.whitening is not None else 2
    titles = ["fitted ηt (τ of the linear theory)", "theory fit: Pearson r"]
    if traj.whitening is not None:
        titles.append(f"whitening: C(δ)/C(0) at δ = {traj.whitening_distance} px")
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.08)
    x = list(traj.labels)
    fig.add_trace(go.Scatter(x=x, y=traj.eta_t, mode="lines+markers", name="ηt", line=dict(color=color(1))),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=traj.r, mode="lines+markers", name="r (checkpoint)", line=dict(color=color(0))),
                  row=2, col=1)
    if all("r_log" in fit for fit in traj.fits):
        fig.add_trace(go.Scatter(x=x, y=[fit["r_log"] for fit in traj.fits], mode="lines+markers",
                                 name="r on log values (checkpoint)", line=dict(color=color(0), dash="dash")),
                      row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=traj.random_init_r, mode="lines", name="r (random init, mean over seeds)",
                             line=dict(color=REFERENCE_COLORS["random"], dash="dot")), row=2, col=1)
    if traj.whitening is not None:
        fig.add_trace(go.Scatter(x=x, y=traj.whitening, mode="lines+markers", name="learned first layer",
                                 line=dict(color=color(2))), row=3, col=1)
        for name, value in traj.whitening_reference.items():
            fig.add_trace(go.Scatter(x=x, y=[value] * len(x), mode="lines", name=REFERENCE_NAMES[name],
                                     line=dict(color=REFERENCE_COLORS[name], dash="dash", width=1)), row=3, col=1)
    fig.update_yaxes(row=1, col=1, **log_axis(traj.eta_t))
    fig.update_yaxes(range=[-1.05, 1.05], row=2, col=1)
    fig.update_layout(title="The first layer over the checkpoints", height=260 * rows, showlegend=True,
                      margin=dict(l=10, r=10, t=60, b=10))
    return readable(fig)


def trajectory_keys_figure(traj: CheckpointTrajectory) -> go.Figure:
    """Share of the depthwise filters assigned to each master key, per checkpoint (stacked bars)."""
    counts = traj.masterkey_counts
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig = go.Figure([go.Bar(x=list(traj.labels), y=shares[:, key], name=KEY_NAMES[key], marker_color=color(key),
                            customdata=counts[:, key],
                            hovertemplate="%{x}<br>%{y:.1%} (%{customdata} filters)<extra>" + KEY_NAMES[key]
                            + "</extra>") for key in range(counts.shape[1])])
    fig.update_layout(barmode="stack",
                      title=f"Master-key composition over the checkpoints ({traj.masterkey_templates})",
                      yaxis_title="share of the depthwise filters", yaxis_tickformat=".0%", height=420,
                      margin=dict(l=10, r=10, t=50, b=10))
    return readable(fig)

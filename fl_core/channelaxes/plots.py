"""Figures of the Channel Axes analysis (:class:`~fl_core.channelaxes.analysis.ChannelAxesResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from fl_core.channelaxes.analysis import ChannelAxesResult
from fl_core.channelaxes.calibration import DECISION_LABELS
from fl_core.channelaxes.claims import ClaimsTable
from fl_core.channelaxes.pruning import NetworkPruningResult, PruningResult, auc_text, curve_auc_text
from fl_core.channelaxes.settings import CRITERIA
from fl_core.channelaxes.site import ChannelSite
from fl_core.errors import ArgumentError, value_text

if TYPE_CHECKING:
    from fl_core.channelaxes.sweep import ChannelSweepResult
    from fl_core.channelaxes.training import AxesTrajectory
from fl_core.figures import color, filter_zoom_figure, heatmap_figure, log_axis, readable, tiles_figure

METRIC_LABELS = {
    "input_capture": "input capture I_X (normalized)",
    "peer_overlap": "peer overlap R̄_X (mean |ρ|)",
    "peer_r2": "peer R² (held-out, top-k)",
    "peer_r2_all": "peer R² (all peers)",
    "task_info": "task information I(ā;m) [nats]",
    "task_info_gauss": "task information, Gaussian [nats]",
    "target_excess": "target-excess TE [nats]",
    "synergy": "pairwise synergy [nats]",
    "triplet_synergy": "triplet synergy [nats]",
    "lesion_dloss": "Δloss, mean-ablation",
    "lesion_zero_dloss": "Δloss, zero-ablation",
    "replacement_dloss": "Δloss, peer replacement",
    "peer_support": "peer support (lesion − replacement)",
    "local_score": "local-axis score",
    "target_score": "target-axis score",
}
DETAIL_LABELS = {  # further per-channel columns, shown in the channel table but not offered as plot axes
    "input_capture_rayleigh": "input capture, Rayleigh quotient wᵀΣw/‖w‖²",
    "input_capture_raw": "input capture, raw wᵀΣw (output variance)",
    "peer_overlap_max": "peer overlap, max |ρ|",
    "peer_overlap_topk": "peer overlap, mean |ρ| of the top-k peers",
    "peer_r2_all_pre": "peer R² (all peers, before the activation)",
    "redundancy": "pairwise redundancy (MMI) [nats]",
    "net_synergy": "net pairwise synergy [nats]",
    "filter_norm": "filter norm ‖w‖",
    "activation_mean": "mean activation",
}
AXIS_COLORS = {"local": ("#1f77b4", "#6baed6", "#08519c", "#9ecae1"), "target": ("#d62728", "#fb6a4a", "#a50f15",
                                                                                 "#fcae91")}
GLYPHS = " ▁▂▃▄▅▆▇█"
MISSING = "—"
LAYOUT = dict(margin=dict(l=10, r=10, t=50, b=10))
FILTER_COLUMN_PX = 360
"""The width a channel's filter is drawn at: beside its numbers (⅔ of a 1024-px projector's page)."""


def label(metric: str) -> str:
    """Display name of a per-channel column."""
    criterion = CRITERIA.get(metric.removeprefix("score_"))
    return (METRIC_LABELS.get(metric) or DETAIL_LABELS.get(metric) or (criterion and f"{criterion.label} score")
            or metric.replace("_", " "))


SHORT_LABELS = {"input_capture": "input capture I_X", "peer_overlap": "peer overlap R̄_X",
                "peer_r2": "peer R² (top-k)", "peer_r2_all": "peer R² (all)", "task_info": "task info I(ā;m)",
                "task_info_gauss": "task info (Gauss)", "target_excess": "target-excess TE",
                "replacement_dloss": "Δloss, replacement", "peer_support": "peer support",
                "local_score": "local score", "target_score": "target score"}
"""Names of the per-channel columns that fit a select box a third of a 1024-px projector's page wide (the projector
test checks every select box for a cut value) and the rows of the correlation heatmap; units and estimator details
are in :func:`label`."""


def short_label(metric: str) -> str:
    """A per-channel column's name for a narrow menu: :data:`SHORT_LABELS`, else :func:`label`."""
    return SHORT_LABELS.get(metric) or label(metric)


def filter_glyph(weight: np.ndarray, top: int = 3) -> str:
    """A filter ``(C_in, kh, kw)`` as hover text: its spatial energy ``‖W[:, y, x]‖`` as block glyphs (one row per
    kernel row) and its strongest input channels with their summed weight."""
    energy = np.sqrt((weight ** 2).sum(axis=0))
    lines = []
    if energy.size > 1:
        scaled = np.rint(energy / (energy.max() or 1.0) * (len(GLYPHS) - 1)).astype(int)
        lines += ["".join(GLYPHS[v] * 2 for v in row) for row in scaled]
    sums = weight.reshape(len(weight), -1).sum(axis=1)
    order = np.argsort(-np.abs(sums))[:top]
    lines.append(", ".join(f"in {i}: {sums[i]:+.2f}" for i in order))
    return "<br>".join(lines)


def axes_scatter_figure(result: ChannelAxesResult, x: str = "input_capture", y: str = "task_info",
                        color_by: str = "lesion_dloss", log_x: bool = True) -> go.Figure:
    """Every channel on the two axes, coloured by its lesion effect; hover shows the filter and the values."""
    table = result.table
    values = table[color_by].to_numpy(dtype=float)
    has_colour = np.isfinite(values).any()
    glyphs = [filter_glyph(result.filters[i]) for i in table["index"]]
    custom = np.column_stack([table["index"], glyphs, *(table[c].to_numpy(dtype=float) for c in (
        "peer_r2", "target_excess", "lesion_dloss", "replacement_dloss"))])
    marker = dict(size=9, line=dict(width=0.5, color="#333"))
    if has_colour:
        limit = float(np.nanmax(np.abs(values))) or 1.0
        marker.update(color=values, colorscale="RdBu_r", cmin=-limit, cmax=limit,
                      colorbar=dict(title=label(color_by), thickness=12))
    hover = ("<b>channel %{customdata[0]}</b><br><span style='font-family:monospace'>%{customdata[1]}</span><br>"
             f"{label(x)} = %{{x:.4g}}<br>{label(y)} = %{{y:.4g}}<br>peer R² = %{{customdata[2]:.3f}}<br>"
             "TE = %{customdata[3]:.4f}<br>Δloss lesion = %{customdata[4]:.4f}<br>"
             "Δloss replacement = %{customdata[5]:.4f}<extra></extra>")
    fig = go.Figure(go.Scatter(x=table[x], y=table[y], mode="markers", marker=marker, customdata=custom,
                               hovertemplate=hover))
    fig.update_layout(title=f"{result.label} · {result.layer}: local axis vs target axis "
                      f"(Spearman ρ = {result.axes.spearman:.2f})", xaxis_title=label(x), yaxis_title=label(y),
                      height=480, **LAYOUT)
    if log_x and (table[x] > 0).all():
        fig.update_xaxes(**log_axis(table[x]))
    return readable(fig)


def lesion_bars_figure(result: ChannelAxesResult, limit: int = 64) -> go.Figure:
    """Δloss of mean-ablation, zero-ablation and peer replacement per channel, largest lesion effect first."""
    table = result.table.sort_values("lesion_dloss", ascending=False, na_position="last").head(limit)
    names = [str(i) for i in table["index"]]
    fig = go.Figure()
    for i, (column, name) in enumerate((("lesion_dloss", "mean-ablation"), ("lesion_zero_dloss", "zero-ablation"),
                                        ("replacement_dloss", "peer replacement"))):
        if table[column].notna().any():
            fig.add_trace(go.Bar(x=names, y=table[column], name=name, marker_color=color(i),
                                 hovertemplate="channel %{x}<br>Δloss = %{y:.4f}<extra>" + name + "</extra>"))
    shown = f"the {len(table)} channels with the largest lesion effect" if len(result.table) > limit else "all channels"
    fig.update_layout(title=f"Lesion and peer replacement: Δ cross-entropy on held-out images ({shown})",
                      xaxis_title="channel", yaxis_title="Δloss (nats; > 0 = hurts)", barmode="group", height=380,
                      **LAYOUT)
    fig.update_xaxes(type="category")
    return readable(fig)


def peer_support_figure(result: ChannelAxesResult) -> go.Figure:
    """Replacement Δloss against lesion Δloss: below the diagonal, the peers recover what the lesion lost."""
    table = result.table
    lesion, replaced = table["lesion_dloss"].to_numpy(float), table["replacement_dloss"].to_numpy(float)
    finite = np.isfinite(lesion) & np.isfinite(replaced)
    low = float(min(lesion[finite].min(), replaced[finite].min(), 0.0)) if finite.any() else 0.0
    high = float(max(lesion[finite].max(), replaced[finite].max(), 0.0)) if finite.any() else 1.0
    fig = go.Figure([
        go.Scatter(x=[low, high], y=[low, high], mode="lines", line=dict(color="#999", dash="dash"),
                   name="no peer support", hoverinfo="skip"),
        go.Scatter(x=lesion, y=replaced, mode="markers", name="channels", customdata=table["index"],
                   marker=dict(size=8, color=table["peer_r2"], colorscale="Viridis", cmin=0, cmax=1,
                               colorbar=dict(title="peer R²", thickness=12)),
                   hovertemplate="channel %{customdata}<br>lesion %{x:.4f}<br>replacement %{y:.4f}<extra></extra>"),
    ])
    fig.update_layout(title="Peer support: what the peers recover",
                      xaxis_title="Δloss, mean-ablation", yaxis_title="Δloss, peer replacement", height=420,
                      showlegend=False, **LAYOUT)
    return readable(fig)


def _criterion_curve(name: str, counters: dict[str, int], flops_removed, accuracy, legend: str, customdata,
                     hovertemplate: str) -> go.Scatter:
    """One criterion's top-1 (%) against the MACs removed (%): its axis' colour (:func:`_criterion_color`), solid for
    the two axes' criteria, dotted for the baselines."""
    return go.Scatter(x=np.asarray(flops_removed) * 100, y=np.asarray(accuracy) * 100, mode="lines+markers",
                      name=legend, customdata=customdata, hovertemplate=hovertemplate,
                      line=dict(color=_criterion_color(name, counters),
                                dash="solid" if CRITERIA[name].axis in ("local", "target") else "dot"))


def _criterion_color(name: str, counters: dict[str, int]) -> str:
    axis = CRITERIA[name].axis
    index = counters.get(axis, 0)
    counters[axis] = index + 1
    if axis in AXIS_COLORS:
        return AXIS_COLORS[axis][index % len(AXIS_COLORS[axis])]
    return ("#444444", "#2ca02c", "#9467bd", "#8c564b", "#ff7f0e", "#17becf", "#bcbd22", "#7f7f7f")[index % 8]


def pruning_curves_figure(pruning: PruningResult, finetuned: bool = False,
                          accuracy_label: str = "top-1 accuracy (%)") -> go.Figure:
    """Top-1 accuracy against the fraction of the network's MACs removed, one curve per criterion, AUC in the
    legend (local-axis criteria in blues, target-axis in reds, baselines in other colours)."""
    fig = go.Figure()
    counters: dict[str, int] = {}
    for name, curve in pruning.curves.items():
        accuracy = curve.accuracy_finetuned if finetuned else curve.accuracy
        if accuracy is None:
            continue
        fig.add_trace(_criterion_curve(
            name, counters, curve.flops_removed, accuracy,
            f"{curve.label} (AUC {curve_auc_text(curve, pruning.n_images, finetuned)})", pruning.channels_removed,
            "%{customdata} channels removed<br>MACs removed %{x:.2f}%<br>top-1 %{y:.1f}%<extra>" + curve.label
            + "</extra>"))
    state = f"after a {pruning.settings.finetune_steps}-step recovery fine-tune" if finetuned else "no fine-tune"
    fig.update_layout(title=f"Pruning {pruning.layer}: accuracy vs FLOPs removed ({state})",
                      xaxis_title="MACs removed (% of the whole network)", yaxis_title=accuracy_label,
                      height=440, **LAYOUT)
    return readable(fig)


def network_pruning_figure(pruning: NetworkPruningResult, recovered: bool = False,
                           accuracy_label: str = "top-1 accuracy (%)") -> go.Figure:
    """Top-1 accuracy of the layers pruned together against the MACs removed, one curve per criterion, each AUC in
    percentage points with its interval and the evaluation set's size in the legend."""
    fig = go.Figure()
    counters: dict[str, int] = {}
    layers = [", ".join(f"{layer} −{n}" for layer, n in point.items()) for point in pruning.channels_removed]
    for name, curve in pruning.curves.items():
        accuracy, auc, ci = ((curve.accuracy_recovered, curve.auc_recovered_pp, curve.auc_recovered_pp_ci)
                             if recovered else (curve.accuracy, curve.auc_pp, curve.auc_pp_ci))
        if accuracy is None:
            continue
        fig.add_trace(_criterion_curve(
            name, counters, pruning.flops_removed, accuracy,
            f"{curve.label} (AUC {auc_text(auc, ci, pruning.n_images)})", layers,
            "channels removed: %{customdata}<br>MACs removed %{x:.1f}%<br>top-1 %{y:.1f}%<extra>" + curve.label
            + "</extra>"))
    state = (f"after the {pruning.recovery_steps}-step recovery fine-tune" if recovered else "before recovery")
    fig.update_layout(title=f"{len(pruning.layers)} layers pruned together ({state})",
                      xaxis_title="MACs removed (% of the whole network)", yaxis_title=accuracy_label,
                      height=440, **LAYOUT)
    return readable(fig)


def metric_correlation_figure(result: ChannelAxesResult) -> go.Figure:
    """:meth:`~fl_core.channelaxes.analysis.ChannelAxesResult.metric_correlations` as an annotated heatmap."""
    table = result.metric_correlations()
    return heatmap_figure(table.to_numpy(), [short_label(c) for c in table.columns],
                          "Spearman ρ between per-channel quantities")


def filter_figure(result: ChannelAxesResult, channel: int = 0) -> go.Figure:
    """One channel's filter (``channel``: its index in the layer, the ``index`` column of ``result.to_frame()``): a
    tile per input channel (k×k kernels), RGB for a first layer, bars for 1×1 kernels."""
    if isinstance(channel, bool) or not isinstance(channel, int | np.integer) or not 0 <= channel < len(result.filters):
        raise ArgumentError(f"channel {value_text(channel)}: the layer's channels are 0 to {len(result.filters) - 1}, "
                            "the index column of to_frame().")
    weight = result.filters[channel]
    if weight.shape[1:] == (1, 1):
        fig = go.Figure(go.Bar(x=np.arange(len(weight)), y=weight[:, 0, 0], marker_color=color(0),
                               hovertemplate="input %{x}<br>w = %{y:.4f}<extra></extra>"))
        fig.update_layout(title=f"Channel {channel}: 1×1 weights over its {len(weight)} inputs", height=300,
                          xaxis_title="input channel", yaxis_title="weight", **LAYOUT)
        return readable(fig)
    if len(weight) == 3:
        return filter_zoom_figure(weight, f"Channel {channel}: RGB filter", width=FILTER_COLUMN_PX)
    return tiles_figure(weight[:64, None], f"Channel {channel}: its kernel on each of "
                        f"{min(len(weight), 64)} input channels (red +, blue −)",
                        labels=[f"input {i}" for i in range(min(len(weight), 64))], width=FILTER_COLUMN_PX)


def labelled_by_decisions(result: ChannelAxesResult) -> bool:
    """Whether the analysis scored the network against its own decisions (crops of classes it does not have)."""
    return DECISION_LABELS in result.data


def observed_where(site: ChannelSite) -> str:
    """Where the channels of a layer are read, in words: at the conv's output, or after the per-channel modules that
    follow it (``observed after features.15 → features.16, where the next layers read them``)."""
    if site.activation == site.layer:
        return "observed at its output, where the next layers read them"
    return f"observed after {' → '.join(site.chain[1:])} (where the next layers read them)"


@dataclass(frozen=True)
class PruningVerdict:
    """Which axis pruned better (``winner``: ``local``, ``target``, ``neither`` when a baseline beat both, ``tie``
    when the two axes pruned alike, ``–`` without pruning curves) and the AUCs behind it in one sentence."""

    winner: str
    sentence: str


def pruning_verdict(result: ChannelAxesResult) -> PruningVerdict:
    """Compare the pruning AUCs of the two axes' composite scores with each other and with the best baseline."""
    curves = {} if result.pruning is None else result.pruning.curves
    if not {"local", "target"} <= set(curves):
        return PruningVerdict("–", "")
    baselines = [c for name, c in curves.items() if CRITERIA[name].axis == "baseline"]
    best = max(baselines, key=lambda c: c.auc, default=None)
    n = result.pruning.n_images
    aucs = (f"AUC local axis {curve_auc_text(curves['local'], n)}, target axis "
            f"{curve_auc_text(curves['target'], n)}")
    if best is not None and best.auc > max(curves["local"].auc, curves["target"].auc):
        return PruningVerdict("neither", f"The {best.label} baseline pruned best ({aucs}, {best.label} "
                                         f"{curve_auc_text(best, n)}): on this layer neither axis chose safer "
                                         "channels.")
    winner = result.removability.better_axis_pruning
    if winner is None:
        return PruningVerdict("tie", f"The two axes pruned alike ({aucs}).")
    return PruningVerdict(winner, f"The {winner} axis pruned best ({aucs}" + (
        f", best baseline {best.label} {curve_auc_text(best, n)})." if best is not None else ")."))


def summary_table(result: ChannelAxesResult) -> pd.DataFrame:
    """The per-layer summary with readable numbers: pruning AUCs in percentage points (the average accuracy over the
    pruning range, as the curves' legend and the verdict write them), shares as percentages, the other quantities to
    3 decimals, the bootstrap interval beside each value that has one."""
    frame = result.summary_frame()

    def percent(quantity: str) -> bool:
        return quantity.startswith(("channels with", "shared mode")) and "correlation" not in quantity

    def text(quantity: str, value: float) -> str:
        if value != value:
            return MISSING
        if quantity.startswith("pruning AUC"):
            return f"{100 * value:.1f} pp"
        return f"{value:.1%}" if percent(quantity) else f"{value:.3f}"

    def interval(quantity: str, low: float, high: float) -> str:
        if low != low:
            return MISSING
        if quantity.startswith("pruning AUC"):
            return f"[{100 * low:.1f}, {100 * high:.1f}] pp"
        return f"[{low:.1%}, {high:.1%}]" if percent(quantity) else f"[{low:+.3f}, {high:+.3f}]"

    return pd.DataFrame({"quantity": frame["quantity"],
                         "value": [text(q, v) for q, v in zip(frame["quantity"], frame["value"])],
                         "95 % interval": [interval(q, low, high) for q, low, high in zip(
                             frame["quantity"], frame["low"], frame["high"])]})


def claims_table(table: ClaimsTable) -> pd.DataFrame:
    """The claims in five columns that wrap on a 1024-px projector: the claim, the verdict beside it, the
    measurement with its interval, the paper's number and why (the CSV keeps every column)."""
    measured = [MISSING if row.measured is None else f"{row.measured:+.3f}" + (
        f" [{row.ci_low:+.3f}, {row.ci_high:+.3f}]" if row.ci_low is not None else " (no interval)")
        for row in table.claims]
    return pd.DataFrame({"claim": [f"{row.number}. {row.claim}" for row in table.claims],
                         "verdict": [row.verdict for row in table.claims], "measured here": measured,
                         "paper": [row.paper for row in table.claims], "why": [row.why for row in table.claims]})


VERDICT_COLORS = {"reproduced": "#2ca02c", "partly": "#ff7f0e", "not reproduced": "#d62728",
                  "inconclusive": "#7f7f7f", "cannot be tested offline": "#bbbbbb"}


def claims_figure(table: ClaimsTable) -> go.Figure:
    """Each measured claim on a correlation scale (ρ or ARI: claims 1-3) with its interval, coloured by its verdict
    (the others, an AUC gain in points or nothing measured, are in the table)."""
    rows = [row for row in table.claims if row.measured is not None and row.number <= 3]
    fig = go.Figure()
    for row in rows:
        has_ci = row.ci_low is not None and row.ci_high is not None
        fig.add_trace(go.Scatter(
            x=[row.measured], y=[f"claim {row.number}"], mode="markers", name=f"{row.number}: {row.verdict}",
            marker=dict(size=13, color=VERDICT_COLORS.get(row.verdict, "#444")),
            error_x=dict(type="data", symmetric=False, array=[row.ci_high - row.measured],
                         arrayminus=[row.measured - row.ci_low]) if has_ci else None,
            hovertemplate=f"<b>claim {row.number}</b>: {row.claim}<br>{row.measure}<br>here %{{x:.3f}}"
                          + (f" [{row.ci_low:.3f}, {row.ci_high:.3f}]" if has_ci else " (no interval)")
                          + f"<br>paper: {row.paper}<br>verdict: {row.verdict}<extra></extra>"))
    fig.add_vline(x=0, line=dict(color="#999", dash="dash"))
    fig.update_layout(title="The paper's claims measured here (95 % bootstrap intervals over images)",
                      xaxis_title="measured here: ρ (claims 1 and 3) or ARI (claim 2)",
                      height=120 + 60 * max(len(rows), 1), showlegend=True, **LAYOUT)
    fig.update_yaxes(autorange="reversed")
    return readable(fig)


def depth_figure(sweep: ChannelSweepResult) -> go.Figure:
    """ρ(I_X, I(ā;m)) and the ARI of each layer against its depth, trained beside the initialization (mean over its
    seeds), with their bootstrap intervals."""
    from plotly.subplots import make_subplots

    frame = sweep.depth_frame().sort_values("depth")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Spearman ρ(I_X, I(ā;m))", "ARI of the axes' groupings"))
    for column, statistic in enumerate(("spearman", "ari"), start=1):
        for prefix, name, colour in (("", "trained", color(0)), ("init_", "initialization", color(1))):
            values = frame[f"{prefix}{statistic}"].to_numpy(float)
            if not np.isfinite(values).any():
                continue
            low, high = frame[f"{prefix}{statistic}_low"].to_numpy(float), frame[f"{prefix}{statistic}_high"].to_numpy(
                float)
            fig.add_trace(go.Scatter(
                x=frame["depth"], y=values, mode="lines+markers", name=name, legendgroup=name,
                showlegend=column == 1, line=dict(color=colour), customdata=frame["layer"],
                error_y=dict(type="data", symmetric=False, array=np.nan_to_num(high - values),
                             arrayminus=np.nan_to_num(values - low)),
                hovertemplate="%{customdata}<br>depth %{x}<br>" + name + " %{y:.3f}<extra></extra>"), row=1,
                col=column)
        fig.add_hline(y=0, line=dict(color="#999", dash="dash"), row=1, col=column)
    fig.update_xaxes(title_text=f"convolution index (of {sweep.layers[0].n_layers})")
    fig.update_layout(title=f"{sweep.label}: the axes against depth (95 % bootstrap intervals over images)",
                      height=420, **LAYOUT)
    return readable(fig)


AXES_OVER_TRAINING = {
    "spearman": ("ρ(I_X, I(ā;m))", 0), "ari": ("ARI of the groupings", 2), "significant_share":
        ("share with measurable I(ā;m)", 7),
    "cos_update_capture": ("cos(update, ∇ input capture)", 3),
    "cos_update_information": ("cos(update, ∇ task information)", 1),
    "cos_capture_information": ("cos(∇ input capture, ∇ task information)", 4),
}
"""What the axes-over-training figure draws: column -> (legend name, palette index)."""


def axes_over_training_figure(trajectory: AxesTrajectory) -> go.Figure:
    """One layer's axes at every snapshot (left: ρ and the ARI with their bootstrap intervals, and the share of
    channels with measurable task information) and the paper's claim 5 (right: the cosines of the update of the
    layer's filters with the gradients of total input capture and of total task information), against the step + 1
    on a log axis (1 = the initialization)."""
    from plotly.subplots import make_subplots

    frame = trajectory.to_frame()
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("Claims 1 and 2: the two axes", "Claim 5: the cosines"))
    x = frame["step"].to_numpy(float) + 1 if len(frame) else np.zeros(0)
    for name, (label, palette) in AXES_OVER_TRAINING.items():
        if name not in frame or not np.isfinite(frame[name].to_numpy(float)).any():
            continue
        values = frame[name].to_numpy(float)
        error = None
        if f"{name}_low" in frame:
            low, high = frame[f"{name}_low"].to_numpy(float), frame[f"{name}_high"].to_numpy(float)
            error = dict(type="data", symmetric=False, array=np.nan_to_num(high - values),
                         arrayminus=np.nan_to_num(values - low))
        column = 2 if name.startswith("cos_") else 1
        dash = "dot" if name in ("significant_share", "cos_capture_information") else "solid"
        fig.add_trace(go.Scatter(x=x, y=values, mode="lines+markers", name=label, error_y=error,
                                 line=dict(color=color(palette), dash=dash), customdata=frame["step"],
                                 hovertemplate="step %{customdata}<br>" + label + " %{y:.3f}<extra></extra>"),
                      row=1, col=column)
    for column in (1, 2):
        fig.add_hline(y=0, line=dict(color="#999", dash="dash"), row=1, col=column)
    fig.update_xaxes(title_text="SGD step + 1 (1 = initialization)", **log_axis(x))
    fig.update_yaxes(range=[-1.05, 1.05])
    n = int(frame["n_images"].iloc[0]) if len(frame) else 0
    fig.update_layout(title=f"{trajectory.layer} over training ({n} images, 95 % bootstrap intervals)", height=460,
                      **LAYOUT)
    return readable(fig)

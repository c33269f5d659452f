"""Channel Axes: does a channel matter for the task, and can its neighbours stand in for it? Two questions."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from fl_core.channelaxes.claims import pruning_claim
from fl_core.channelaxes.estimate import duration_text
from fl_core.channelaxes.plots import (
    METRIC_LABELS,
    axes_scatter_figure,
    claims_figure,
    claims_table,
    filter_figure,
    label,
    labelled_by_decisions,
    lesion_bars_figure,
    metric_correlation_figure,
    network_pruning_figure,
    observed_where,
    peer_support_figure,
    pruning_curves_figure,
    pruning_verdict,
    short_label,
    summary_table,
)
from fl_core.channelaxes.pruning import auc_text, curve_auc_text
from fl_core.channelaxes.settings import CRITERIA, CROPS, ChannelSettings, PruningSettings
from fl_ui.cache import get_model
from fl_ui.channels import (
    DEFAULT_CALIBRATION,
    DEFAULT_CHANNEL_SPEC,
    DEFAULT_EVALUATION,
    NETWORK_PRUNING,
    analysable_layers,
    channel_axes_result,
    channel_models,
    data_source,
    default_request,
    estimated_duration,
    learn_durations,
    network_pruning_result,
    network_request,
    pruned_layers_default,
)
from fl_ui.forms import settings_widgets
from fl_ui.glossary import explain_symbols
from fl_ui.jobs import ChannelAxesRequest
from fl_ui.messages import show
from fl_ui.sidebar import spec_labels
from fl_ui.state import current_selection, page_model, set_url_param, url_param
from fl_ui.widgets import (
    dashed,
    downloads,
    heavy_result,
    job_status_area,
    plot_with_explanation,
    preprocessing_caption,
    screen_columns,
    table_with_download,
    url_widget,
    user_errors,
)

LESION_NAMES = {"mean": "mean-ablation", "zero": "zero-ablation", "replace": "peer replacement"}
APPLIED = "axes_applied"  # session key: the request whose result the page shows
NETWORK_APPLIED = "axes_net_applied"  # session key: the layers-pruned-together request the page shows
# The per-channel table's columns on the page, in words that fit a 1024-px projector (the CSV has them all).
CHANNEL_COLUMNS = {"index": "channel", "input_capture": "I_X", "peer_overlap": "R̄_X", "peer_r2": "peer R²",
                   "task_info": "I(ā;m)", "task_info_p": "p",
                   "lesion_dloss": "Δloss, lesion", "replacement_dloss": "Δloss, peers"}


def layer_choice(layers: list, default: str, ready: set[str]) -> str:
    """The layer picker: each layer's kind and width, ✓ for layers whose result (at these settings) is at hand."""
    names = [lay.name for lay in layers]
    described = {lay.name: f"{lay.name} ({lay.kind}, {lay.out_channels} channels)" for lay in layers}
    start = url_param("axes_layer", default, choices=names)
    layer = st.selectbox("Layer", names, index=names.index(start), key="axes_layer",
                         format_func=lambda n: ("✓ " if n in ready else "") + described[n],
                         help="✓: analysed already at these settings, shown at once.")
    set_url_param("axes_layer", layer)
    return layer


def settings_form(loaded) -> tuple[int, int, ChannelSettings, bool]:
    """Image counts, interventions, pruning protocol and the comparison with the initialization."""
    with st.expander("⚙ Analysis settings"):
        s1, s2, s3 = st.columns(3)
        n_calibration = int(s1.number_input(
            "Calibration images", 32, 20000, step=32, key="axes_ncal",
            value=url_param("axes_ncal", DEFAULT_CALIBRATION, minimum=32, maximum=20000),
            help="Statistics, peer regressions and the recovery fine-tune."))
        n_evaluation = int(s2.number_input(
            "Evaluation images", 16, 20000, step=16, key="axes_neval",
            value=url_param("axes_neval", DEFAULT_EVALUATION, minimum=16, maximum=20000),
            help="Held-out images for lesions and pruning accuracy."))
        set_url_param("axes_ncal", n_calibration)
        set_url_param("axes_neval", n_evaluation)
        pruning = settings_widgets(
            PruningSettings, {"finetune_steps": "Recovery fine-tune steps"}, key="axes", container=s3,
            options={"finetune_steps": {"max_value": 500, "step": 10}}, url=True)
        settings = settings_widgets(
            ChannelSettings, {"lesion_kinds": "Interventions"}, key="axes", url=True,
            options={"lesion_kinds": {"format_func": LESION_NAMES.get, "help": (
                "Each kind evaluates every channel's lesioned network on the evaluation images (batched: the layers "
                "before this one run once). On a CPU, large models are quicker with a late layer or fewer images.")}})
        pruning = settings_widgets(PruningSettings, {"criteria": "Pruning criteria"}, key="axes", base=pruning,
                                   url=True, options={"criteria": {
                                       "format_func": lambda c: f"{CRITERIA[c].label} ({CRITERIA[c].axis})"}})
        settings = settings_widgets(ChannelSettings, {"init_recalibrate": "Recalibrate the initialization's BatchNorm"},
                                    key="axes", base=settings, url=True, options={"init_recalibrate": {"help": (
                                        "A random init keeps BatchNorm statistics at mean 0, variance 1, so its "
                                        "activations grow with depth. On: re-estimated on the calibration images "
                                        "first, as training's first step sees the network.")}})
        baseline = ("its own initialization" if loaded.init_is_own else
                    f"a random init of the same architecture ({loaded.init_spec})")
        compare_init = st.checkbox(
            "Compare with the initialization", key="axes_init", disabled=not loaded.init_spec,
            value=bool(loaded.init_spec) and url_param("axes_init", True),
            help=f"The same analysis of {baseline}: do the axes part only after training?" if loaded.init_spec
            else "Only models that name their initialization (the demos) can be compared with it.")
        set_url_param("axes_init", compare_init)
    return n_calibration, n_evaluation, replace(settings, pruning=pruning if pruning.criteria else None), compare_init


def forget_choices_of_another_result(result, choices: dict[str, list]) -> None:
    """When the page shows another layer or model than on its last run, drop the URL values (and widget states) of
    ``choices`` (key → the new result's options) that the new result does not offer: they were choices about the
    old one, not a link's values to warn about."""
    shown = (result.spec, result.layer)
    if st.session_state.get("axes_shown", shown) != shown:
        for key, options in choices.items():
            if st.query_params.get(key) not in {str(o) for o in options}:
                st.query_params.pop(key, None)
                st.session_state.pop(key, None)
    st.session_state["axes_shown"] = shown


def applied_request(wanted: ChannelAxesRequest) -> ChannelAxesRequest:
    """The request whose result the page shows: ``wanted`` on a first visit, when its result is at hand, or once the
    user presses Apply (the estimated duration is shown before); else the one applied last. The request it replaces
    is abandoned: cancelled at once unless another session waits for it, so nothing queues behind it."""
    applied = st.session_state.get(APPLIED)
    if applied is not None and applied != wanted and not channel_axes_result.cached(wanted):
        estimate = estimated_duration(wanted)
        box = st.empty()
        with box.container(border=True):
            show(st.markdown, "**Changed settings, not applied yet.** Layer **{}** of {} on {} + {} images: {} ({}).",
                 wanted.settings.layer, get_model(wanted.spec, wanted.overrides).label, wanted.n_calibration,
                 wanted.n_evaluation, duration_text(estimate.seconds), estimate.basis)
            if not st.button("▶ Apply", type="primary", key="axes_apply"):
                show(st.caption, "Below: the result applied last (layer **{}** of {}).", applied.settings.layer,
                     get_model(applied.spec, applied.overrides).label)
                return applied
        box.empty()
    if applied is not None and applied != wanted:
        channel_axes_result.abandon(applied)
    st.session_state[APPLIED] = wanted
    return wanted


def network_pruning_section(analysis: ChannelAxesRequest, names: list[str], decisions: bool, status) -> None:
    """Several layers pruned together to FLOPs targets (off by default: it prunes, scores and recovers whole networks
    on the engine), its curves, each criterion's AUC and claim 4's paired difference."""
    st.subheader("Several layers pruned together")
    on = url_widget("Prune several layers together to FLOPs targets", False, key="axes_net", help=(
        "The paper's protocol: many layers pruned at once until a share of the whole network's multiply-accumulates "
        "(MACs) is gone, each pruned network briefly retrained. Runs on the engine, a few minutes on a CPU."))
    if not on:
        network_pruning_result.abandon(st.session_state.pop(NETWORK_APPLIED, None))
        st.caption("One layer removes a few percent of the network's computation at most. Switch this on to prune "
                   "several layers together to 10, 20 and 30 % of the MACs by each criterion.")
        return
    default = tuple(pruned_layers_default(analysis.spec, analysis.overrides))
    layers = url_widget("Layers pruned together", default, key="axes_net_layers", choices=names, omit_default=True,
                        help="By default the convolutions that widen the channels for a depthwise one (MobileNetV2's "
                        "expansions), else every convolution after the first.")
    n1, n2, _ = st.columns([2, 1, 1])
    base = replace(analysis.settings.pruning or PruningSettings(), flops_targets=NETWORK_PRUNING.flops_targets,
                   recovery_steps=NETWORK_PRUNING.recovery_steps)
    pruning = settings_widgets(PruningSettings, {"flops_targets": "FLOPs targets (share of the MACs removed)"},
                               key="axes_net", base=base, container=n1, url=True)
    pruning = settings_widgets(PruningSettings, {"recovery_steps": "Recovery steps"}, key="axes_net", base=pruning,
                               container=n2, url=True, options={"recovery_steps": {"max_value": 500, "step": 5}})
    if not layers or not pruning.flops_targets or not pruning.criteria:
        st.info("Choose one or more layers, FLOPs targets and pruning criteria (in the analysis settings).")
        return
    request = network_request(analysis, layers, pruning)
    if st.session_state.get(NETWORK_APPLIED, request) != request:
        network_pruning_result.abandon(st.session_state[NETWORK_APPLIED])
    st.session_state[NETWORK_APPLIED] = request
    with user_errors():  # a target no layer choice reaches is said here; the page above stays
        result = heavy_result("Layers pruned together", network_pruning_result, request, status=status)
        network_pruning_view(result, decisions)


def network_pruning_view(result, decisions: bool) -> None:
    """The curves of the layers pruned together, before or after the recovery, and the AUC table with claim 4
    (``decisions``: the images are labelled with the intact network's own decisions)."""
    n = result.n_images
    recovered = result.recovery_steps > 0 and url_widget("Show after the recovery fine-tune", True,
                                                         key="axes_net_recovered")
    gain, ci, verdict, _ = pruning_claim((), result)
    labels = " (agreement with the intact network: they are labelled with its own decisions)" if decisions else ""
    plot_with_explanation(
        network_pruning_figure(result, recovered=recovered, accuracy_label=(
            "agreement with the intact network (%)" if decisions else "top-1 accuracy (%)")),
        f"The {len(result.layers)} layers lose channels **together**, each criterion picking inside every layer, "
        "until the share of the network's computation (MACs) on the horizontal axis is gone; every criterion removes "
        "as many channels from each layer, so the points match in FLOPs. The vertical axis is the accuracy on "
        f"{n} held-out images{labels}, after {result.recovery_steps} steps of retraining the pruned network to "
        "imitate the intact one when *Show after the recovery fine-tune* is ticked. The **AUC** is the average "
        "accuracy over the range in percentage points (pp), with its 95 % interval from resampling the images "
        f"(bootstrap) and n, the number of images: one image moves an accuracy by {100 / n:.1f} points. The paper's "
        "claim 4 says the local axis prunes better than the target axis: the table's last row is their paired "
        "difference, local − target on the same images: one axis prunes better only when its interval excludes 0.",
        "network_pruning", result=result)
    frame = result.to_frame()

    def auc(row: pd.Series, column: str) -> str:
        return "–" if pd.isna(row[column]) else auc_text(row[column], [row[f"{column}_low"], row[f"{column}_high"]], n)

    shown = pd.DataFrame({"criterion": frame["criterion"], "axis": frame["axis"],
                          "AUC before recovery": [auc(row, "auc_pp") for _, row in frame.iterrows()],
                          "AUC after recovery": [auc(row, "auc_recovered_pp") for _, row in frame.iterrows()]})
    table_with_download(frame, "network_pruning_auc", shown=shown)
    if collapsed := [curve.label for curve in result.curves.values() if not any(curve.accuracy[1:])]:
        named = " and ".join([", ".join(collapsed[:-1]), collapsed[-1]] if len(collapsed) > 1 else collapsed)
        show(st.warning, "Before the recovery fine-tune, pruning by {} lost every image at the first FLOPs target: "
             "those AUCs are the intact network's point alone and tell the criteria apart only after recovery. "
             "Smaller targets or more recovery steps separate them (the paper fine-tunes each pruned network).", named)
    if gain is not None:
        show(st.markdown, "**Claim 4, local − target:** {} ({}; {} layers, {} of the MACs removed at most).",
             auc_text(gain, ci, n), verdict, len(result.layers), f"{100 * max(result.flops_removed):.0f} %")
    else:
        st.caption("Claim 4 needs both the local and the target axis among the pruning criteria.")
    notes = [*(f"{t:.0%}: not reachable, the layers hold less of the MACs" for t in result.unreachable),
             *(f"not available here: {k} ({v})" for k, v in result.skipped.items())]
    show(st.caption, "Pruned together: {}.", "; ".join([", ".join(result.layers), *notes]))


st.title("🧭 Channel Axes")
status = job_status_area()  # the running job's progress and Cancel, in the first screen
st.markdown(
    "Pruning tools give every channel one importance number. Safaai et al. (2026) argue that two different things "
    "hide in it: the **target axis** (how much a channel tells about the right answer) and the **local axis** (how "
    "much of the layer's input it captures and how much its neighbours overlap with it). A channel can be very "
    "informative and still removable because its peers cover it. Pick a layer, see every channel on both axes, "
    "then *test* removability directly: lesion it, let its peers stand in for it, prune.\n\n"
    "The paper's method section is not public: every definition here is this project's **proposed** one "
    "(their formulas: the section *Channel axes* of `docs/methods.md`).")

selection = current_selection()
with user_errors():
    model_column, _ = st.columns([1, 1])  # the layer picker below it gets the page's width: its names are long
    candidates = channel_models(selection)
    spec = page_model("Model", candidates, DEFAULT_CHANNEL_SPEC, key="axes_model", container=model_column,
                      format_func=spec_labels(candidates).get,
                      help="The sidebar's models and the real ImageNet MobileNetV2 that ships with FilterLens.")
    overrides = selection.overrides_of(spec)
    loaded = get_model(spec, overrides)
    if loaded.weights_only:
        show(st.info, "**{}**: Channel Axes runs the network (lesions, peer replacement, pruning), and this file holds "
             "only its weights. {} In the sidebar: *Upload a "
             "checkpoint* with its *Architecture*. Its filters open on the Energy Profiles, Master Keys and Report "
             "pages, which need only weights.", loaded.label, loaded.runnable_advice())
        st.stop()
    preprocessing_caption([loaded])
    source = data_source(selection.images)
    layers = analysable_layers(spec, overrides)
    default_layer = default_request(spec, overrides, selection.images, selection.device).settings.layer
    n_calibration, n_evaluation, settings, compare_init = settings_form(loaded)

    def request(layer: str) -> ChannelAxesRequest:
        return ChannelAxesRequest(spec, overrides, source, n_calibration, n_evaluation, replace(settings, layer=layer),
                              compare_init, selection.device)

    layer = layer_choice(layers, default_layer, {lay.name for lay in layers
                                                 if channel_axes_result.cached(request(lay.name))})
    if source == CROPS:
        st.caption("Data: crops of the bundled photos (calibration from the training crops, evaluation from the "
                   "held-out crops). Change it in the sidebar.")
    else:
        show(st.caption, "Data: the labelled ImageFolder tree {}, split at random into calibration and evaluation "
             "halves. Change it in the sidebar.", source)
    applied = applied_request(request(layer))
    result = heavy_result("Channel axes", channel_axes_result, applied, status=status)
    learn_durations(result, applied.overrides)
    layer = result.layer
    for warning in result.warnings:
        show(st.warning, "{}", warning)

    m1, m2, m3, m4 = st.columns(4)
    interval = ("95 % interval over images {:+.2f} to {:+.2f} (bootstrap). ".format(*result.axes.spearman_ci)
                if result.axes.spearman_ci else "")
    m1.metric("ρ between axes", f"{result.axes.spearman:+.2f}", help=interval + "Spearman rank correlation of input "
              "capture I_X and task information I(ā;m) across the channels.")
    agreement = result.axes.agreement
    ari_interval = ("95 % interval {:+.2f} to {:+.2f}. ".format(*result.axes.ari_ci) if result.axes.ari_ci else "")
    m2.metric("ARI of groupings", f"{agreement.ari_median:+.2f}" if agreement else "–",
              help=ari_interval + "Agreement of k-means groupings on each axis (0 = chance, 1 = identical).")
    m3.metric("Predicts lesions", result.removability.better_axis_lesion or "–",
              help="The axis whose composite score has the larger Spearman ρ with the lesion's Δloss.")
    verdict = pruning_verdict(result)
    m4.metric("Prunes better", verdict.winner, help="By the area under the pruning curve (AUC). " + verdict.sentence)
    decisions = labelled_by_decisions(result)
    show(st.caption, "{} channels of **{}**, {}", result.site.n_channels, layer,
         f"{observed_where(result.site)} ({result.positions} positions per image), on {result.n_calibration} "
         f"calibration and {result.n_evaluation} evaluation images" + (
             "." if decisions else f"; intact network: {result.calibration_accuracy:.1%} calibration accuracy.")
         + (f" {verdict.sentence}" if verdict.sentence else ""))
    right_class = "its own top-1 class" if decisions else "the right class"
    significance = result.axes.significance
    if significance is not None:
        floor = significance.noise_floor_share > 0.5
        show(st.warning if floor else st.caption, "{}{} Each channel's p-value is in the table below (p).",
             "**Most channels carry no measurable task information.** " if floor else "",
             result.noise_floor_sentence())
    explain_symbols(("ρ", "ARI", "I_X", "R̄_X", "peer R²", "I(ā;m)", "TE", "nats", "Δloss", "AUC", "fold"))

    st.subheader("Both axes")
    metrics = [c for c in METRIC_LABELS if c in result.table and result.table[c].notna().any()]
    forget_choices_of_another_result(result, {"axes_x": metrics, "axes_y": metrics, "axes_colour": metrics,
                                              "axes_channel": [int(c) for c in result.table["index"]]})
    a1, a2, a3 = st.columns(3)
    axes = {}
    for column, (key, text, default_metric) in zip((a1, a2, a3), (
            ("axes_x", "Horizontal", "input_capture"), ("axes_y", "Vertical", "task_info"),
            ("axes_colour", "Colour", "lesion_dloss" if "lesion_dloss" in metrics else metrics[0]))):
        start = url_param(key, default_metric, choices=metrics)
        axes[key] = column.selectbox(text, metrics, index=metrics.index(start), format_func=short_label, key=key,
                                     help="; ".join(f"{short_label(m)}: {label(m)}" for m in metrics))
        set_url_param(key, axes[key])
    plot_with_explanation(
        axes_scatter_figure(result, axes["axes_x"], axes["axes_y"], axes["axes_colour"]),
        "**How to read it.** Each dot is one channel. Left–right: **input capture**, how much of the variance of "
        "its input the filter picks up (1 = like a random direction). Up–down: **task information**, how much the "
        f"channel's average activation tells about the network's confidence in {right_class} (nats). "
        "Colour: how much the loss rises when the channel is replaced by its average (**lesion**).\n\n"
        "If the two axes measured the same thing, the dots would line up. Hover over a dot to see its filter "
        "(spatial energy as blocks) and its numbers.",
        f"channel_axes_{layer}", frame=result.to_frame(), result=result)

    f1, f2 = st.columns([1, 3])
    ranked = [int(c) for c in result.table.sort_values("lesion_dloss", ascending=False, na_position="last")["index"]]
    start = url_param("axes_channel", ranked[0], choices=ranked)
    channel = f1.selectbox("Inspect channel", ranked, index=ranked.index(start), key="axes_channel",
                           help="Sorted by lesion effect, largest first.")
    set_url_param("axes_channel", channel)
    figure = filter_figure(result, channel)
    f2.plotly_chart(figure, width="stretch", key="axes_filter")
    downloads(f"filter_{layer}_{channel}", figure=figure)
    with st.expander(f"Every number of channel {channel}"):
        row = result.table.set_index("index").loc[channel]
        st.dataframe(dashed(pd.DataFrame({"quantity": [label(c) for c in row.index],
                                                  "value": row.to_numpy()})), hide_index=True, width="stretch")

    if result.interventions is not None:
        st.subheader("Lesions and peer replacement")
        plot_with_explanation(
            lesion_bars_figure(result),
            "**Lesion**: the channel is replaced by its average over the calibration images (mean-ablation) or by "
            "zero, and the cross-entropy on held-out images is measured again. **Peer replacement**: the channel is "
            "replaced by its best linear reconstruction from its 8 most correlated neighbours. When replacement "
            "costs much less than the lesion, the neighbours *support* the channel: it is removable even if it "
            f"matters.\n\n*Peer replacement: {result.replacement_method()}.*",
            f"lesions_{layer}", frame=result.to_frame()[["index", "lesion_dloss", "lesion_zero_dloss",
                                                        "replacement_dloss", "peer_support"]])
        plot_with_explanation(
            peer_support_figure(result),
            "Each dot is a channel: its lesion cost (x) against its cost after peer replacement (y). Dots far "
            "**below the dashed diagonal** are channels whose neighbours can stand in for them; the colour is "
            "how well the neighbours reconstruct them (peer R²).", f"peer_support_{layer}",
            frame=result.to_frame()[["index", "lesion_dloss", "replacement_dloss", "peer_support", "peer_r2"]])

    if result.pruning is not None:
        st.subheader("Pruning curves")
        tuned = any(c.accuracy_finetuned for c in result.pruning.curves.values())
        show_tuned = tuned and st.toggle("Show after the recovery fine-tune", key="axes_tuned",
                                         value=url_param("axes_tuned", False))
        if tuned:
            set_url_param("axes_tuned", show_tuned)
        n = result.pruning.n_images
        auc = pd.DataFrame([{"criterion": c.label, "axis": c.axis, "AUC": curve_auc_text(c, n),
                             "AUC fine-tuned": curve_auc_text(c, n, True) if c.auc_finetuned is not None else "–"}
                            for c in result.pruning.curves.values()])
        plot_with_explanation(
            pruning_curves_figure(result.pruning, finetuned=show_tuned, accuracy_label=(
                "agreement with the intact network (%)" if decisions else "top-1 accuracy (%)")),
            "Channels of this layer are removed **for real** (the network gets smaller) by each criterion, lowest "
            "score first, and the accuracy is measured on held-out images. Where a convolution reads the channels "
            "directly, it absorbs their average (so removal does not also shift the next layer's input). Every "
            "criterion removes the same number of channels at each point, so the FLOPs match. The **AUC** is the "
            "average accuracy over the range, in percentage points with its 95 % interval over the evaluation "
            f"images and their number (one image moves an accuracy by {100 / n:.1f} points): higher = the criterion "
            "picked channels that were safer to remove. Blue curves use the local axis, red the target axis, dotted "
            "ones classic baselines." + (
                f" {verdict.sentence}" if verdict.sentence else "") + (
                "" if tuned else " Set fine-tune steps in the settings to see how much a short retraining recovers."),
            f"pruning_{layer}", frame=auc, data=result.to_dict()["pruning"])
        skipped = [f"not available here: {k} ({v})" for k, v in result.pruning.skipped.items()]
        show(st.caption, "Pruning: {}.", "; ".join([*result.pruning.notes, *skipped]))

    st.subheader("Which numbers go together")
    plot_with_explanation(
        metric_correlation_figure(result),
        "Spearman rank correlation between every per-channel quantity across this layer's channels. Look at the "
        "rows of the lesion and replacement costs: which score predicts them best? A quantity that is the same for "
        "every channel ranks none of them and is left out (a BatchNorm folded into its convolution, as in the "
        "shipped MobileNetV2, gives every channel BN |γ| = 1).", f"metric_correlation_{layer}",
        frame=result.metric_correlations().reset_index(names="quantity"))

    st.subheader("The paper's claims on this layer")
    claims = result.claims()
    plot_with_explanation(
        claims_figure(claims),
        "Safaai et al. make five claims; each row is one of them measured on this layer, with a 95 % interval from "
        "resampling the images (bootstrap), and a verdict: **reproduced**, **partly**, **not reproduced**, "
        "**inconclusive** (no interval decides it) or **cannot be tested offline**. One layer of one network is a "
        "single data point: the command `python -m fl_core channels --layer A --layer B ...` measures several layers "
        "together. The thresholds behind the verdicts are this project's (docs/methods.md, *The paper's claims*).",
        f"claims_{layer}", frame=claims.to_frame(), data={"claims": claims.rows()})
    st.table(claims_table(claims), hide_index=True)  # static: its sentences wrap on a projector

    st.subheader("Per-layer summary")
    table_with_download(result.summary_frame(), f"channel_axes_summary_{layer}", shown=summary_table(result))
    st.subheader("Every channel")
    st.caption("I_X: input capture; R̄_X: peer overlap; peer R²: how well its peers reconstruct it; I(ā;m): task "
               "information (nats); p: the chance of a task information this large if the "
               "channel told nothing about the answer (a permutation test; below 0.05: measurable); Δloss when it is "
               "mean-ablated and when its peers replace it. The CSV has every per-channel number (the target "
               "excess TE, the noise-floor corrected information, scores, synergies, filter norms).")
    table_with_download(result.to_frame(), f"channel_axes_channels_{layer}",
                        shown=screen_columns(result.to_frame(), CHANNEL_COLUMNS))
    downloads(f"channel_axes_{layer}_result", result=result)
    network_pruning_section(applied, [lay.name for lay in layers], decisions, status)

"""Channel Axes: does a channel matter for the task, and can its neighbours stand in for it? Two questions."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from fl_core.channelaxes.analysis import ChannelSettings, default_channel_layer
from fl_core.channelaxes.plots import (
    METRIC_LABELS,
    axes_scatter_figure,
    filter_figure,
    label,
    lesion_bars_figure,
    metric_correlation_figure,
    peer_support_figure,
    pruning_curves_figure,
    summary_table,
)
from fl_core.channelaxes.pruning import CRITERIA, PruningSettings
from fl_ui.cache import get_model
from fl_ui.channels import analysable_layers, channel_axes_result, data_source
from fl_ui.forms import settings_widgets
from fl_ui.state import current_selection, page_param, set_page_param, set_url_param, url_param
from fl_ui.widgets import downloads, heavy_result, plot_with_explanation, table_with_download, user_errors

# The page's pruning protocol before any choice: fewer criteria and no fine-tune, so the first view comes quickly.
PAGE_PRUNING = PruningSettings(criteria=("local", "target", "l1", "bn_gamma", "random"), finetune_steps=0)
LESION_NAMES = {"mean": "mean-ablation", "zero": "zero-ablation", "replace": "peer replacement"}

st.title("🧭 Channel Axes")
st.markdown(
    "Pruning tools give every channel one importance number. Safaai et al. (2026) argue that two different things "
    "hide in it: the **target axis** (how much a channel tells about the right answer) and the **local axis** (how "
    "much of the layer's input it captures and how much its neighbours overlap with it). A channel can be very "
    "informative and still removable because its peers cover it. Pick a layer, see every channel on both axes, "
    "then *test* removability directly: lesion it, let its peers stand in for it, prune.\n\n"
    "The paper's method section is not public: every definition here is this project's **proposed** one "
    "(reference: `channel_axes.md`).")


selection = current_selection()
with user_errors():
    if not selection.specs:
        st.info("Pick a model in the sidebar.")
        st.stop()
    c1, c2 = st.columns([1, 2])
    spec = c1.selectbox("Model", selection.specs, key="axes_model",
                        format_func=lambda s: get_model(s, selection.overrides_of(s)).label)
    overrides = selection.overrides_of(spec)
    loaded = get_model(spec, overrides)
    layers = analysable_layers(spec, overrides)
    names = [lay.name for lay in layers]
    wanted = page_param("axes_layer", default_channel_layer(layers))
    described = {lay.name: f"{lay.name} ({lay.kind}, {lay.out_channels} channels)" for lay in layers}
    layer = c2.selectbox("Layer", names, index=names.index(wanted) if wanted in names else names.index(
        default_channel_layer(layers)), format_func=described.get, key="axes_layer")
    set_page_param("axes_layer", layer)
    source = data_source(selection.images)
    st.caption("Data: " + ("the bundled photos cut into labelled 32×32 crops (calibration from the training crops, "
                           "evaluation from the held-out crops)" if source == "crops" else
                           f"the labelled ImageFolder tree {source}, split at random into calibration and "
                           "evaluation halves") + ". Change it in the sidebar.")

    with st.expander("⚙ Analysis settings"):
        s1, s2, s3 = st.columns(3)
        n_calibration = s1.number_input("Calibration images", 32, 20000, step=32,
                                        value=url_param("axes_ncal", 256, minimum=32, maximum=20000),
                                        help="Statistics, peer regressions and the recovery fine-tune.")
        n_evaluation = s2.number_input("Evaluation images", 16, 20000, step=16,
                                       value=url_param("axes_neval", 128, minimum=16, maximum=20000),
                                       help="Held-out images for lesions and pruning accuracy.")
        pruning = settings_widgets(
            PruningSettings, {"finetune_steps": "Recovery fine-tune steps"}, key="axes", container=s3,
            base=PAGE_PRUNING, options={"finetune_steps": {"max_value": 500, "step": 10}}, url=True)
        settings = settings_widgets(
            ChannelSettings, {"lesion_kinds": "Interventions"}, key="axes", base=ChannelSettings(layer=layer),
            options={"lesion_kinds": {"format_func": LESION_NAMES.get, "help": (
                "Each kind evaluates every channel's lesioned network on the evaluation images (batched: the layers "
                "before this one run once). On a CPU, large models are quicker with a late layer or fewer images.")}})
        pruning = settings_widgets(PruningSettings, {"criteria": "Pruning criteria"}, key="axes", base=pruning,
                                   options={"criteria": {
                                       "format_func": lambda c: f"{CRITERIA[c].label} ({CRITERIA[c].axis})"}})
        compare_init = st.checkbox("Compare with the initialization", value=bool(loaded.init_spec),
                                   disabled=not loaded.init_spec,
                                   help="Demo models know their initialization checkpoint.")
    set_url_param("axes_ncal", int(n_calibration))
    set_url_param("axes_neval", int(n_evaluation))
    settings = replace(settings, pruning=pruning if pruning.criteria else None)

    result = heavy_result("Channel axes", channel_axes_result, spec, overrides, source, int(n_calibration),
                          int(n_evaluation), settings, compare_init, selection.device)
    for warning in result.warnings:
        st.warning(warning)

    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Spearman ρ between the axes", f"{result.axes.spearman:+.2f}",
              help="Rank correlation of input capture I_X and task information I(ā;m) across the channels.")
    agreement = result.axes.agreement
    m2.metric("ARI of the groupings", f"{agreement.ari_median:+.2f}" if agreement else "–",
              help="Agreement of k-means groupings on each axis (0 = chance, 1 = identical).")
    m3.metric("Predicts lesions better", result.removability.better_axis_lesion or "–")
    m4.metric("Prunes better (AUC)", result.removability.better_axis_pruning or "–")
    st.caption(f"{result.site.n_channels} channels observed at `{result.site.activation}` "
               f"({result.positions} positions per image) on {result.n_calibration} calibration and "
               f"{result.n_evaluation} evaluation images; intact network: "
               f"{result.calibration_accuracy:.1%} calibration accuracy.")

    st.subheader("Both axes")
    metrics = [c for c in METRIC_LABELS if c in result.table and result.table[c].notna().any()]
    a1, a2, a3 = st.columns(3)
    x = a1.selectbox("Horizontal", metrics, index=metrics.index("input_capture"), format_func=label, key="axes_x")
    y = a2.selectbox("Vertical", metrics, index=metrics.index("task_info"), format_func=label, key="axes_y")
    colour = a3.selectbox("Colour", metrics, index=metrics.index("lesion_dloss") if "lesion_dloss" in metrics else 0,
                          format_func=label, key="axes_colour")
    plot_with_explanation(
        axes_scatter_figure(result, x, y, colour),
        "**How to read it.** Each dot is one channel. Left–right: **input capture**, how much of the variance of "
        "its input the filter picks up (1 = like a random direction). Up–down: **task information**, how much the "
        "channel's average activation tells about the network's confidence in the right class (nats). "
        "Colour: how much the loss rises when the channel is replaced by its average (**lesion**).\n\n"
        "If the two axes measured the same thing, the dots would line up. Hover over a dot to see its filter "
        "(spatial energy as blocks) and its numbers.",
        f"channel_axes_{layer}", frame=result.to_frame(), data=result.to_dict())

    with st.container():
        f1, f2 = st.columns([1, 2])
        ranked = result.table.sort_values("lesion_dloss", ascending=False, na_position="last")["index"].tolist()
        channel = f1.selectbox("Inspect channel", ranked, key="axes_channel",
                               help="Sorted by lesion effect, largest first.")
        row = result.table.set_index("index").loc[channel]
        f1.dataframe(pd.DataFrame({"quantity": [label(c) for c in row.index], "value": row.to_numpy()}),
                     hide_index=True, width="stretch")
        figure = filter_figure(result, int(channel))
        f2.plotly_chart(figure, width="stretch", key="axes_filter")
        downloads(f"filter_{layer}_{channel}", figure=figure)

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
        show_tuned = tuned and st.toggle("Show after the recovery fine-tune", value=False, key="axes_tuned")
        auc = pd.DataFrame([{"criterion": c.label, "axis": c.axis, "AUC": c.auc, "AUC fine-tuned": c.auc_finetuned}
                            for c in result.pruning.curves.values()])
        plot_with_explanation(
            pruning_curves_figure(result.pruning, finetuned=show_tuned),
            "Channels of this layer are removed **for real** (the network gets smaller) by each criterion, lowest "
            "score first, and the accuracy is measured on held-out images. Where a convolution reads the channels "
            "directly, it absorbs their average (so removal does not also shift the next layer's input). Every "
            "criterion removes the same number of channels at each point, so the FLOPs match. The **AUC** is the "
            "average accuracy over the range: higher = the criterion picked channels that were safer to remove. Blue "
            "curves use the local axis, red the target axis, dotted ones classic baselines." + (
                "" if tuned else " Set fine-tune steps in the settings to see how much a short retraining recovers."),
            f"pruning_{layer}", frame=auc, data=result.to_dict()["pruning"])
        skipped = [f"not available here: {k} ({v})" for k, v in result.pruning.skipped.items()]
        st.caption("Pruning: " + "; ".join([*result.pruning.notes, *skipped]) + ".")

    st.subheader("Which numbers go together")
    plot_with_explanation(
        metric_correlation_figure(result),
        "Spearman rank correlation between every per-channel quantity across this layer's channels. Look at the "
        "rows of the lesion and replacement costs: which score predicts them best?", f"metric_correlation_{layer}",
        frame=result.metric_correlations().reset_index(names="quantity"))

    st.subheader("Per-layer summary")
    table_with_download(summary_table(result), f"channel_axes_summary_{layer}")
    st.subheader("Every channel")
    table_with_download(result.to_frame().round(5), f"channel_axes_channels_{layer}")
    downloads(f"channel_axes_{layer}_result", data=result.to_dict())

"""Energy Profiles: how strongly a layer's filters respond to each principal component of image patches."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from fl_core.firstlayer.plots import (
    components_figure,
    correlation_figure,
    filters_figure,
    profile_figure,
    spectrum_figure,
)
from fl_core.firstlayer.settings import EnergySettings
from fl_core.io.layers import conv_inventory
from fl_ui.cache import energy_result, get_model
from fl_ui.forms import settings_widgets
from fl_ui.messages import show
from fl_ui.state import current_selection, page_model
from fl_ui.widgets import (
    card_rows,
    plot_with_explanation,
    preprocessing_caption,
    progress_bar,
    table_with_download,
    url_widget,
    user_errors,
    zoomable_tiles,
)

COMPONENTS_SHOWN = 32
FILTERS_SHOWN = 64



def summary_for_screen(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's headline numbers in five columns that fit a 1024-px projector, and the initialization subtracted
    when one was (the CSV has every column)."""
    shown = pd.DataFrame({"model": summary["model"], "theory r": summary["theory_r"].map("{:.3f}".format),
                          "r on logs": summary["theory_r_log"].map("{:.3f}".format),
                          "ηt": summary["eta_t"].map("{:.3g}".format),
                          "random init r": [f"{mean:.2f} ± {sd:.2f}" for mean, sd in
                                            zip(summary["random_init_r_mean"], summary["random_init_r_sd"])]})
    subtracted = summary["init_subtracted"].replace("", None)
    return shown.assign(**{"minus": subtracted}) if subtracted.notna().any() else shown


st.title("📈 Energy profiles")
st.markdown(
    "Chowers & Weiss (ICML 2023) found that the **first layer** of a CNN is nearly the same filter bank whatever "
    "the architecture, the seed, the data set and even the labels: its sensitivity to each principal component of "
    "image patches (its *energy profile*) follows a closed-form linear-systems formula. Pick models in the sidebar "
    "to compare them.")

selection = current_selection()
with user_errors():
    if not selection.specs:
        st.info("Pick at least one model in the sidebar.")
        st.stop()
    first = get_model(selection.specs[0], selection.overrides_of(selection.specs[0]))
    layers = conv_inventory(first)
    names = ["first"] + [lay.name for lay in layers if lay.kind != "first"]
    c1, c4 = st.columns([3, 1])  # the layer's long names first, the checkboxes' labels in a row of their own
    c2, c3 = st.columns(2)
    layer = url_widget("Layer", "first", key="energy_layer", param="layer", choices=names, container=c1,
                       format_func=lambda n: "first convolution (the paper's setting)" if n == "first"
                       else f"{n} (extension beyond the paper)")
    has_init = any(get_model(s).init_spec for s in selection.specs if s.startswith("demo:"))
    subtract = url_widget("Subtract initialization", False, key="init", container=c2, disabled=not has_init,
                          help="Analyse w − w_init (the authors' protocol). Demo models know their initialization.")
    log_y = url_widget("Log scale", True, key="log", container=c3)
    settings = settings_widgets(EnergySettings, {"seeds": "Random-init seeds"}, key="energy",
                                base=EnergySettings(layer=None if layer == "first" else layer), container=c4,
                                options={"seeds": {"min_value": 3, "max_value": 100}}, url=True)
    keys = selection.model_keys()
    if layer != "first":
        keys = tuple(k for k in keys if any(lay.name == layer for lay in conv_inventory(get_model(*k))))
        skipped = len(selection.specs) - len(keys)
        if skipped:
            show(st.caption, "{} selected model(s) have no layer named {} and are left out.", skipped, layer)
        st.warning("Deeper layers are an **extension beyond the paper**: patches are the layer's own inputs "
                   "(captured by hooks), and the linear theory was derived for the first layer only.")
    with progress_bar("Energy profiles") as progress:
        result = energy_result(keys, selection.images, settings, subtract, selection.device, progress=progress)

    show(st.caption, "Patch PCA from {} patches of {}.", f"{result.n_patches:,}", result.images)
    preprocessing_caption([get_model(*key) for key in keys])
    plot_with_explanation(
        profile_figure(result, log_y=log_y),
        "**How to read it.** Each patch of an image is a point in a space with one axis per pixel and colour. "
        "PCA finds the directions of largest variation: component 1 is the average brightness of the patch, the "
        "next ones are smooth gradients, the last ones are fine checkerboard-like detail. A filter's *energy* on a "
        "component is how strongly it responds to that pattern.\n\n"
        "**Dashed lines** are the linear theory θ fitted with one number (ηt, the learning rate × training time), "
        "drawn as a + b·θ: the straight-line rescaling of θ closest to the profile, which is exactly what the "
        "correlation r measures (r ignores scale and offset). Early in training the profile follows the patch "
        "spectrum (∝ λ); late it approaches whitening (∝ 1/λ). On the log scale, where a + b·θ would reach 0 or "
        "below, the line is drawn at 0.001 (the legend says when).\n\n"
        "**r and r on logs.** r compares the linear values, so the first few components, whose energies are far "
        "larger than the rest, decide most of it; r on logs compares the log values, where each component counts "
        "alike, so it tells how well the theory follows the small, high-frequency tail you see on the log plot.\n\n"
        "**The grey band** is random initialization: flat, because random filters respond equally to every "
        "direction. A trained first layer is far from it.",
        "energy_profiles", frame=result.to_frame(), result=result,
        symbols=("e_i", "λ_i", "θ", "a + b·θ", "ηt", "r", "r on logs", "w_t − w_0"))
    st.subheader("Summary")
    for column, m in zip(card_rows(len(result.models)), result.models):
        show(column.markdown, "**{}**", m.label)
        column.metric("theory r", f"{m.theory.r:.2f}",
                      help="Pearson r of the profile and the theory on linear values (the paper's measure).")
        column.metric("r on log values", f"{m.theory.r_log:.2f}" if math.isfinite(m.theory.r_log) else "—",
                      help="Pearson r of log e_i and log θ_i: every component counts alike.")
    st.caption("r is dominated by the first few components, which hold most of the energy; r on log values weighs "
               "every component alike, so a fit can score high on r and low on logs when it follows the first "
               "components but not the fine-detail tail.")
    table_with_download(result.summary_frame(), "energy_summary", shown=summary_for_screen(result.summary_frame()))
    if len(result.models) > 1:
        plot_with_explanation(
            correlation_figure(result),
            "Pearson correlation between two models' profiles. The paper finds > 0.98 between seeds and widths, "
            "about 0.9 between true and random labels, and about 0 between a trained layer and its own "
            "initialization. Blank cells: different patch sizes cannot be compared.",
            "energy_correlation", frame=result.correlation_frame().reset_index())
    plot_with_explanation(
        spectrum_figure(result),
        "λ_i is the standard deviation of the patches along component i. Natural images have a steeply falling "
        "spectrum: most of the variation is in the first few (smooth) components.", "patch_spectrum")
    st.subheader("Patch components and filters")
    pca = result.pcas[result.models[0].pca_key]
    components = pca.component_images()[:COMPONENTS_SHOWN]
    zoomable_tiles(components_figure(result, count=COMPONENTS_SHOWN), components,
                   [f"component {i + 1}" for i in range(len(components))],
                   "The patch PCA components as images (grey = 0). Low-frequency components come first.",
                   name="pca_components", key="component")
    labels = {m.spec: m.label for m in result.models}
    chosen = page_model("Filters of", list(labels), result.models[0].spec, key="filters_of", format_func=labels.get)
    model = next(m for m in result.models if m.spec == chosen)
    filters = model.filters[:FILTERS_SHOWN]
    zoomable_tiles(filters_figure(model, count=FILTERS_SHOWN), filters, [f"filter {i}" for i in range(len(filters))],
                   "The filters themselves (colour = RGB weight, grey = 0, each on its own scale). Trained first "
                   "layers show smooth colour blobs and oriented edges; random ones look like noise.",
                   name=f"filters_{model.label}", key="filter")

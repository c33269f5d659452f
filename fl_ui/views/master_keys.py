"""Master Keys: do a network's thousands of depthwise filters fall into a few kinds, and are they the published 8?"""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from fl_core.masterkeys.assignment import assignment_summary_frame
from fl_core.masterkeys.kmeans import DEFAULT_SWEEP
from fl_core.masterkeys.plots import (
    assignment_comparison_figure,
    centroids_vs_keys_figure,
    composition_figure,
    key_filters_figure,
    layer_counts_figure,
    members_figure,
    stage_counts_figure,
    sweep_figure,
)
from fl_core.masterkeys.scalespace import load_published_filters
from fl_core.masterkeys.settings import MasterKeySettings
from fl_ui.cache import get_model
from fl_ui.forms import settings_widgets
from fl_ui.masterkeys import (
    BASELINE_DEPTHWISE_SPEC,
    DEFAULT_DEPTHWISE_SPEC,
    bank_description,
    comparison_specs,
    depthwise_specs,
    get_bank,
    master_key_result,
    published_assignment,
)
from fl_ui.messages import show
from fl_ui.sidebar import spec_labels
from fl_ui.state import current_selection, page_model
from fl_ui.widgets import (
    plot_with_explanation,
    progress_bar,
    screen_columns,
    table_with_download,
    url_widget,
    user_errors,
    zoomable_tiles,
)

MEMBERS_SHOWN = 48
# The tables' columns on the page, in order and in words (the CSVs keep every column, the counts per key included).
BANK_COLUMNS = {"bank": "bank", "filters": "filters", "median_abs_cosine": "median |cos|",
                "per key": "filters per key 1 … 8"}
CLUSTER_COLUMNS = {"cluster": "cluster", "size": "filters", "share": "share", "mean_abs_cosine": "mean |cos|",
                   "master_key": "nearest key", "master_key_cosine": "its cos"}
LAYER_COLUMNS = {"layer": "layer", "stage": "stage", "filters": "filters", "norm_mean": "mean norm",
                 "dc_share": "dc share", "centre_share": "centre share", "constant": "constant"}


def with_key_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its counts per master key (``key_1`` … ``key_8``) in one text column, ``per key``."""
    keys = [column for column in frame if column.startswith("key_")]
    return frame.assign(**{"per key": [" ".join(map(str, row)) for row in frame[keys].itertuples(index=False)]})

st.title("🗝️ Master keys")
st.markdown(
    "Depthwise convolutions filter every channel with its own small k×k kernel, so a ConvNeXt or MobileNet has "
    "thousands of them. Babaiee et al. found that they come in **about 8 kinds** — Gaussian blobs, first "
    "derivatives (edges) shifted by half a pixel, centre-surround — the *master key filters*. Here the filters of "
    "a model are clustered without knowing those kinds (ignoring sign, scale and brightness offset), and each "
    "filter is also assigned to the nearest of the 8 published filters.")

selection = current_selection()
with user_errors():
    candidates = depthwise_specs(selection)
    spec = page_model("Depthwise model", candidates, DEFAULT_DEPTHWISE_SPEC, key="mk_model",
                      format_func=spec_labels(candidates).get,
                      help="Models from the sidebar that have depthwise convolutions, the real text-detector bank "
                           "that ships with FilterLens, and an offline ConvNeXt at random init (the baseline).")
    overrides = selection.overrides_of(spec)
    loaded = get_model(spec, overrides)
    bank = get_bank(spec, overrides)
    if description := bank_description(spec):
        show(st.info, "**{}**: {} The master-key papers studied ImageNet classifiers; these are trained filters of "
             "another task, so read the match as evidence from outside ImageNet. The random-init baseline ({}) is in "
             "the model menu and in the comparison below.", loaded.label, description, BASELINE_DEPTHWISE_SPEC)
    if loaded.random_init:
        show(st.info, "**{}** has random weights: its filters are noise, so expect no master keys — loose "
             "clusters and about 1/8 of the filters on every key. That is the baseline; for the real thing add "
             "trained depthwise weights in the sidebar (upload a MobileNet/ConvNeXt/EfficientNet checkpoint with "
             "its architecture, or `timm:convnext_tiny@pretrained` where the hub is reachable).", loaded.label)
    c1, c2, c3, c4 = st.columns(4)
    sizes = list(bank.kernel_sizes)
    kernel = url_widget("Kernel size", sizes[0], key=f"kernel_{spec}", param="kernel", choices=sizes, container=c1,
                        format_func=lambda s: f"{s}×{s} ({bank.kernel_sizes[s]:,})",
                        help="Filters of this size (their count in brackets) are clustered.")
    k = url_widget("Clusters k", MasterKeySettings.k, key="k", minimum=2, maximum=16, slider=True, container=c2,
                   help="The papers find 8.")
    tuned = settings_widgets(MasterKeySettings, {"restarts": "Restarts"}, key="mk", container=c3,
                             options={"restarts": {"max_value": 32}}, url=True)
    tuned = settings_widgets(MasterKeySettings, {"seed": "Seed"}, key="mk", base=tuned, container=c4,
                             options={"seed": {"max_value": 10_000}}, url=True)
    stage_labels = bank.stages
    chosen = url_widget("Stages", tuple(stage_labels), key=f"stages_{spec}", param="stages", omit_default=True,
                        choices=list(stage_labels), format_func=stage_labels.get)  # all, unless a link says
    sweep = url_widget(f"Elbow / silhouette sweep over k = {DEFAULT_SWEEP[0]}…{DEFAULT_SWEEP[-1]}", False,
                       key="sweep")
    if not chosen:
        st.info("Choose at least one stage.")
        st.stop()
    with progress_bar("Clustering") as progress:
        settings = dataclasses.replace(tuned, k=k, kernel_size=kernel, stages=tuple(chosen),
                                       sweep=DEFAULT_SWEEP if sweep else None)
        result = master_key_result(spec, overrides, settings, selection.device, progress=progress)
    assignment = result.published_assignment
    show(st.caption, "{}", f"{result.n_filters:,} {kernel}×{kernel} filters from {len(result.layer_statistics)} "
         f"layers ({result.n_constant} constant filters left out); mean |cos| to their centroid "
         f"{result.objective:.3f}. Reference filters: {assignment.templates}."
         + (f" Not analysed: {'; '.join(result.skipped)}." if result.skipped else ""))

    compared = comparison_specs(spec, kernel, overrides)
    if len(compared) > 1:
        st.subheader("Trained filters against random ones")
        assignments = {get_model(s, overrides if s == spec else ()).label:
                       published_assignment(s, overrides if s == spec else (), kernel) for s in compared}
        plot_with_explanation(
            assignment_comparison_figure(assignments),
            f"Every {kernel}×{kernel} filter of each bank assigned to the published key it fits best (any sign, "
            "scale and offset). **Median |cos|** is the typical similarity of a filter to its best key (1 = the same "
            "shape): trained filters reach far higher values than random ones, which spread over the 8 keys "
            "(about 1/8 each, dotted line) with a low similarity to all of them.", "master_keys_vs_baseline")
        counts = assignment_summary_frame(assignments)
        table_with_download(counts, "master_keys_vs_baseline_counts",
                            shown=screen_columns(with_key_counts(counts), BANK_COLUMNS))

    st.subheader("The 8 published master keys")
    plot_with_explanation(
        key_filters_figure(load_published_filters()),
        "These 8 filters (Babaiee et al. 2025, shipped with FilterLens, © Tony Lindeberg, CC BY 4.0) stand for "
        "all the depthwise filters of several ImageNet ConvNeXt-like networks. Red is positive, blue negative. "
        "1–4 are **edges between two pixels** (a derivative shifted by half a pixel), 5–6 **centred edges** in x "
        "and y, 7 a **sharpening** centre-surround and 8 a **blur**. The names are their idealized models "
        "(→ Scale-Space Models page).", "published_master_keys", symbols=("T", "σ", "δx, δy", "α∇²"))

    st.subheader("Clusters of this model's filters")
    plot_with_explanation(
        centroids_vs_keys_figure(result),
        "**In each pair, left**: the centre of a cluster found here (largest first; share of the filters in "
        "brackets). **Right**: the published filter most like it, with the cosine similarity in brackets (1 = same "
        "pattern; the sign is ignored because a filter and its negative do the same job when the next layer can flip "
        "it).\n\n"
        "The clustering compares *shapes*: each filter has its mean removed and is scaled to length 1, and a filter "
        "counts as close to a centre when |cos| is large. For a 3×3 network the right-hand filters are the "
        "idealized models at 3×3 instead of the 7×7 published filters.",
        "master_key_centroids", frame=result.to_frame(), result=result, symbols=("|cos|", "k"))
    st.caption("Clusters: size, share, tightness (mean |cos| of the members to the centre), nearest master key with "
               "its cosine; how many members each key claims is in the CSV (columns key and key_filters) and the "
               "figure below.")
    table_with_download(result.to_frame(), "master_key_clusters", shown=screen_columns(result.cluster_frame(),
                                                                                      CLUSTER_COLUMNS))
    plot_with_explanation(
        composition_figure(result),
        "Each row is a cluster, each column a published key: how many of the cluster's filters are nearest to "
        "that key. A cluster that matches a master key has one dark cell; random filters spread everywhere.",
        "cluster_composition", frame=result.to_frame())

    st.subheader("Counts per stage and layer")
    plot_with_explanation(
        stage_counts_figure(assignment),
        "Every filter is assigned to the published key it fits best, allowing any sign, scale and offset "
        "(the authors' rule: largest |⟨y − ȳ, x_k⟩|). Stages are groups of layers working at the same "
        "resolution (stage 0 = the largest feature maps). Trained networks use **blurs and centre-surrounds** "
        "more in some stages and **edges** more in others; random ones are flat.",
        "master_keys_per_stage", frame=assignment.stage_frame())
    plot_with_explanation(
        layer_counts_figure(assignment),
        "The same counts for each layer, as shares of the layer's filters (darker = more).",
        "master_keys_per_layer", frame=assignment.to_frame())

    if result.sweep is not None:
        plot_with_explanation(
            sweep_figure(result.sweep, k),
            "**Mean |cos|** rises with every extra cluster; where it stops rising fast (the *elbow*) more clusters "
            "add little. The **silhouette** compares how close a filter is to its own cluster with the next "
            "nearest one (1 = well separated, 0 = on a border).", "cluster_sweep", frame=result.sweep.to_frame())

    st.subheader("Inside a cluster")
    cluster = url_widget("Cluster", 1, key="cluster", choices=range(1, len(result.clusters) + 1),
                         format_func=lambda j: f"cluster {j} ({result.clusters[j - 1].size} filters)")
    members = result.members(cluster, MEMBERS_SHOWN)
    zoomable_tiles(members_figure(result, cluster, MEMBERS_SHOWN), members[:, None],
                   [f"member {i + 1}" for i in range(len(members))],
                   "Its best-fitting filters, each flipped to the centroid's sign. Tight clusters look alike.",
                   name=f"cluster_{cluster}_members", key="member")

    st.subheader("Per-layer statistics")
    st.caption("mean norm = average L2 length of the filters; dc share = share of a filter's energy in its mean; "
               "centre share = share in the centre tap; constant = filters with no shape (e.g. pruned). The CSV adds "
               "each layer's resolution, kernel and the norms' spread.")
    table_with_download(result.layer_frame(), "depthwise_layer_statistics",
                        shown=screen_columns(result.layer_frame(), LAYER_COLUMNS))
    if loaded.weights_only:
        st.caption("Weights-only file: stages come from layer names (stages.N / layerN / blocks.N) or widths.")

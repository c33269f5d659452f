"""Swap & Re-score: replace depthwise filters by idealized models and measure what the network loses."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fl_core.io.classes import map_tree_classes
from fl_core.io.sources import is_bundled
from fl_core.masterkeys.plots import layer_sweep_figure, reconstruction_figure, scores_figure
from fl_core.masterkeys.settings import (
    DEFAULT_BATCH_SIZE,
    FIT_METHOD_DESCRIPTIONS,
    REPLACEMENTS,
    LayerSweepSettings,
    RecoverySettings,
    RescoreSettings,
)
from fl_ui.cache import get_images, get_model
from fl_ui.forms import settings_widgets
from fl_ui.jobs import ScoringRequest
from fl_ui.masterkeys import (
    DEFAULT_DEPTHWISE_SPEC,
    DEFAULT_REPLACEMENTS,
    DEFAULT_SWAP_SPEC,
    RESCORE_IMAGES,
    RESCORE_K,
    RESCORE_SEED,
    bank_description,
    depthwise_specs,
    filter_swap,
    get_bank,
    layer_sweep_result,
    rescore_result,
    unswappable_reason,
)
from fl_ui.messages import show
from fl_ui.sidebar import spec_labels
from fl_ui.state import current_selection, latest_added_model, page_model, set_url_param, url_param
from fl_ui.widgets import (
    heavy_result,
    job_status_area,
    plot_with_explanation,
    preprocessing_caption,
    screen_columns,
    table_with_download,
    user_errors,
)

# The recovery settings the page offers: field, label and the page's bounds.
RECOVERY_WIDGETS = (("steps", "Distillation steps", {"max_value": 5000}),
                    ("calibration", "Calibration images", {"min_value": 2, "max_value": 5000}),
                    ("lr", "Step size", {"min_value": 1e-5, "max_value": 1.0, "format": "%.4f"}))
# The page's number inputs: URL key, label, default, bounds, help.
NUMBERS = (("sw_images", "Images (at most)", RESCORE_IMAGES, 1, 100_000, "Spread evenly over the classes."),
           ("sw_batch", "Batch size", DEFAULT_BATCH_SIZE, 1, 1024, None),
           ("sw_k", "Clusters (centroid)", RESCORE_K, 2, 32, "Clusters per kernel size of the 'centroid' replacement."),
           ("sw_seed", "Seed", RESCORE_SEED, 0, 10_000, "Seeds the random filters and the centroid clustering."))

# The score tables' columns on the page, in order and in words (the CSVs keep every column under its own name).
VARIANT_COLUMNS = {"method": "variant", "top1": "top-1", "top5": "top-5", "agreement": "agreement",
                   "kl": "KL (nats)", "relative_error": "‖W − Ŵ‖/‖W‖", "recovered_top1": "top-1, recovered",
                   "recovered_agreement": "agreement, recovered"}
SWEEP_COLUMNS = {"layer": "layer", "theory_share": "theory share", "recovered_theory_share": "theory share, recovered",
                 "swapped_top1": "top-1, swapped", "zeroed_top1": "top-1, zeroed"}
# Without labels the sweep's table shows agreement in the place of top-1 (its KLs are in the CSV).
SWEEP_AGREEMENT = {"swapped_agreement": "agreement, swapped", "zeroed_agreement": "agreement, zeroed"}
# What each replacement puts in place of a learned depthwise filter y (docs/methods.md, "Replacements").
REPLACED_BY = {
    **{method: f"the idealized model of the master key it is most like, σ fitted by {text}"
       for method, text in FIT_METHOD_DESCRIPTIONS.items()},
    "centroid": "the centroid of its own cluster (k-means of this network's filters by |cos|, k clusters)",
    "random": "a random filter of the same norm: the baseline, what no theory at all costs",
    "keep": "the filter itself: the control, which scores exactly as the original",
    "zero": "zeros: the layer's spatial filtering removed (the lesion control)",
}
COMPUTED_FROM = ("The CSV's *computed_from* is the first module each variant changes: its images ran from there on "
                 "the original's activation, so the layers before it were computed once for every variant.")


def replacements_table() -> pd.DataFrame:
    """Every replacement and what it puts in place of each filter: one visible table (the pills' tooltip only adds)."""
    return pd.DataFrame({"replacement": list(REPLACED_BY), "each learned filter y becomes": [
        f"{text}; as a·x + b, so it keeps y's sign, scale and offset" if name not in ("random", "keep", "zero")
        else text for name, text in REPLACED_BY.items()]}).set_index("replacement")


st.title("🔁 Swap & re-score")
status = job_status_area()  # the running job's progress and Cancel, in the first screen
st.markdown(
    "If depthwise filters are a handful of idealized kinds, swapping each for its idealized model (same sign, scale "
    "and offset, only the shape made perfect) should cost little. **The chart below** swaps every depthwise layer at "
    "once and counts how often the network still gives the original's first guess. That share is low, for the "
    "idealized models too: each layer's small error is the next layer's input, so errors **compound across "
    "layers**. **Recovery** (the papers' protocol: the rest of the network retrained around the frozen filters) "
    "restores much of it, and swapping **one layer at a time** (the sweep at the end) costs little.")
scores = st.container()  # the result first, the settings that change it below: on a 1024×768 projector the
# first screen shows the chart

selection = current_selection()
with user_errors():
    st.subheader("What to swap, where, on which images")
    candidates = depthwise_specs(selection, full_models_only=True, defaults=(DEFAULT_SWAP_SPEC,))
    spec = page_model("Depthwise model", candidates, DEFAULT_SWAP_SPEC, key="sw_model",
                      format_func=spec_labels(candidates).get,
                      help="Full models (architecture + weights) with depthwise convolutions: those in the sidebar "
                           "and the real ImageNet MobileNetV2 that ships with FilterLens.")
    if (latest := latest_added_model(selection)) and latest not in candidates:
        st.info(unswappable_reason(latest, selection.overrides_of(latest)))
    overrides = selection.overrides_of(spec)
    loaded = get_model(spec, overrides)
    bank = get_bank(spec, overrides)
    if description := bank_description(spec):
        show(st.caption, "**{}**: {}", loaded.label, description)
    preprocessing_caption([loaded])
    replacements = list(st.pills(
        "Replace the filters by", list(REPLACEMENTS), selection_mode="multi", key="sw_replacements",
        default=list(url_param("swaps", DEFAULT_REPLACEMENTS, choices=list(REPLACEMENTS))),
        help="\n".join(f"- **{name}**: {text}" for name, text in REPLACEMENTS.items())))
    set_url_param("swaps", tuple(replacements))
    st.table(replacements_table())
    stage_labels = bank.stages
    stages = list(st.pills("In stages", list(stage_labels), selection_mode="multi", format_func=stage_labels.get,
                           key="sw_stages", help="Stages are the groups of layers that work at one resolution.",
                           default=list(url_param("sw_stages", tuple(stage_labels), choices=list(stage_labels)))))
    set_url_param("sw_stages", tuple(stages))
    numbers = {}
    for column, (name, label, default, low, high, help_text) in zip(st.columns(4), NUMBERS):
        start = url_param(name, default, minimum=low, maximum=high)
        numbers[name] = int(column.number_input(label, low, high, start, key=name, help=help_text))
        set_url_param(name, numbers[name])
    max_images, batch_size, k, seed = numbers.values()
    if not replacements or not stages:
        st.info("Choose at least one replacement and one stage.")
        st.stop()
    recover = st.toggle(
        "Recover after swapping (the papers' protocol)", key="sw_recover", value=url_param("sw_recover", False),
        help="The papers do not score a swapped network as it is: they freeze the idealized filters and train the "
             "rest. Here each swapped copy is recovered on a calibration part of the images and every network is "
             "scored on the other, held-out part.")
    set_url_param("sw_recover", recover)
    recovery = None
    if recover:
        recovery = RecoverySettings(seed=seed)
        for column, (field, label, options) in zip(st.columns(3), RECOVERY_WIDGETS):
            recovery = settings_widgets(RecoverySettings, {field: label}, key="sw", base=recovery, container=column,
                                        options={field: options}, url=True)
        st.caption(
            "**What recovery does.** Swapping every layer at once adds up many small errors, and each layer's "
            "output no longer has the mean and spread the next layer was trained for. Recovery fixes what does not "
            "touch the idealized filters: (1) each BatchNorm's statistics are re-measured so that its output has the "
            "original network's mean and spread again; (2) the swapped network learns to copy the original's "
            "predictions (distillation: no labels needed) for the chosen number of steps, with the idealized "
            "filters **frozen**, so everything it gains is learned around them. The calibration images are never "
            "scored: accuracy is measured on the rest.")
    stage_key = tuple(stages)
    with st.spinner("Fitting each replacement to every depthwise filter…"):
        swaps = [filter_swap(spec, overrides, name, stage_key, k, seed, selection.device) for name in replacements]
    plot_with_explanation(
        reconstruction_figure(swaps),
        "How far each layer's filters move: ‖W − Ŵ‖/‖W‖ over the layer (0 = unchanged, about 1.4 for random "
        "filters of the same length). Idealized models keep each filter's sign, size and offset and change only "
        "its shape, so their error is the part of the filters that is *not* a master key.",
        "swap_reconstruction", frame=pd.concat([s.to_frame() for s in swaps], ignore_index=True))
    with st.expander("The same swaps on the real text-detector bank (reconstruction only)"):
        real_swaps = [filter_swap(DEFAULT_DEPTHWISE_SPEC, (), name, None, k, seed, selection.device)
                      for name in replacements]
        st.caption(f"{bank_description(DEFAULT_DEPTHWISE_SPEC)} The Master Keys and Scale-Space pages open on it; "
                   "it is weights only and not an ImageNet classifier, so its swaps cannot be re-scored here.")
        plot_with_explanation(
            reconstruction_figure(real_swaps),
            "How far each replacement moves the trained 7×7 filters of the text detector: for idealized models the "
            "error is the part of these real filters that is not a master key; random filters of equal norm are "
            "the ceiling.", "swap_reconstruction_real_bank",
            frame=pd.concat([s.to_frame() for s in real_swaps], ignore_index=True))

    images = get_images(selection.images, max_images)
    mapping = map_tree_classes(images.classes if images.labelled else (), loaded.num_classes, loaded.class_names,
                               images.labels if images.labelled else None)
    without_labels = ("The re-score shows how often each swapped network still predicts the **same class as the "
                      "original** (agreement) and how far its output probabilities move (**KL** divergence), which "
                      "need no labels.")
    if mapping.label_map is None and images.labelled:
        show(st.info, "**No accuracy on {}**: {} " + without_labels, images.description, " ".join(mapping.warnings))
    elif mapping.label_map is None:
        show(st.info, "**No accuracy on {}**: accuracy needs images labelled with the model's classes, and these "
             "carry no labels. " + without_labels + " For accuracy, choose *upload a labelled set* under *Images* in "
             "the sidebar: an archive (.zip, .tar.gz) of <wnid or class name>/<image> folders, or images with a CSV "
             "of labels.", images.description)
    else:
        show(st.caption, "{}. {}", images.description, mapping.how)
        for warning in mapping.warnings:
            show(st.warning, "{}", warning)
    if loaded.random_init:
        show(st.caption, "{} has random weights: its predictions are arbitrary (often one class for every image), so "
             "compare the variants by how far their outputs move (KL), not by accuracy.", loaded.label)

    key = ScoringRequest(spec, overrides, selection.images, max_images, RescoreSettings(
        replacements=tuple(replacements), stages=stage_key, k=k, seed=seed, batch_size=batch_size, recovery=recovery),
        selection.device)
    quick = is_bundled(selection.images) and recovery is None  # the 11 photos, no training: it runs at once
    with scores:
        if not (quick or rescore_result.cached(key)) and st.button("▶ Re-score", type="primary", key="sw_run"):
            st.session_state["sw_requested"] = key
        if not (quick or rescore_result.cached(key) or st.session_state.get("sw_requested") == key):
            st.caption(f"Scores {len(images)} images × {len(replacements) + 1} variants when you press Re-score"
                       + (f", after recovering each swap ({len(replacements)} recoveries)" if recovery else "")
                       + ". From a shell, `python -m fl_core rescore` does the same, on several GPUs with torchrun.")
        else:
            result = heavy_result("Re-scoring", rescore_result, key, status=status)
            after = ("the orange bars are each swap after recovery on "
                     f"{result.recovery.n_calibration} calibration images ({result.recovery.seconds:.0f} s); every bar "
                     f"is measured on the same {result.recovery.n_held_out} held-out images." if result.recovery else
                     "the papers recover the rest of the network around the frozen idealized filters: switch on "
                     "*Recover after swapping* to do the same.")
            kl = ", ".join(f"{v.method} {v.kl:.3f}" for v in result.swaps)
            how = ("**Top-1**: the labelled class is the model's first guess; **top-5**: among its five guesses. The "
                   "dotted line is the original network." if result.top1 is not None else
                   "**Agreement**: the share of images on which the swapped network's first guess is the original's. "
                   f"**KL** (nats, mean over the images) of the swapped network's output from the original's: {kl}. "
                   "Neither needs labels; accuracy does.")
            plot_with_explanation(
                scores_figure(result),
                f"{how} Swapping every layer at once compounds the small errors of each layer (one layer at a time: "
                f"the sweep below); {after}\n\n"
                f"{result.images_per_second:.1f} images/s × {len(result.swaps) + 1} variants on {result.device}.",
                "rescore_scores", frame=result.to_frame(), result=result,
                symbols=("KL", "‖W − Ŵ‖/‖W‖", "a·x + b", "|cos|", "k"))
            if all(v.kl < 1e-9 for v in result.swaps):
                st.warning("No swap changed the outputs: the depthwise filters of this network do not reach its output "
                           "yet. A random-init ConvNeXt, for one, multiplies every block by a layer scale of 10⁻⁶.")
            st.subheader("Original vs each swap")
            table_with_download(result.to_frame().dropna(axis=1, how="all"), "rescore_table",
                                shown=screen_columns(result.to_frame(), VARIANT_COLUMNS))
            st.caption(f"Each variant on {result.n_images} images. {COMPUTED_FROM}")

    st.subheader("How much of this network is theory? One layer at a time")
    st.markdown(
        "Swapping every layer at once mixes all the errors together. The sweep takes **one depthwise layer at a "
        "time**: swap only that layer and, as the control, **zero** only that layer (its spatial filtering deleted). "
        "A layer whose swapped bar stays near the original while its zeroed bar falls is a layer the theory "
        "explains; where both fall, the idealized models miss something the network needs.")
    choices = [r for r in REPLACEMENTS if r != "zero"]
    sweep_replacement = st.selectbox("Swap each layer by", choices, key="sw_sweep_replacement",
                                     index=choices.index(url_param("sw_sweep", "B", choices=choices)),
                                     format_func=lambda r: f"{r}: {REPLACEMENTS[r]}")
    set_url_param("sw_sweep", sweep_replacement)
    n_layers = len(bank.chosen(stages=stages))
    st.caption(f"{n_layers} layers × 2 variants + the original on each image"
               + (f", every variant recovered first ({2 * n_layers} recoveries)" if recovery else "") + ".")
    sweep_key = ScoringRequest(spec, overrides, selection.images, max_images, LayerSweepSettings(
        replacement=sweep_replacement, stages=stage_key, k=k, seed=seed, batch_size=batch_size, recovery=recovery),
        selection.device)
    at_once = quick or layer_sweep_result.cached(sweep_key)
    if not at_once and st.button("▶ Sweep the layers", key="sw_sweep_run"):
        st.session_state["sw_sweep_requested"] = sweep_key
    if at_once or st.session_state.get("sw_sweep_requested") == sweep_key:
        sweep = heavy_result("Sweeping the layers", layer_sweep_result, sweep_key, status=status)
        plot_with_explanation(
            layer_sweep_figure(sweep),
            "Each group of bars is one depthwise layer, in the order the image flows through the network. **Grey**: "
            "that layer's filters set to zero — how much the network needs the layer at all. **Blue**: that "
            f"layer's filters replaced by {sweep.replacement}"
            + (", **orange**: the same after recovery" if sweep.recovery else "")
            + ". The dotted line is the original network.\n\nThe table's *theory share* is 1 − KL(swapped) / "
            "KL(zeroed): the part of the layer's effect on the predictions that its idealized filters reproduce "
            "(1: all of it, 0: no better than deleting the layer).",
            "layer_sweep", frame=sweep.to_frame(), result=sweep)
        columns = SWEEP_COLUMNS if sweep.to_frame()["swapped_top1"].notna().any() else SWEEP_COLUMNS | SWEEP_AGREEMENT
        table_with_download(sweep.to_frame(), "layer_sweep_table", shown=screen_columns(sweep.to_frame(), columns))
        st.caption(COMPUTED_FROM)

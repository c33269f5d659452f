"""Home: what FilterLens shows, the selected models, and the first-layer story at a glance."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fl_core.firstlayer.energy import EnergySettings
from fl_core.firstlayer.plots import autocorrelation_figure, profile_figure
from fl_core.firstlayer.whitening import WhiteningSettings
from fl_core.io.images import bundled_licences
from fl_core.io.inspect import inspect_models
from fl_core.io.models import demo_manifest
from fl_ui.cache import energy_result, get_model, whitening_result
from fl_ui.state import current_selection
from fl_ui.widgets import plot_with_explanation, progress_bar, table_with_download, user_errors

st.title("🔍 FilterLens")
st.markdown(
    "**What do convolutional filters learn, and why?** FilterLens puts three lines of research into one lab: "
    "first-layer **energy profiles and whitening** (Chowers & Weiss, ICML 2023), the two axes of channel "
    "information (task relevance vs local replaceability), and master-key clustering of depthwise filters with "
    "idealized scale-space models. Pick models in the sidebar: shipped demos, any timm/torchvision architecture, "
    "or your own checkpoint.")

selection = current_selection()
with user_errors():
    if not selection.specs:
        st.info("Pick at least one model in the sidebar to begin.")
        st.stop()
    inspected = inspect_models([get_model(spec, selection.overrides_of(spec)) for spec in selection.specs])
    st.subheader("Selected models")
    table_with_download(inspected.summary_frame(), "selected_models")

    st.subheader("First layer at a glance")
    with progress_bar("Energy profiles") as progress:
        energy = energy_result(selection.model_keys(), selection.images, EnergySettings(), False, selection.device,
                               progress=progress)
    pairs = [(a, b) for a in energy.models for b in energy.models
             if a.spec != b.spec and get_model(a.spec).init_spec == b.spec]
    story = "".join(f"\n\n**{a.label} vs its own initialization: r = "
                    f"{energy.correlation[energy.models.index(a), energy.models.index(b)]:+.2f}.** "
                    "Training replaced the flat, random profile by a structured one." for a, b in pairs)
    fits = "; ".join(f"{m.label}: r = {m.theory.r:.2f}" for m in energy.models)
    plot_with_explanation(
        profile_figure(energy),
        "Each curve is a model's **energy profile**: how strongly its first-layer filters respond to each "
        "principal component of image patches (left = smooth patterns, right = fine detail). Dashed: the "
        "linear-systems theory, fitted with one parameter." + story + f"\n\nTheory fit: {fits}. The paper reports "
        "0.90–0.96 for trained networks and 0.10 ± 0.15 for random initialization. → *Energy Profiles* page.",
        "home_energy", frame=energy.to_frame(), data=energy.to_dict())
    with progress_bar("Whitening") as progress:
        whitening = whitening_result(selection.model_keys(), selection.images, WhiteningSettings(), selection.device,
                                     progress=progress)
    drops = whitening.decorrelation(10)
    verdicts = "".join(
        f"\n\n**{whitening.labels[spec]}**: " + (
            f"{drop:.2f} below RGB at 10 px: it whitens." if drop > 0.05 else
            "close to RGB: not whitened yet. Early in training the first layer follows the patch spectrum "
            "(a smoothing, low-pass bank); whitening needs much longer training (large ηt).")
        for spec, drop in drops.items())
    plot_with_explanation(
        autocorrelation_figure(whitening),
        "How correlated the first layer's responses are at two positions δ pixels apart. Fully trained networks "
        "**decorrelate** (whiten) the image: their curve drops below RGB and random filters, toward the ideal "
        "whitening bank (the paper: ≈ 0.2 at 10 px vs > 0.5 for RGB)." + verdicts + "\n\n→ *Whitening* page.",
        "home_whitening", frame=whitening.to_frame(), data=whitening.to_dict())

with st.expander("Demo models: how they were made"):
    st.dataframe(pd.DataFrame([{"name": e.name, "description": e.description,
                                "steps": e.provenance.get("trained_steps"),
                                "training s": e.provenance.get("training_seconds"),
                                "validation accuracy": e.provenance.get("val_accuracy"),
                                "seed": e.provenance.get("seed"), "script": e.provenance.get("script")}
                               for e in demo_manifest().values()]), hide_index=True)
with st.expander("Bundled photos and their licences"):
    st.dataframe(pd.DataFrame(bundled_licences()), hide_index=True)
    st.caption("They ship inside scikit-image, scikit-learn and matplotlib, so FilterLens needs no network.")

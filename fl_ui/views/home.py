"""Home: what FilterLens shows, the selected models, and the first-layer story at a glance."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fl_core.firstlayer.plots import autocorrelation_figure, profile_figure
from fl_core.firstlayer.settings import EnergySettings, WhiteningSettings
from fl_core.io.demos import demo_manifest
from fl_core.io.images import bundled_licences
from fl_core.io.inspect import inspect_models
from fl_ui.cache import energy_result, get_model, whitening_result
from fl_ui.messages import literal
from fl_ui.state import current_selection
from fl_ui.widgets import dashed, downloads, plot_with_explanation, preprocessing_caption, progress_bar, user_errors

WHITENING_DISTANCE = 10  # pixels: where Home states each model's whitening verdict, as the paper does
WHITENS_BY = 0.05  # how far below RGB (in C(δ)/C(0)) a model's curve must lie for Home to say that it whitens


def init_pairs(models: list) -> list[tuple]:
    """(trained, baseline) pairs of the selected models: a model and the initialization checkpoint it names."""
    return [(a, b) for a in models for b in models if a.spec != b.spec and get_model(a.spec).init_spec == b.spec]


def baseline_words(trained) -> str:
    """What a model's baseline is: its own initialization or a random init of its architecture."""
    return "its own initialization" if get_model(trained.spec).init_is_own else "a random init of the same architecture"


def whitening_verdict(spec: str, drop: float) -> str:
    """What a model's whitening curve says at :data:`WHITENING_DISTANCE`, in words (``drop`` = RGB − model)."""
    at = f"{abs(drop):.2f} {'below' if drop > 0 else 'above'} RGB at {WHITENING_DISTANCE} px"
    if get_model(spec).random_init:
        return (f"{at}: random filters pass the image's correlations through, as expected of a random init — the "
                "baseline a trained first layer is compared with.")
    if drop > WHITENS_BY:
        return f"{at}: it whitens."
    return f"{at}: on these images its responses are about as correlated as the pixels — it does not whiten them."


def summary_for_screen(summary: pd.DataFrame) -> pd.DataFrame:
    """The selected models in four narrow columns: name, what it is, parameters in millions, input."""
    kind = ["weights only" if w else "random init" if r else "trained"
            for w, r in zip(summary["weights only"], summary["random init"])]
    return pd.DataFrame({"model": summary["model"], "weights": kind,
                         "parameters": [f"{n / 1e6:.2f} M" for n in summary["parameters"]], "input": summary["input"]})


def demo_row(entry) -> dict:
    """One demo model's provenance as a table row."""
    made = entry.provenance
    return {"name": entry.name, "description": entry.description, "licence": made.get("licence"),
            "trained steps": made.get("trained_steps"), "validation accuracy": made.get("val_accuracy"),
            "made by": made.get("script")}


st.title("🔍 FilterLens")
st.markdown(
    "**What do convolutional filters learn, and why?** Three lines of research in one lab: first-layer **energy "
    "profiles and whitening** (Chowers & Weiss, ICML 2023), the two axes of channel information, and master-key "
    "filters of depthwise layers. Pick models in the sidebar: shipped demos, any timm/torchvision architecture, or "
    "your own checkpoint.")

selection = current_selection()
with user_errors():
    if not selection.specs:
        st.info("Pick at least one model in the sidebar to begin.")
        st.stop()
    models = [get_model(spec, selection.overrides_of(spec)) for spec in selection.specs]
    st.subheader("First layer at a glance")
    with progress_bar("Energy profiles") as progress:
        energy = energy_result(selection.model_keys(), selection.images, EnergySettings(), False, selection.device,
                               progress=progress)
    story = "".join(f"\n\n**{literal(trained.label)} against {baseline_words(trained)}**: the two profiles correlate "
                    f"at {energy.correlation[energy.models.index(trained), energy.models.index(init)]:+.2f} (Pearson "
                    "correlation of one profile with the other, not a theory fit). Training replaced the flat, random "
                    "profile by a structured one." for trained, init in init_pairs(energy.models))
    fits = "; ".join(f"{literal(m.label)} {m.theory.r:.2f}" for m in energy.models)
    plot_with_explanation(
        profile_figure(energy),
        "Each curve is a model's **energy profile**: how strongly its first-layer filters respond to each "
        "principal component of image patches (left = smooth patterns, right = fine detail). Dashed: the "
        "linear-systems theory θ, fitted with one parameter and drawn as a + b·θ." + story + "\n\n**Theory fit** "
        f"(Pearson r between each profile and its fitted theory): {fits}. The paper reports 0.90–0.96 for trained "
        "networks and 0.10 ± 0.15 for random initialization. → *Energy Profiles* page.",
        "home_energy", frame=energy.to_frame(), result=energy,
        symbols=("e_i", "λ_i", "θ", "a + b·θ", "ηt", "r", "r on logs"))
    with progress_bar("Whitening") as progress:
        whitening = whitening_result(selection.model_keys(), selection.images, WhiteningSettings(), selection.device,
                                     progress=progress)
    rgb = whitening.at(WHITENING_DISTANCE)["rgb"]
    verdicts = "".join(f"\n\n**{literal(whitening.labels[spec])}**: {whitening_verdict(spec, drop)}"
                       for spec, drop in whitening.decorrelation(WHITENING_DISTANCE).items())
    plot_with_explanation(
        autocorrelation_figure(whitening),
        "How correlated the first layer's responses are at two positions δ pixels apart. Fully trained networks "
        "**decorrelate** (whiten) the image: their curve drops below RGB and random filters, toward the ideal "
        f"whitening bank (the paper: ≈ 0.2 at 10 px vs > 0.5 for RGB). On these images the pixels' own "
        f"correlation at {WHITENING_DISTANCE} px is {rgb:.2f}." + verdicts + "\n\n→ *Whitening* page.",
        "home_whitening", frame=whitening.to_frame(), result=whitening, symbols=("C(δ)/C(0)", "ZCA"))

    st.subheader("Selected models")  # below the figures: on a 1024×768 projector the first screen shows a figure
    summary = inspect_models(models).summary_frame()
    st.dataframe(summary_for_screen(summary), hide_index=True, width="stretch")
    downloads("selected_models", frame=summary)
    preprocessing_caption(models)

with st.expander("Demo models: where they come from"):
    st.dataframe(dashed(pd.DataFrame([demo_row(entry) for entry in demo_manifest().values()])),
                 hide_index=True, width="stretch")
with st.expander("Bundled photos and their licences"):
    st.dataframe(pd.DataFrame(bundled_licences()), hide_index=True)
    st.caption("Copies of sample photos of scikit-image, scikit-learn and matplotlib ship with FilterLens: no network.")

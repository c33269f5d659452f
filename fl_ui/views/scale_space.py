"""Scale-Space Models: the 8 master keys as discrete Gaussian derivatives, their σ by each fitting method."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fl_core.masterkeys.fitting import model_fit_at
from fl_core.masterkeys.plots import (
    KEY_NAMES,
    cross_section_figure,
    key_filters_figure,
    model_vs_learned_figure,
    models_figure,
    sigma_by_method_figure,
)
from fl_core.masterkeys.scalespace import load_published_filters, normalize_learned_filter, spread_measures_frame
from fl_core.masterkeys.settings import FIT_METHOD_DESCRIPTIONS, FIT_METHODS
from fl_ui.masterkeys import (
    BASELINE_DEPTHWISE_SPEC,
    DEFAULT_DEPTHWISE_SPEC,
    bank_description,
    depthwise_specs,
    model_keys,
    model_scale_fit,
    published_scale_fit,
)
from fl_ui.messages import show
from fl_ui.sidebar import spec_labels
from fl_ui.state import current_selection, page_model, set_page_param, url_param
from fl_ui.widgets import plot_with_explanation, screen_columns, table_with_download, url_widget, user_errors

PUBLISHED = "published"
SIGMA_RANGE = (0.05, 3.0)


def slider_start(sigma: float) -> float:
    """A fitted σ where the σ slider can show it (inside :data:`SIGMA_RANGE`, to its 0.01 steps)."""
    return round(min(max(sigma, SIGMA_RANGE[0]), SIGMA_RANGE[1]), 2)


st.title("📐 Scale-space models")
st.markdown(
    "Lindeberg, Babaiee & Kiasari model each master key with the **discrete Gaussian** T(n; σ) = e^{−σ²} I_n(σ²) "
    "— the blur that scale-space theory says is the right one on a pixel grid — or a difference of it: half-pixel "
    "differences for keys 1–4, centred derivatives for 5–6, an impulse minus α times the Laplacian for 7 and the "
    "Gaussian itself for 8. A filter is then described by its **scale σ** (how wide it is, in pixels). Six ways of "
    "estimating σ (methods A–D) give different numbers: compare them here and try σ yourself.")

selection = current_selection()
with user_errors():
    models = [s for s in depthwise_specs(selection) if s in selection.specs]
    sources = list(dict.fromkeys([DEFAULT_DEPTHWISE_SPEC, PUBLISHED, *models, BASELINE_DEPTHWISE_SPEC]))
    labels = spec_labels([s for s in sources if s != PUBLISHED])
    source = page_model("Learned filters", sources, DEFAULT_DEPTHWISE_SPEC, key="ss_source",
                        format_func=lambda s: "the 8 published filters" if s == PUBLISHED
                        else f"per-key mean filters of {labels[s]}",
                        help="The mean filter of each master key in the real text-detector bank that ships with "
                             "FilterLens, the 8 published filters, a depthwise model chosen in the sidebar, or a "
                             "random-init ConvNeXt (the baseline: what fitting finds in noise).")
    wanted_method = url_param("method", "B", choices=FIT_METHODS)
    method = st.selectbox("Fitting method", FIT_METHODS, index=FIT_METHODS.index(wanted_method),
                          format_func=lambda m: f"{m}: {FIT_METHOD_DESCRIPTIONS[m]}", key="ss_method")
    set_page_param("method", method)
    if source == PUBLISHED:
        published = load_published_filters()
        learned = {i + 1: published[i] for i in range(len(published))}
        fits = {m: published_scale_fit(m) for m in FIT_METHODS}
    else:
        overrides = selection.overrides_of(source)
        fits = {m: model_scale_fit(source, overrides, m) for m in FIT_METHODS}
        learned = {f.index: model_keys(source, overrides, method)[f.index] for f in fits[method].filters}
    fit = fits[method]
    size = next(iter(learned.values())).shape[-1]
    show(st.caption, "Fitted: {}.", fit.source)
    if description := bank_description(source):
        show(st.info, "{} Each key's filter here is the mean shape of the bank's filters assigned to it; choose *the "
             "8 published filters* (ImageNet ConvNeXt-like networks) to compare, or the random-init {} for what the "
             "fits find in noise.", description, BASELINE_DEPTHWISE_SPEC)

    plot_with_explanation(
        sigma_by_method_figure(fits),
        "**A** turns the filter's spatial spread into σ with formulas for continuous Gaussians; **B** matches "
        "the same spread measured on the discrete model (the authors' default); **C** and **D** search the σ that "
        "minimises the l1 or l2 difference between model and filter, with σx ≠ σy (C1, D1) or σx = σy (C2, D2). "
        "Key 7 always gets a joint (σ, α) fit. The methods disagree most where a filter is lopsided (key 1) or "
        "has a noisy border.", "sigma_by_method",
        frame=pd.concat([f.to_frame() for f in fits.values()], ignore_index=True),
        symbols=("σ", "T", "δx, δy", "α∇²", "|cos|"))

    plot_with_explanation(
        models_figure(fit.models(size), fit),
        f"The idealized models at the σ of method {method}; the learned filters they model are below. Models "
        "follow the sign of Gaussian derivatives; the published keys 2 and 3 happen to have the opposite sign, "
        "which does not matter for swapping (the fitted amplitude may be negative).", f"models_{method}",
        frame=fit.to_frame(), result=fit)
    st.plotly_chart(key_filters_figure(learned, "Learned filters"), width="stretch", key="learned_filters")

    st.subheader("Spatial spread")
    st.caption("M = mean position and V = variance of |h| (y upward, pixels²) of the raw filter; V_w of the "
               "normalised filter weighted by |model at σ = 1| (which suppresses a noisy border; its means M_w are in "
               "the CSV). V_xy ≈ 0 supports separable models; the half-pixel keys 1–4 have means about half a pixel "
               "off centre.")
    spread = spread_measures_frame(learned)
    table_with_download(spread, f"spread_measures_{size}x{size}", shown=screen_columns(
        spread, {"index": "key"} | {c: c for c in spread if c not in ("index", "Mw_x", "Mw_y")}))

    st.subheader("Try σ yourself")
    index = url_widget("Master key", next(iter(learned)), key="key", choices=list(learned),
                       format_func=lambda i: KEY_NAMES[i - 1])
    fitted = next(f for f in fit.filters if f.index == index)
    s1, s2, s3 = st.columns(3)
    slider_key = f"{source}_{method}_{index}"  # sliders per fit: each starts at the link's σ, else at the fit's
    sigma = dict(minimum=SIGMA_RANGE[0], maximum=SIGMA_RANGE[1], slider=True, step=0.01, omit_default=True)
    sigma_x = url_widget("σ" if index == 7 else "σx", slider_start(fitted.sigma_x), key=f"sx_{slider_key}",
                         param="sx", container=s1, **sigma)
    sigma_y = sigma_x if index == 7 else url_widget("σy", slider_start(fitted.sigma_y), key=f"sy_{slider_key}",
                                                    param="sy", container=s2, **sigma)
    alpha = url_widget("α", round(fitted.alpha, 2), key=f"a_{slider_key}", param="alpha", minimum=0.0, maximum=2.0,
                       slider=True, step=0.01, omit_default=True, container=s3) if fitted.alpha is not None else None
    trial = model_fit_at(learned[index], index, sigma_x, sigma_y, alpha)
    m1, m2 = st.columns(2)
    m1.metric("l2 distance to the normalised filter", f"{trial.residual_l2:.3f}",
              delta=f"{trial.residual_l2 - fitted.residual_l2:+.3f} vs method {method}", delta_color="inverse")
    m2.metric("cosine similarity (centred)", f"{trial.cosine_similarity:+.3f}",
              delta=f"{abs(trial.cosine_similarity) - abs(fitted.cosine_similarity):+.3f} in |cos| vs method {method}")
    normalized = normalize_learned_filter(learned[index], index).normalized
    model = trial.model(size)
    plot_with_explanation(
        model_vs_learned_figure(normalized, model, f"{KEY_NAMES[index - 1]}: learned vs model at your σ"),
        "The learned filter is **normalised** first: derivative keys are divided by their response to a ramp, "
        "blur-like keys get their background level removed and are scaled to sum 1 — the normalisation the models "
        "have — so only shape and width are compared. Each panel has its own colour scale, its largest value in "
        "its title; the cross-sections below compare the heights. Move σ: too small makes the model a sharp spike, "
        "too large spreads it beyond the filter.", f"model_vs_learned_{index}")
    plot_with_explanation(
        cross_section_figure(normalized, model),
        "A slice through the centre along x and along y (y points up, as in the papers). Solid: learned, dashed: "
        "model.", f"cross_section_{index}")

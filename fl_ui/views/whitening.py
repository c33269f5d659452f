"""Whitening: how far apart two pixels of the first layer's response still look alike."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fl_core.firstlayer.plots import activation_maps_figure, autocorrelation_figure
from fl_core.firstlayer.settings import WhiteningSettings
from fl_core.firstlayer.whitening import REFERENCE_NAMES
from fl_ui.cache import activation_maps_of, get_images, get_model, whitening_result
from fl_ui.forms import settings_widgets
from fl_ui.state import current_selection, page_model
from fl_ui.widgets import (
    downloads,
    plot_with_explanation,
    preprocessing_caption,
    progress_bar,
    table_with_download,
    url_widget,
    user_errors,
)

MAX_IMAGE_CHOICES = 200

st.title("🌊 Whitening")
st.markdown(
    "Neighbouring pixels of natural images are strongly correlated. Chowers & Weiss show that gradient descent "
    "drives the first layer towards **whitening**: its responses at different positions become less correlated, "
    "so each response carries new information. Here C(δ) is the correlation between the first layer's "
    "(linear) responses δ pixels apart, summed over filters.")

selection = current_selection()
with user_errors():
    if not selection.specs:
        st.info("Pick at least one model in the sidebar.")
        st.stop()
    c1, c2 = st.columns(2)
    max_distance = url_widget("Largest distance δ (pixels)", WhiteningSettings().max_distance, key="dmax",
                              minimum=4, maximum=40, slider=True, container=c1)
    settings = settings_widgets(WhiteningSettings, {"seeds": "Random-init seeds"}, key="whitening",
                                base=WhiteningSettings(max_distance=max_distance), container=c2,
                                options={"seeds": {"min_value": 10, "max_value": 200}}, url=True)
    with progress_bar("Spatial autocorrelation") as progress:
        result = whitening_result(selection.model_keys(), selection.images, settings, selection.device,
                                  progress=progress)
    plot_with_explanation(
        autocorrelation_figure(result),
        "**How to read it.** Every curve starts at 1 (a response is perfectly correlated with itself) and falls "
        "with distance. **RGB** falls slowly: natural images are smooth. **Random filters** barely change that: "
        "they just blur. **Fully trained filters** fall faster: they emphasise what changes between neighbours, "
        "so distant responses are less redundant. The **ideal ZCA bank** (filters W = UΛ⁻¹Uᵀ built from the patch "
        "PCA) is the limit of full whitening: almost 0 beyond the filter size.\n\n"
        "The paper reports, at δ = 10 px: RGB > 0.5, random ≈ RGB, learned ≈ 0.2, perfect whitening ≈ 0. How far "
        "a layer has come depends on how long it trained: networks trained for a few CPU minutes (the tiny demos, "
        "the Training Lab's runs) are still in the early regime of the theory, where the layer follows the patch "
        "spectrum and smooths rather than whitens; a fully trained ImageNet network such as the shipped SqueezeNet "
        "(the default model) falls below RGB.",
        "whitening_curves", frame=result.to_frame(), result=result, symbols=("C(δ)/C(0)", "ZCA"))
    at = min(10, settings.max_distance)
    table = pd.DataFrame([{"curve": result.labels.get(name) or REFERENCE_NAMES.get(name, name),
                           f"C({at})/C(0)": round(value, 3)}
                          for name, value in result.at(at).items()])
    preprocessing_caption([get_model(*key) for key in selection.model_keys()])
    st.subheader(f"Values at δ = {at} px")
    table_with_download(table, "whitening_at_distance")

    st.subheader("Activation maps")
    st.caption("The first layer's linear responses to one image (red positive, blue negative). Whitened responses "
               "look like edge maps: flat regions give ~0, changes light up.")
    images = get_images(selection.images)
    m1, m2 = st.columns([3, 2])  # an uploaded file's name is long
    spec = page_model("Model", selection.specs, selection.specs[0], key="maps_model", container=m1,
                      format_func=lambda s: result.labels.get(s, s))
    image_name = url_widget("Image", images.names[0], key="maps_image", choices=images.names[:MAX_IMAGE_CHOICES],
                            container=m2)
    maps = activation_maps_of(spec, selection.overrides_of(spec), selection.images, image_name)
    figure = activation_maps_figure(maps.image, maps.maps, f"{maps.label}: first-layer responses to {image_name}")
    st.plotly_chart(figure, width="stretch")
    downloads(f"activation_maps_{image_name}", figure=figure)

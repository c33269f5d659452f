"""AppTest runs of the Home, Energy Profiles and Whitening pages with the demo model and a real fixture."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from fl_ui import DASHBOARD
from fl_ui.state import DEFAULT_MODELS
from fl_ui.testing import page_app, shown

from ..conftest import RESNET20_SPEC, TINY_MODELS
from .url_round_trip import assert_round_trip

APP = str(DASHBOARD)
"""The dashboard's main script, which ``streamlit run app.py`` serves (``app.py`` itself only defines the server)."""


def open_page(page: str, **query: str) -> AppTest:
    """The page behind the shared sidebar, run once."""
    app = page_app(page, **query)
    app.run()
    return app


def assert_clean(app: AppTest) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [shown(e) for e in app.error]


def test_app_entry_point_opens_on_home_with_the_sidebar() -> None:
    app = AppTest.from_file(APP, default_timeout=300)
    app.query_params["models"] = TINY_MODELS
    app.run()
    assert_clean(app)
    assert app.title[0].value.endswith("FilterLens")
    assert {w.key for w in app.sidebar.text_input} >= {"reg_name", "ckpt_arch"}
    assert app.session_state["selection"].specs == ("demo:tiny_vgg", "demo:tiny_vgg_init")


@pytest.mark.slow
def test_home_opens_on_a_real_imagenet_first_layer_beside_a_random_init_of_its_architecture() -> None:
    app = open_page("views/home.py")
    assert_clean(app)
    assert app.session_state["selection"].specs == DEFAULT_MODELS == ("demo:squeezenet1_0", "torchvision:squeezenet1_0")
    assert app.query_params["models"] == ",".join(DEFAULT_MODELS)
    assert len(app.get("plotly_chart")) >= 2
    text = " ".join(shown(m) for m in app.markdown)
    assert "squeezenet1_0 against a random init of the same architecture**: the two profiles correlate at" in text
    assert "not a theory fit" in text and "**Theory fit** (Pearson r between each profile and its fitted" in text
    assert "r = +" not in text  # a profile-to-profile correlation written like the theory r read as a second fit
    assert "its own initialization" not in text  # SqueezeNet's own initialization was never published
    # the verdicts' numbers are computed on the bundled photos (RGB − model C(δ)/C(0) at 10 px): the trained layer
    # lies more than WHITENS_BY (0.05, fl_ui/views/home.py) below RGB, so the page says that it whitens
    whitens = re.search(r"squeezenet1_0\*\*: (\d+\.\d\d) below RGB at 10 px: it whitens\.", text)
    assert whitens and float(whitens[1]) > 0.05, text
    assert re.search(r"random init\)\*\*: \d+\.\d\d (below|above) RGB at 10 px: random filters pass the image's "
                     r"correlations through", text), text
    assert "not whitened yet" not in text and "Early in training" not in text
    demos = app.dataframe[-2].value
    assert "BSD" in " ".join(map(str, demos["licence"]))


def test_home_says_a_demo_is_compared_with_its_own_initialization() -> None:
    app = open_page("views/home.py", models=TINY_MODELS)
    assert_clean(app)
    text = " ".join(shown(m) for m in app.markdown)
    assert "tiny_vgg against its own initialization**: the two profiles correlate at" in text
    assert app.query_params["models"] == TINY_MODELS


@pytest.mark.slow
def test_energy_page_subtracts_init_and_labels_deeper_layers() -> None:
    app = open_page("views/energy_profiles.py", models=TINY_MODELS)
    assert_clean(app)
    app.checkbox[0].check().run()
    assert_clean(app)
    summary = app.dataframe[0].value
    assert summary["minus"].iloc[0] == "demo:tiny_vgg_init"
    assert float(summary["theory r"].iloc[0]) > 0.85 and 0 < float(summary["r on logs"].iloc[0]) < 1
    assert any(m.label == "r on log values" for m in app.metric)
    app.selectbox(key="energy_layer").select("features.4").run()
    assert_clean(app)
    assert any("extension beyond the paper" in shown(w) for w in app.warning)
    assert app.query_params["layer"] == "features.4"


def test_url_restores_a_weights_only_model_with_preprocessing(resnet20) -> None:
    token = f"{RESNET20_SPEC}|size=32;crop=1"
    app = open_page("views/whitening.py", models=token)
    assert_clean(app)
    selection = app.session_state["selection"]
    assert selection.specs == (RESNET20_SPEC,)
    assert selection.overrides[RESNET20_SPEC] == {"input_size": 32, "crop_pct": 1.0}
    assert len(app.get("plotly_chart")) == 2  # curves + activation maps


@pytest.mark.slow
def test_adding_a_registry_architecture_from_the_sidebar_as_a_name_or_as_the_readmes_spec() -> None:
    app = open_page("views/home.py", models=TINY_MODELS)
    app.text_input(key="reg_name").input("resnet18")
    app.button(key="reg_add").click().run()
    assert_clean(app)
    assert "timm:resnet18" in app.session_state["selection"].specs
    app.radio(key="reg_library").set_value("torchvision")
    app.text_input(key="reg_name").input("timm:resnet10t")  # the README's form: its library wins
    app.button(key="reg_add").click().run()
    assert_clean(app)
    assert "timm:resnet10t" in app.session_state["selection"].specs


def test_the_architecture_box_reads_a_name_or_a_spec() -> None:
    from fl_ui.sidebar import registry_spec

    assert registry_spec("timm", "resnet18", False) == "timm:resnet18"
    assert registry_spec("torchvision", "timm:resnet18", False) == "timm:resnet18"
    spec = registry_spec("timm", " torchvision:squeezenet1_0@pretrained ", False)
    assert spec == "torchvision:squeezenet1_0@pretrained"
    assert registry_spec("timm", "convnext_atto", True) == "timm:convnext_atto@pretrained"
    assert registry_spec("cifar", "resnet56", False) == "cifar:resnet56"
    assert registry_spec("timm", "cifar:resnet56", False) == "cifar:resnet56"


def test_a_bad_registry_name_is_explained_once_and_the_selection_kept() -> None:
    app = open_page("views/home.py", models=TINY_MODELS)
    before = app.session_state["selection"].specs
    app.text_input(key="reg_name").input("not_a_net")
    app.button(key="reg_add").click().run()
    assert any("timm has no architecture 'not_a_net'" in shown(e) for e in app.error)
    assert app.session_state["selection"].specs == before
    app.run()  # the next page or rerun: the error does not follow the user around
    assert not any("timm has no architecture" in shown(e) for e in app.error)


@pytest.mark.slow
def test_a_link_restores_every_widget_of_the_energy_page() -> None:
    again = assert_round_trip("views/energy_profiles.py", {
        "init": True, "log": False, "energy_seeds": 4, "component": 3, "filters_of": "demo:tiny_vgg_init",
        "filter": 5, "energy_layer": "features.4"}, models="demo:tiny_vgg,demo:tiny_vgg_init")
    assert again.query_params["layer"] == "features.4" and again.query_params["log"] == "0"


@pytest.mark.slow
def test_a_link_restores_every_widget_of_the_whitening_page() -> None:
    again = assert_round_trip("views/whitening.py", {
        "dmax": 12, "whitening_seeds": 11, "maps_model": "demo:tiny_vgg_init", "maps_image": "coffee"},
        models="demo:tiny_vgg,demo:tiny_vgg_init")
    # the maps figure's own title (its layout's), not the first "title" of the spec, which the figure theme now
    # gives a colour bar before the layout
    titles = [json.loads(chart.proto.spec)["layout"].get("title", {}) for chart in again.get("plotly_chart")]
    assert "coffee" in " ".join(str(t.get("text", t) if isinstance(t, dict) else t) for t in titles)


@pytest.mark.slow
def test_a_model_that_came_with_a_link_stays_selected_on_the_next_page() -> None:
    """A page switch gives the next page a URL without the link's models: the session keeps what it picked."""
    app = open_page("views/home.py", models="demo:tiny_vgg,timm:resnet10t")
    assert app.session_state["selection"].specs == ("demo:tiny_vgg", "timm:resnet10t")
    for key in list(app.query_params):
        del app.query_params[key]
    app.run()
    assert_clean(app)
    assert app.session_state["selection"].specs == ("demo:tiny_vgg", "timm:resnet10t")

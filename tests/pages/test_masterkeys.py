"""AppTest runs of the Master Keys, Scale-Space Models and Swap & Re-score pages: offline defaults and real fixtures."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from fl_core.masterkeys.swap import REPLACEMENTS
from fl_ui.masterkeys import BASELINE_DEPTHWISE_SPEC, DEFAULT_DEPTHWISE_SPEC, DEFAULT_SWAP_SPEC
from fl_ui.testing import page_app, shown

from .url_round_trip import assert_round_trip


def open_page(page: str, **query: str) -> AppTest:
    app = page_app(f"views/{page}.py", **query)
    app.run()
    assert_clean(app)
    return app


def assert_clean(app: AppTest) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [shown(e) for e in app.error]


def mobilenet_token(mobilenet) -> str:
    """The MobileNetV2 fixture as a URL model token with its mean/std 0.5 preprocessing."""
    return f"{mobilenet.spec}|mean=0.5/0.5/0.5;std=0.5/0.5/0.5"


def text_of(app: AppTest) -> str:
    return " ".join(shown(e) for e in [*app.markdown, *app.caption, *app.info, *app.warning])


@pytest.mark.slow
def test_master_keys_opens_offline_on_the_real_text_detector_bank_beside_the_random_baseline() -> None:
    app = open_page("master_keys")
    assert app.selectbox(key="mk_model").value == DEFAULT_DEPTHWISE_SPEC
    text = text_of(app)
    assert "text detector" in text and "not an ImageNet classifier" in text and "random weights" not in text
    assert "published 7×7" in text and len(app.get("plotly_chart")) >= 7
    compared = app.dataframe[0].value.set_index("bank")
    assert list(compared["filters"]) == [384, 1840]  # PP-OCRv6 det small's 7×7 bank; ConvNeXt-atto's
    real, baseline = compared["median |cos|"]
    assert real > baseline + 0.3
    assert compared["filters per key 1 … 8"].str.split().map(len).eq(8).all()  # eight counts in a column that fits
    clusters = app.dataframe[1].value
    assert len(clusters) == 8 and clusters["filters"].sum() == 384
    app.slider[0].set_value(5).run()
    assert_clean(app)
    assert app.query_params["k"] == "5" and len(app.dataframe[1].value) == 5


@pytest.mark.slow
def test_master_keys_random_init_baseline_is_one_choice_away() -> None:
    app = open_page("master_keys")
    app.selectbox(key="mk_model").set_value(BASELINE_DEPTHWISE_SPEC).run()
    assert_clean(app)
    assert "random weights" in text_of(app)
    assert len(app.dataframe[0].value) == 2  # the comparison stays: baseline and real bank
    assert app.dataframe[1].value["filters"].sum() == 1840  # ConvNeXt-atto: 1840 depthwise 7×7 filters


@pytest.mark.slow
def test_master_keys_of_the_real_mobilenet_with_the_sweep(mobilenet) -> None:
    app = open_page("master_keys", models=mobilenet_token(mobilenet), mk_model=mobilenet.spec, sweep="1")
    assert app.selectbox(key="mk_model").value == mobilenet.spec
    text = text_of(app)
    assert "7,136 3×3 filters from 17 layers" in text and "idealized models (method B) at 3×3" in text
    assert "random weights" not in text
    stats = app.dataframe[-1].value
    assert len(stats) == 17 and set(stats["stage"]) == {0, 1, 2, 3, 4}
    titles = [chart.proto.spec for chart in app.get("plotly_chart")]
    assert any("Choosing k" in spec for spec in titles)


@pytest.mark.slow
def test_scale_space_opens_on_the_real_bank_with_the_published_filters_and_baseline_to_choose() -> None:
    app = open_page("scale_space")
    source = app.selectbox(key="ss_source")
    assert source.value == DEFAULT_DEPTHWISE_SPEC
    assert {"the 8 published filters", f"per-key mean filters of {BASELINE_DEPTHWISE_SPEC} (random init)"} <= set(
        source.options)
    assert "text detector" in text_of(app) and "384 7×7 filters" in text_of(app)
    assert list(app.dataframe[0].value["key"]) == list(range(1, 9))  # every key has members in the real bank


@pytest.mark.slow
def test_scale_space_page_shows_sigma_by_method_and_reacts_to_the_sigma_slider() -> None:
    app = open_page("scale_space", ss_source="published")
    assert "the 8 published filters" in text_of(app)
    assert len(app.get("plotly_chart")) == 5
    spread = app.dataframe[0].value
    assert list(spread["key"]) == list(range(1, 9))
    assert abs(spread["Vw_xx"].iloc[4] - 1.7324) < 1e-3  # B.4: weighted variance of key 5
    fitted = app.metric[0].value
    app.slider(key="sx_published_B_1").set_value(1.5).run()
    assert_clean(app)
    assert app.metric[0].value != fitted and float(app.metric[0].value) > float(fitted)
    app.selectbox(key="ss_method").set_value("D1").run()
    assert_clean(app)
    assert app.query_params["method"] == "D1"


@pytest.mark.slow
def test_swap_page_opens_on_the_real_mobilenet_with_the_agreement_and_kl_of_each_swap() -> None:
    app = open_page("swap_rescore")
    assert app.selectbox(key="sw_model").value == DEFAULT_SWAP_SPEC == "demo:mobilenet_v2"
    text = text_of(app)
    assert "No accuracy on 11 bundled photos" in text and "accuracy needs images labelled" in text
    assert "right class" not in text and "Top-1" not in text  # no accuracy words without labels
    assert "cannot be re-scored here" in text
    table, sweep = (frame.value for frame in app.dataframe[-2:])  # scored and swept at once: no button to press
    assert table["variant"].tolist() == ["original", "B", "centroid", "random"]
    assert "top-1" not in table and not table.isin(["None"]).any().any()
    assert table["agreement"].iloc[0] == 1.0
    kl = dict(zip(table["variant"], table["KL (nats)"]))
    assert kl["random"] > kl["B"] > 0  # idealized shapes move the outputs less than random filters of equal norm
    assert f"B {kl['B']:.3f}" in text  # the explanation states each swap's KL
    assert len(sweep) == 17 and (sweep["theory share"] <= 1).all()  # every depthwise layer swapped alone and zeroed
    assert list(sweep.columns[:2]) == ["layer", "theory share"]  # the sweep's answer beside each layer, in sight
    assert "computed_from" not in table and "*computed_from* is the first module" in text  # explained, for the CSV
    # the introduction says what this result shows and why, and every replacement is explained in a visible table
    assert "compound across layers" in text and "restores much" in text and "one layer at a time" in text
    explained = app.table[0].value
    assert list(explained.index) == list(REPLACEMENTS) and explained.iloc[:, 0].str.len().min() > 20
    assert "discrete spread" in explained.loc["B"].iloc[0] and "baseline" in explained.loc["random"].iloc[0]


@pytest.mark.slow
def test_swap_page_rescores_the_real_mobilenet_on_the_imagenet_sample(mobilenet, imagenet_sample) -> None:
    app = open_page("swap_rescore", models=mobilenet_token(mobilenet), sw_model=mobilenet.spec,
                    images=str(imagenet_sample), swaps="B,keep")
    assert "Folders are ImageNet-1k wnids" in text_of(app)
    app.number_input(key="sw_images").set_value(6).run()
    app.button(key="sw_run").click().run()
    assert_clean(app)
    table = app.dataframe[-1].value
    assert table["variant"].tolist() == ["original", "B", "keep"] and "Each variant on 6 images" in text_of(app)
    assert table["top-1"].iloc[0] >= 0.5 and table["top-1"].iloc[2] == table["top-1"].iloc[0]
    assert app.query_params["swaps"] == "B,keep"


@pytest.mark.slow
def test_a_shared_server_computes_the_depthwise_pages_defaults_before_it_listens(monkeypatch) -> None:
    """fl_ui.serve warms these caches, so the first visitors do not run the grid searches in page threads."""
    from fl_core.masterkeys.fitting import FIT_METHODS
    from fl_ui import masterkeys

    masterkeys.warm_default_results()

    def computed_again(*args, **kwargs):
        raise AssertionError("computed in the page thread: not warmed")

    for name in ("fit_model_master_keys", "fit_published_filters", "model_master_keys", "bank_assignment"):
        monkeypatch.setattr(masterkeys, name, computed_again)
    kernel = next(iter(masterkeys.get_bank(DEFAULT_DEPTHWISE_SPEC).kernel_sizes))
    for method in FIT_METHODS:
        assert masterkeys.model_scale_fit(DEFAULT_DEPTHWISE_SPEC, (), method).filters
        assert masterkeys.published_scale_fit(method).filters
        assert masterkeys.model_keys(DEFAULT_DEPTHWISE_SPEC, (), method)
    assert sum(masterkeys.published_assignment(DEFAULT_DEPTHWISE_SPEC, (), kernel).counts) == 384  # the real bank
    assert sum(masterkeys.published_assignment(BASELINE_DEPTHWISE_SPEC, (), kernel).counts) > 384


@pytest.mark.slow
def test_a_link_restores_every_widget_of_the_master_keys_page() -> None:
    assert_round_trip("views/master_keys.py", {
        "mk_model": BASELINE_DEPTHWISE_SPEC, "k": 5, "mk_restarts": 2, "mk_seed": 3,
        f"stages_{BASELINE_DEPTHWISE_SPEC}": (1, 2), "sweep": True, "cluster": 2, "member": 4},
        fixed=frozenset({f"kernel_{BASELINE_DEPTHWISE_SPEC}"}), models="demo:tiny_vgg")


@pytest.mark.slow
def test_a_link_restores_every_widget_of_the_scale_space_page() -> None:
    again = assert_round_trip("views/scale_space.py", {
        "ss_source": "published", "ss_method": "C1", "key": 7, "sx_published_C1_7": 1.2, "a_published_C1_7": 0.7},
        models="demo:tiny_vgg")
    assert again.query_params["sx"] == "1.2" and again.query_params["alpha"] == "0.7"
    fitted = page_app("views/scale_space.py", ss_source="published", method="C1", key="7")
    fitted.run()
    assert fitted.slider(key="sx_published_C1_7").value != 1.2 and "sx" not in fitted.query_params

"""AppTest of the Channel Axes page: the default view, one Apply per change with an estimate before it starts, layers
already analysed shown at once, the URL round trip of every widget, and a weights-only upload explained."""

from __future__ import annotations

import json

import pytest

from fl_core.channelaxes.analysis import ChannelSettings
from fl_core.channelaxes.pruning import PruningSettings
from fl_ui import channels
from fl_ui import memo as memo_module
from fl_ui.channels import channel_axes_result, default_request, network_pruning_result, network_request
from fl_ui.jobs import ChannelAxesRequest
from fl_ui.testing import shown

from ..conftest import RESNET20_SPEC, page_app
from .url_round_trip import assert_round_trip, widgets

PAGE = "views/channel_axes.py"
DEMO = "demo:tiny_vgg"
SMALL = {"models": DEMO, "axes_ncal": "64", "axes_neval": "32"}


def assert_clean(app) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [shown(e) for e in app.error]


def titles(app) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in app.get("plotly_chart")]


def one_line(titles: list[str]) -> list[str]:
    """Figure titles as one line each (long ones are wrapped with ``<br>``)."""
    return [title.replace("<br>", " ") for title in titles]


def texts(app) -> str:
    return " ".join(shown(e) for e in [*app.markdown, *app.caption, *app.info, *app.warning])


def demo_request(layer: str, **settings) -> ChannelAxesRequest:
    """The page's request for the tiny demo on 64 + 32 crops."""
    return ChannelAxesRequest(DEMO, (), "crops", 64, 32, ChannelSettings(layer=layer, **settings), True, "auto")


@pytest.mark.slow
def test_an_added_model_is_analysed_with_both_axes_lesions_and_pruning() -> None:
    app = page_app(PAGE, **SMALL)
    app.run()
    assert_clean(app)
    assert app.selectbox(key="axes_model").value == DEMO  # the model added to the sidebar, not the page's default
    assert app.query_params["axes_layer"] == "features.14"  # the last conv: quick, 128 channels
    metrics = {m.label: m.value for m in app.metric}
    assert -1 <= float(metrics["ρ between axes"]) <= 1
    verdict = metrics["Prunes better"]
    assert verdict in ("local", "target", "neither")
    assert ("baseline pruned best" in texts(app)) == (verdict == "neither")
    # the conv and where its channels are read are both named (not "features.14 … observed at features.16")
    assert "128 channels of **features.14**, observed after features.15 → features.16" in texts(app)
    shown = " ".join(titles(app))
    assert all(t in shown for t in ("local axis vs target axis", "Lesion and peer replacement", "Pruning features.14",
                                    "The paper's claims measured here"))
    assert "task information is at the noise floor for" in texts(app) and "on 64 images" in texts(app)
    claims = next(table.value for table in app.table if "verdict" in table.value)  # the paper's claims, a static
    # table whose sentences wrap on a projector, each claim with its verdict
    assert len(claims) == 5 and set(claims["verdict"]) <= {"reproduced", "partly", "not reproduced", "inconclusive",
                                                           "cannot be tested offline"}
    channels_table = app.dataframe[-1].value
    assert len(channels_table) == 128 and {"I_X", "I(ā;m)", "Δloss, lesion"} <= set(channels_table.columns)
    assert not channels_table.isin(["None"]).any().any()
    summary = app.dataframe[-2].value
    assert summary["quantity"].str.contains("at initialization").any()  # the demo knows its initialization
    auc = summary.set_index("quantity")["value"].filter(like="pruning AUC")
    assert len(auc) and auc.str.endswith(" pp").all()  # as the curves' legend and the verdict write it
    assert auc.index.str.endswith(f"(n = {SMALL['axes_neval']})").all()  # the evaluation set's size beside each AUC
    assert len(app.get("download_button")) >= 8
    assert channel_axes_result.cached(demo_request("features.14"))
    kernels = json.loads(app.get("plotly_chart")[1].proto.spec)
    assert kernels["data"][0]["type"] == "heatmap" and kernels["data"][0]["colorbar"]["title"]["text"]  # a colour bar
    assert "Channel" in kernels["layout"]["title"]["text"] and kernels["layout"]["height"] >= 300


@pytest.mark.slow
def test_a_new_layer_is_one_apply_with_an_estimate_and_analysed_layers_show_at_once() -> None:
    app = page_app(PAGE, axes_layer="features.11", **SMALL)
    app.run()
    assert_clean(app)
    assert app.selectbox(key="axes_layer").value == "features.11"
    assert len(app.dataframe[-1].value) == 128
    app.selectbox(key="axes_layer").select("features.7").run()
    assert_clean(app)
    assert not channel_axes_result.cached(demo_request("features.7"))  # nothing started yet
    pending = texts(app)
    assert "not applied yet" in pending and "features.7" in pending and " s (" in pending  # the estimate
    assert len(app.dataframe[-1].value) == 128  # the last applied result (features.11) stays on the page
    app.button(key="axes_apply").click().run()
    assert_clean(app)
    assert len(app.dataframe[-1].value) == 64 and app.query_params["axes_layer"] == "features.7"
    assert "not applied yet" not in texts(app)
    layer = app.selectbox(key="axes_layer")
    assert layer.format_func("features.11").startswith("✓ ") and "✓" not in layer.format_func("features.4")
    layer.select("features.11").run()  # analysed already: shown at once, no Apply
    assert_clean(app)
    assert len(app.dataframe[-1].value) == 128 and "not applied yet" not in texts(app)


@pytest.mark.slow
def test_every_widget_comes_back_from_the_url_and_reaches_the_job() -> None:
    query = {**SMALL, "axes_layer": "features.11", "axes_finetune_steps": "3", "axes_lesion_kinds": "mean",
             "axes_criteria": "local,random", "axes_init": "0", "axes_x": "peer_r2", "axes_y": "target_excess",
             "axes_colour": "peer_overlap", "axes_channel": "5", "axes_tuned": "1"}
    app = page_app(PAGE, **query)
    app.run()
    assert_clean(app)
    assert app.number_input(key="axes_finetune_steps").value == 3
    assert app.multiselect(key="axes_lesion_kinds").value == ["mean"]
    assert app.multiselect(key="axes_criteria").value == ["local", "random"]
    assert app.checkbox(key="axes_init").value is False
    assert [app.selectbox(key=k).value for k in ("axes_x", "axes_y", "axes_colour")] == [
        "peer_r2", "target_excess", "peer_overlap"]
    assert app.selectbox(key="axes_channel").value == 5 and app.toggle(key="axes_tuned").value is True
    pruning = PruningSettings(criteria=("local", "random"), finetune_steps=3)
    request = ChannelAxesRequest(DEMO, (), "crops", 64, 32, ChannelSettings(
        layer="features.11", lesion_kinds=("mean",), pruning=pruning), False, "auto")
    assert channel_axes_result.cached(request)
    for key, value in query.items():
        assert app.query_params[key] == value, key  # written back unchanged: a copied link restores the view


def test_a_weights_only_upload_is_explained_without_a_job(resnet20) -> None:
    app = page_app(PAGE, models=RESNET20_SPEC)
    app.run()
    assert_clean(app)
    assert app.selectbox(key="axes_model").value == RESNET20_SPEC
    info = " ".join(shown(i) for i in app.info)
    assert "this file holds only its weights" in info and "Architecture" in info
    text = texts(app) + " ".join(str(m.value) for m in app.metric)
    assert "None" not in text and "wnid" not in text
    assert not app.main.button and not app.get("plotly_chart")  # no Cancel button, no job


@pytest.mark.slow
def test_the_default_request_is_the_real_mobilenet_at_its_default_layer() -> None:
    request = default_request()
    assert request.spec == channels.DEFAULT_CHANNEL_SPEC == "demo:mobilenet_v2"
    assert request.settings.layer == "features.16.conv.2" and request.source == "crops"
    assert request.compare_init  # against a random init of the same architecture
    estimate = channels.estimated_duration(request)
    assert estimate.seconds > 0


@pytest.mark.slow
def test_a_server_that_computed_the_default_before_listening_shows_it_at_once(monkeypatch) -> None:
    """fl_ui.serve warms the default request; the first visit then finds it (the tiny demo stands in for MobileNet)."""
    monkeypatch.setattr(channels, "DEFAULT_CHANNEL_SPEC", DEMO)
    monkeypatch.setattr(channels, "DEFAULT_CALIBRATION", 64)
    monkeypatch.setattr(channels, "DEFAULT_EVALUATION", 32)
    channels.warm_default_result()

    def no_new_job():
        raise AssertionError("the page started a job: the server's warm-up computed another request")

    monkeypatch.setattr(memo_module, "heavy_engine", no_new_job)
    app = page_app(PAGE)  # the sidebar's default models: none that the page prefers to its own default
    app.run()
    assert_clean(app)
    assert app.selectbox(key="axes_model").value == DEMO
    assert "not applied yet" not in texts(app) and len(app.dataframe[-1].value) == 128
    basis = channels.estimated_duration(default_request(DEMO)).basis
    assert basis.startswith("at the speed of this server's last analysis of this model") and "as busy as" in basis


AUC_TEXT = r"-?\d+\.\d pp \[-?\d+\.\d, -?\d+\.\d\], n = 32"
"""An AUC in percentage points, its 95 % bootstrap interval and the evaluation images beside it (:func:`auc_text`)."""
NETWORK = {"axes_net": True, "axes_net_layers": ("features.4", "features.7", "features.11"),
           "axes_net_flops_targets": "0.1,0.2", "axes_net_recovery_steps": 2, "axes_net_recovered": False}
"""The several-layer control set by hand: three layers, two targets, a two-step recovery, the curves before it."""


@pytest.mark.slow
def test_layers_pruned_together_show_each_auc_with_its_interval_and_n_and_a_link_restores_them() -> None:
    app = page_app(PAGE, **SMALL)
    app.run()
    assert_clean(app)
    assert app.checkbox(key="axes_net").value is False  # off: the first view starts no whole-network pruning
    assert not any("layers pruned together" in title for title in titles(app))
    app.checkbox(key="axes_net").check().run()
    assert_clean(app)
    defaults = app.multiselect(key="axes_net_layers").value
    assert len(defaults) >= 2 and "axes_net_layers" not in app.query_params  # the library's choice, not frozen
    table = app.dataframe[-1].value
    assert list(table.columns) == ["criterion", "axis", "AUC before recovery", "AUC after recovery"]
    assert list(table["criterion"])[-1] == "local − target"  # claim 4's paired difference, on the same images
    for column in ("AUC before recovery", "AUC after recovery"):
        assert table[column].str.fullmatch(AUC_TEXT).all(), table[column]
    assert f"{len(defaults)} layers pruned together (after the 5-step recovery fine-tune)" in one_line(titles(app))
    assert "Claim 4, local − target:" in texts(app) and "n = 32" in texts(app)
    assert not table.isin(["None"]).any().any()
    assert not any("lost every image" in shown(w) for w in app.warning)  # the tiny demo's criteria separate
    again = assert_round_trip(PAGE, NETWORK, fixed=frozenset(widgets(app)) - set(NETWORK), **SMALL)
    request = network_request(demo_request("features.14"), NETWORK["axes_net_layers"],
                              PruningSettings(flops_targets=(0.1, 0.2), recovery_steps=2))
    assert network_pruning_result.cached(request)  # the link's layers, targets and recovery reached the job
    assert "3 layers pruned together (before recovery)" in one_line(titles(again))
    assert again.dataframe[-1].value["AUC before recovery"].str.fullmatch(AUC_TEXT).all()


@pytest.mark.slow
def test_flops_targets_outside_the_settings_bounds_are_refused_where_they_are_typed() -> None:
    app = page_app(PAGE, **SMALL, axes_net="1", axes_net_flops_targets="0.1,0.99")  # PruningSettings: at most 0.95
    app.run()
    assert not app.exception
    assert "axes_net_flops_targets" in " ".join(shown(w) for w in app.warning)  # the link's value, not used
    assert app.text_input(key="axes_net_flops_targets").value == "0.1,0.2,0.3"  # the page's default instead
    app.text_input(key="axes_net_flops_targets").input("0.2, lots").run()
    assert "FLOPs targets" in " ".join(shown(e) for e in app.error)  # said under the field, by its label
    assert app.query_params["axes_net_flops_targets"] == "0.1,0.2,0.3"  # the last valid targets still run
    assert app.dataframe[-1].value["AUC before recovery"].str.fullmatch(AUC_TEXT).all()

"""AppTest of the Channel Axes page: the default view (demo model on the bundled crops, offline) and a layer change."""

from __future__ import annotations

import json

import pytest

from fl_core.channelaxes.analysis import ChannelSettings
from fl_core.channelaxes.pruning import PruningSettings
from fl_ui.channels import channel_axes_result

from ..conftest import page_app

PAGE = "views/channel_axes.py"
SMALL = {"axes_ncal": "64", "axes_neval": "32"}


def assert_clean(app) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]


def job_was_keyed_by(app, settings: ChannelSettings) -> bool:
    """Whether the page's pooled job ran (and is cached) for the demo on 64 + 32 crops with ``settings``."""
    selection = app.session_state["selection"]
    spec = selection.specs[0]
    return channel_axes_result.cached(spec, selection.overrides_of(spec), "crops", 64, 32, settings, True,
                                      selection.device)


@pytest.mark.slow
def test_default_view_shows_both_axes_lesions_and_pruning_for_the_demo() -> None:
    app = page_app(PAGE, **SMALL)
    app.run()
    assert_clean(app)
    assert app.session_state["selection"].specs[0] == "demo:tiny_vgg"
    assert app.query_params["axes_layer"] == "features.14"  # the last conv: quick, 128 channels
    metrics = {m.label: m.value for m in app.metric}
    assert -1 <= float(metrics["Spearman ρ between the axes"]) <= 1
    assert metrics["Prunes better (AUC)"] in ("local", "target")
    charts = app.get("plotly_chart")
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in charts]
    assert any("local axis vs target axis" in t for t in titles)
    assert any(t.startswith("Lesion and peer replacement") for t in titles)
    assert any(t.startswith("Pruning features.14") for t in titles)
    channels = app.dataframe[-1].value
    assert len(channels) == 128 and {"input_capture", "task_info", "lesion_dloss"} <= set(channels.columns)
    summary = app.dataframe[-2].value
    assert summary["quantity"].str.contains("at initialization").any()  # the demo knows its initialization
    assert len(app.get("download_button")) >= 8
    page_pruning = PruningSettings(criteria=("local", "target", "l1", "bn_gamma", "random"), finetune_steps=0)
    assert job_was_keyed_by(app, ChannelSettings(layer="features.14", pruning=page_pruning))


@pytest.mark.slow
def test_layer_choice_is_remembered_in_the_url() -> None:
    app = page_app(PAGE, axes_layer="features.11", **SMALL)
    app.run()
    assert_clean(app)
    assert app.selectbox(key="axes_layer").value == "features.11"
    app.selectbox(key="axes_layer").select("features.7").run()
    assert_clean(app)
    assert app.query_params["axes_layer"] == "features.7"
    assert len(app.dataframe[-1].value) == 64


@pytest.mark.slow
def test_choices_reach_the_job_as_one_settings_object_and_fine_tune_steps_are_remembered() -> None:
    app = page_app(PAGE, axes_finetune_steps="3", **SMALL)
    app.run()
    assert_clean(app)
    assert app.number_input(key="axes_finetune_steps").value == 3
    app.multiselect(key="axes_lesion_kinds").set_value(["mean"])
    app.multiselect(key="axes_criteria").set_value([]).run()
    assert_clean(app)
    assert app.query_params["axes_finetune_steps"] == "3"
    assert job_was_keyed_by(app, ChannelSettings(layer="features.14", lesion_kinds=("mean",)))  # no criteria: no curves
    assert not any(json.loads(c.proto.spec)["layout"]["title"]["text"].startswith("Pruning")
                   for c in app.get("plotly_chart"))

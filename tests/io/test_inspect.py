"""inspect: each model's description and convolution table, one summary row per model."""

from __future__ import annotations

import json

from fl_core.io.inspect import inspect_models


def test_inspect_tables_list_every_convolution_and_summarise_each_model(demo) -> None:
    trained, init = demo
    result = inspect_models([trained, init])
    layers = result.to_frame()
    assert len(layers) == 2 * len(trained.conv_layers)
    assert set(layers["spec"]) == {trained.spec, init.spec} and layers["kind"].iloc[0] == "first"
    summary = result.summary_frame()
    assert list(summary["model"]) == [trained.label, init.label]
    assert list(summary["random init"]) == [False, True] and (summary["parameters"] > 0).all()
    assert summary["input"].iloc[0] == f"{trained.input_config.input_size} px, crop {trained.input_config.crop_pct:.3g}"
    assert json.loads(result.to_json())["models"][0]["layers"][0]["layer"] == layers["layer"].iloc[0]

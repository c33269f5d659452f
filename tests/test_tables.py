"""Every family's table has one long shape: the model's short label and its spec first, one row per item, so tables
of several models and families stack; the same model has the same label in all of them."""

from __future__ import annotations

import pandas as pd
import pytest

import fl_core
from fl_core.results import MODEL_COLUMNS

from .channelaxes.planted_nets import duplicate_world

SPEC = "torchvision:mobilenet_v2"


@pytest.mark.slow
def test_one_model_has_one_label_and_spec_first_in_every_familys_table() -> None:
    loaded = fl_core.load_model(SPEC)
    photos = fl_core.open_images("bundled", limit=2)
    frames = {
        "energy": fl_core.analyze_energy(loaded, photos, seeds=2).to_frame(),
        "whitening": fl_core.analyze_whitening(loaded, photos, seeds=2, max_distance=4).to_frame(),
        "masterkeys": fl_core.analyze_master_keys(loaded, k=4, restarts=1).to_frame(),
        "rescore": fl_core.rescore(loaded, photos, swaps=[]).to_frame(),
        "inspect": fl_core.inspect_models(loaded).to_frame(),
    }
    assert loaded.label == "mobilenet_v2 (random init)"
    for family, frame in frames.items():
        assert tuple(frame.columns[:2]) == MODEL_COLUMNS, family
        model_rows = frame[frame["spec"] == SPEC]
        assert len(model_rows) and set(model_rows["model"]) == {loaded.label}, family
    whitening = frames["whitening"]
    assert set(whitening["curve"]) == {"rgb", "zca", "random", "model"} and len(whitening) == 4 * 5
    assert set(whitening.loc[whitening["spec"] == "", "model"]) == {"RGB input", "random-init filters",
                                                                     "ideal ZCA whitening bank"}
    assert whitening.loc[whitening["curve"] == "random", "correlation_sd"].notna().all()
    stacked = pd.concat(frames.values(), ignore_index=True)
    assert set(stacked.loc[stacked["spec"] == SPEC, "model"]) == {loaded.label}


def test_channel_axes_rows_name_the_model_and_the_layer() -> None:
    loaded, data = duplicate_world(n_calibration=60, n_evaluation=30)
    result = fl_core.analyze_channels(loaded, data, layer="conv", cluster_seeds=2, pruning=None, device="cpu")
    frame = result.to_frame()
    assert list(frame.columns[:4]) == ["model", "spec", "layer", "index"]
    assert (frame["model"] == loaded.label).all() and (frame["layer"] == "conv").all() and len(frame) == len(
        result.table)

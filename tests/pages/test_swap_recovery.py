"""AppTest of the Swap & Re-score page's recovery option and per-layer sweep, on the offline default model."""

from __future__ import annotations

import pytest

from fl_ui.masterkeys import DEFAULT_SWAP_SPEC, get_bank
from fl_ui.widgets import MISSING_CELL

from .test_masterkeys import assert_clean, open_page, text_of
from .url_round_trip import assert_round_trip


@pytest.mark.slow
def test_swap_page_recovers_each_swap_on_held_out_images_and_sweeps_one_stage():
    app = open_page("swap_rescore", swaps="B")
    assert app.selectbox(key="sw_model").value == DEFAULT_SWAP_SPEC
    app.number_input(key="sw_images").set_value(6).run()
    app.toggle(key="sw_recover").set_value(True).run()
    app.number_input(key="sw_steps").set_value(1).run()
    app.number_input(key="sw_calibration").set_value(3).run()
    assert "What recovery does" in text_of(app)
    app.button(key="sw_run").click().run()
    assert_clean(app)
    table = app.dataframe[-1].value
    assert table["variant"].tolist() == ["original", "B"] and "Each variant on 3 images" in text_of(app)
    assert table["agreement, recovered"].iloc[0] == MISSING_CELL  # the original is not recovered: "—", not "None"
    assert float(table["agreement, recovered"].iloc[1]) >= 0
    assert "3 held-out images" in text_of(app) and "*computed_from* is the first module" in text_of(app)

    first_stage = min(get_bank(DEFAULT_SWAP_SPEC).stages)
    app.toggle(key="sw_recover").set_value(False).run()
    app.pills(key="sw_stages").set_value([first_stage]).run()  # the bundled photos, no recovery: swept at once
    assert_clean(app)
    sweep = app.dataframe[-1].value
    layers = [layer.name for layer in get_bank(DEFAULT_SWAP_SPEC).chosen(stages=[first_stage])]
    assert sweep["layer"].tolist() == layers
    assert (sweep["agreement, zeroed"] <= 1).all() and "theory share" in sweep and "KL, zeroed" not in sweep
    assert "theory share" in text_of(app)


@pytest.mark.slow
def test_a_link_restores_every_widget_of_the_swap_page() -> None:
    again = assert_round_trip("views/swap_rescore.py", {
        "sw_recover": True, "sw_replacements": ("B", "keep"), "sw_stages": (4,), "sw_images": 7, "sw_batch": 8,
        "sw_k": 5, "sw_seed": 3, "sw_steps": 2, "sw_calibration": 4, "sw_lr": 0.002, "sw_sweep_replacement": "C1"},
        fixed=frozenset({"sw_model"}))  # recovery on: nothing is scored before a button; one depthwise model offered
    assert again.selectbox(key="sw_model").value == DEFAULT_SWAP_SPEC
    assert again.query_params["swaps"] == "B,keep" and again.query_params["sw_sweep"] == "C1"

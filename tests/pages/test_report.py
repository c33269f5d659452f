"""AppTest of the Report page: the sidebar's model is reported with a preview and downloads; several checkpoints
(the selected models, in sidebar order) add the trajectory; the choice is kept in the URL."""

from __future__ import annotations

import pytest

from ..conftest import page_app
from .url_round_trip import assert_round_trip

PAGE = "views/report.py"


def assert_clean(app) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]


def chart_titles(app) -> str:
    return " ".join(chart.proto.spec for chart in app.get("plotly_chart"))


def test_the_selected_model_is_reported_with_a_preview_and_its_downloads() -> None:
    app = page_app(PAGE, models="demo:tiny_vgg")
    app.run()
    assert_clean(app)
    source = app.selectbox(key="report_source")
    assert source.value == "model:demo:tiny_vgg"
    assert any(option.startswith("Training Lab run lab_vgg_true_s0") for option in source.options)
    status = app.table[0].value["status"]
    assert status["First-layer energy profile"] == "done" and status["Weight statistics"] == "done"
    assert status["Trajectory over training"].startswith("skipped: One checkpoint")
    assert "Energy profile" in chart_titles(app) and "filter norms" in chart_titles(app)
    labels = [button.proto.label for button in app.get("download_button")]
    assert "⬇ HTML report" in labels and "⬇ JSON" in labels
    assert any("1 checkpoint(s)" in caption.value for caption in app.caption)


def test_the_selected_models_as_checkpoints_of_one_run_add_the_trajectory() -> None:
    app = page_app(PAGE, models="demo:tiny_vgg_init,demo:tiny_vgg", report="selected")
    app.run()
    assert_clean(app)
    assert app.selectbox(key="report_source").value == "selected" and app.query_params["report"] == "selected"
    assert "over the checkpoints" in chart_titles(app)
    assert any("2 checkpoint(s)" in caption.value for caption in app.caption)


@pytest.mark.slow
def test_a_shared_server_folder_of_checkpoints_is_reported_as_one_run(tmp_path, monkeypatch) -> None:
    from ..report.test_report import write_checkpoint

    monkeypatch.setenv("FL_DATA_ROOTS", str(tmp_path))
    folder = tmp_path / "run"
    folder.mkdir()
    for name, scale in (("ckpt_10", 1.0), ("ckpt_2", 0.2)):
        write_checkpoint(folder / f"{name}.safetensors", scale)
    app = page_app(PAGE, models="demo:tiny_vgg", report_dir=str(folder), report=f"dir:{folder}")
    app.run()
    assert_clean(app)
    assert app.selectbox(key="report_source").value == f"dir:{folder}"
    assert "over the checkpoints" in chart_titles(app)
    assert any("2 checkpoint(s)" in caption.value for caption in app.caption)

    refused = page_app(PAGE, models="demo:tiny_vgg", report_dir="/etc")
    refused.run()
    assert not refused.exception
    assert "outside the folders this server shares" in refused.error[0].value
    assert refused.selectbox(key="report_source").value == "model:demo:tiny_vgg"


@pytest.mark.slow
def test_a_link_restores_every_widget_of_the_report_page() -> None:
    again = assert_round_trip(PAGE, {"report_source": "selected", "report_seeds": 3, "report_trajectory_distance": 6},
                              fixed=frozenset({"report_dir"}), models="demo:tiny_vgg_init,demo:tiny_vgg")
    assert again.query_params["report_trajectory_distance"] == "6" and again.query_params["report"] == "selected"

"""AppTest of the Report page: the sidebar's model is reported with a preview and downloads; several checkpoints
(the selected models, in sidebar order) add the trajectory; the choice is kept in the URL."""

from __future__ import annotations

import pytest

from fl_core.report.build import FAMILY_SECTIONS, SECTIONS
from fl_core.report.html import HOW_TO_READ
from fl_ui.testing import shown

from ..conftest import page_app
from .url_round_trip import assert_round_trip

PAGE = "views/report.py"


def assert_clean(app) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [shown(e) for e in app.error]


def chart_titles(app) -> str:
    return " ".join(chart.proto.spec for chart in app.get("plotly_chart"))


@pytest.mark.slow
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
    for name in FAMILY_SECTIONS:  # every other registered family's section (tests/test_new_family.py adds one)
        assert status[SECTIONS[name]] == "done", name
        assert any(HOW_TO_READ[name] in markdown.value for markdown in app.markdown), name
    labels = [button.proto.label for button in app.get("download_button")]
    assert "⬇ HTML report" in labels and "⬇ JSON" in labels
    assert any("1 checkpoint(s)" in shown(caption) for caption in app.caption)


@pytest.mark.slow
def test_the_selected_models_as_checkpoints_of_one_run_add_the_trajectory() -> None:
    app = page_app(PAGE, models="demo:tiny_vgg_init,demo:tiny_vgg", report="selected")
    app.run()
    assert_clean(app)
    assert app.selectbox(key="report_source").value == "selected" and app.query_params["report"] == "selected"
    assert "over the checkpoints" in chart_titles(app)
    assert any("2 checkpoint(s)" in shown(caption) for caption in app.caption)


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
    assert any("2 checkpoint(s)" in shown(caption) for caption in app.caption)

    refused = page_app(PAGE, models="demo:tiny_vgg", report_dir="/etc")
    refused.run()
    assert not refused.exception
    assert "outside the folders this server shares" in shown(refused.error[0])
    assert refused.selectbox(key="report_source").value == "model:demo:tiny_vgg"


@pytest.mark.slow
def test_a_link_restores_every_widget_of_the_report_page() -> None:
    again = assert_round_trip(PAGE, {"report_source": "selected", "report_seeds": 3, "report_trajectory_distance": 6},
                              fixed=frozenset({"report_dir"}), models="demo:tiny_vgg_init,demo:tiny_vgg")
    assert again.query_params["report_trajectory_distance"] == "6" and again.query_params["report"] == "selected"


@pytest.mark.slow
def test_the_downloaded_report_names_an_upload_by_its_file_name_not_the_servers_folder(tmp_path, monkeypatch) -> None:
    import io
    import json

    import numpy as np
    import torch
    from PIL import Image

    from fl_core.io.checkpoints import save_state_dict
    from fl_core.report.build import build_report
    from fl_ui.report import shareable_html, shareable_json
    from fl_ui.uploads import UPLOADED_IMAGES, upload_store

    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    store = upload_store()
    save_state_dict({"stem.weight": torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(0))},
                    tmp_path / "net.pt")
    path, _ = store.add_checkpoint((tmp_path / "net.pt").read_bytes(), "my net (v2).pt")
    noise = np.random.default_rng(0).integers(0, 256, (3, 48, 64, 3), dtype=np.uint8)
    photos = []
    for number, pixels in enumerate(noise):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG")
        photos.append((f"photo{number}.png", buffer.getvalue()))
    images = store.add_images(photos)
    report = build_report(f"weights:{path}", str(images), seeds=2)
    assert str(store.root) in json.dumps(report.to_dict())  # what the worker computed on: the server's paths
    document, data = shareable_html(report), shareable_json(report)
    for text in (document, data):
        assert str(store.root) not in text and f"{path.parent.name}/" not in text and images.name not in text
    written = json.loads(data)
    assert written["final"] == written["models"][0]["spec"] == "weights:my_net_(v2).pt"
    assert written["settings"]["images"] == UPLOADED_IMAGES and UPLOADED_IMAGES in written["images"]
    embedded = document.split('id="filterlens-report">')[1].removesuffix("</script></body></html>")
    assert json.loads(embedded)["final"] == "weights:my_net_(v2).pt"
    assert "<td>weights:my_net_(v2).pt</td>" in document  # the table of what was loaded

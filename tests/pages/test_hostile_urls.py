"""The URL is untrusted input: hostile values of every query parameter, replayed against every page.

Each page is opened behind the real sidebar (AppTest) with the values a hostile round found breaking pages: NUL
bytes, over-long tokens, names longer than the file system allows, extreme preprocessing overrides, names in another
encoding, text where a number belongs, unknown choices, counts above a widget's maximum, and one model named a
thousand times. Every page must draw without Streamlit's exception box and without the generic "Something went
wrong" error; the selection's values fall back with a notice naming the parameter.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fl_core.settings import path_text_problem
from fl_ui.state import MAX_URL_MODELS
from fl_ui.testing import page_app, shown

from ..app_pages import app_pages

LONG_NAME = "a" * 300
"""A file name longer than any file system allows (255 bytes)."""

SELECTION = {
    "models": ",".join(["demo:tiny_vgg"] * 1000 + [
        "demo:tiny_vgg\x00", f"weights:/tmp/{LONG_NAME}.pt", "timm:" + "x" * 100_000, "weights:/srv/\ufffd\ufffd.pt",
        "demo:tiny_vgg_init|size=99999;crop=0.0001;mean=1e300/0/0;std=0/0/0", "not a spec", "demo:tiny_vgg|size=\x00"]),
    "images": "/tmp/photos\x00/x",
    "device": "quantum:7",
}
"""The sidebar's values: every model token but the (repeated) first is unusable or half usable."""

FOLDERS = ({"images": f"/tmp/{LONG_NAME}"}, {"images": "/tmp/\ufffd\ufffd"}, {"images": "9" * 5000})
"""Image sources naming no folder (a URL's undecodable bytes arrive as U+FFFD)."""

PAGE_VALUES = {
    "models": "demo:tiny_vgg",
    "dmax": "abc", "method": "Z", "report_dir": "/tmp/runs\x00", "report": "zzz", "k": "lots", "sweep": "maybe",
    "axes_ncal": "99999999", "axes_neval": "-1", "axes_layer": "x" * 5000, "layer": "\x00", "init": "2",
    "mk_model": "weights:/\x00", "ss_source": "demo:\x00", "sw_model": "zzz", "swaps": "Q,\x00", "lab": "nonsense",
    "step": "-5", "run": "../../etc/passwd", "energy_seeds": "1000000", "whitening_seeds": "0",
    "whitening_max_distance": "14000", "axes_finetune_steps": "1e12", "axes_net": "1", "axes_net_layers": "\x00,x",
    "axes_net_flops_targets": "0.1,nan,9", "axes_net_recovery_steps": "-3", "axes_net_recovered": "perhaps",
}
"""Page parameters (each page reads its own) with text where a number belongs, unknown choices and extremes, on
the small demo (the ImageNet defaults would make each page compute for minutes; the values are what is tested)."""

PAGES = [page.path for page in app_pages()]


def assert_no_exception_box(app, label: str) -> None:
    assert not app.exception, (label, [e.value for e in app.exception][:2])
    generic = [shown(e) for e in app.error if "Something went wrong" in shown(e)]
    assert not generic, (label, generic)


def notices(app) -> str:
    return " ".join(shown(w) for w in app.warning)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_hostile_url_values_never_break_a_page(page: str) -> None:
    for label, query in (("selection", SELECTION), ("page values", PAGE_VALUES)):
        app = page_app(page, **query)
        app.run()
        assert_no_exception_box(app, label)


@pytest.mark.slow
@pytest.mark.parametrize("page", ["views/home.py", "views/whitening.py"])
def test_image_sources_naming_no_folder_fall_back_to_the_bundled_photos(page: str) -> None:
    """Impossible names (too long, a part over 255 bytes) fall back with a notice; a possible but missing folder is
    kept (the page that reads it says there is no folder there)."""
    for query in FOLDERS:
        app = page_app(page, **query)
        app.run()
        assert_no_exception_box(app, query["images"][:20])
        impossible = path_text_problem(query["images"]) is not None
        assert (app.session_state["selection"].images == "bundled") == impossible
        assert ("'images'" in notices(app)) == impossible


@pytest.mark.slow
def test_the_selection_keeps_what_is_usable_and_names_what_it_dropped() -> None:
    app = page_app("views/home.py", **SELECTION)
    app.run()
    assert_no_exception_box(app, "selection")
    said = notices(app)
    assert "'models'" in said and "NUL" in said and "longer than file systems allow" in said
    assert "100,005 characters" in said and "not a model spec" in said
    assert "'images'" in said and "'device'" in said and "preprocessing" in said
    selection = app.session_state["selection"]
    kept = ("demo:tiny_vgg", "weights:/srv/\ufffd\ufffd.pt", "demo:tiny_vgg_init")  # a thousand repeats are one
    assert selection.specs == kept
    assert selection.overrides == {} and selection.images == "bundled" and selection.device == "auto"
    assert app.query_params["models"] == ",".join(kept)  # the URL now says what is shown


@pytest.mark.slow
def test_a_url_naming_more_models_than_a_page_compares_is_capped() -> None:
    demos = [f"timm:resnet{n}" for n in (10, 14, 18, 26, 34, 50, 101, 152, 200)]
    app = page_app("views/home.py", models=",".join(demos))
    app.run()
    assert_no_exception_box(app, "many models")
    assert app.session_state["selection"].specs == tuple(demos[:MAX_URL_MODELS])
    assert f"it names 9 models; the first {MAX_URL_MODELS} usable ones are shown" in notices(app)


@pytest.mark.slow
def test_a_folder_holding_names_in_another_encoding_is_listed(tmp_path: Path) -> None:
    """Files and class folders whose names are not UTF-8 are read and shown (undecodable bytes as U+FFFD)."""
    root = tmp_path / "photos"
    for folder in (os.fsencode(root / "cats"), os.fsencode(root) + b"/\xff\xfedogs"):
        os.makedirs(folder)
        buffer = io.BytesIO()
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(buffer, "PNG")
        Path(os.fsdecode(folder + b"/\xe9t\xe9.png")).write_bytes(buffer.getvalue())
    app = page_app("views/whitening.py", images=str(root))
    app.run()
    assert_no_exception_box(app, "non-UTF-8 names")
    names = app.selectbox(key="maps_image").options
    assert "cats/\ufffdt\ufffd.png" in names and "\ufffd\ufffddogs/\ufffdt\ufffd.png" in names


@pytest.mark.slow
def test_a_preprocessing_over_the_memory_budget_is_dropped_with_a_notice_before_any_work() -> None:
    """``|size=4096;crop=1`` resizes every image to 4,096² pixels (an analysis's batch of 8: 1.5 GiB); the link's
    model is kept with its own preprocessing and the page says why, instead of computing for minutes."""
    began = time.monotonic()
    app = page_app("views/home.py", models="demo:tiny_vgg|size=4096;crop=1").run()
    assert_no_exception_box(app, "size=4096")
    assert "its preprocessing input size 4096 with crop fraction 1" in notices(app)
    assert "over the 1.0 GiB an analysis may use (FL_ANALYSIS_MEMORY_MB)" in notices(app)
    assert app.session_state["selection"].specs == ("demo:tiny_vgg",)
    assert app.session_state["selection"].overrides == {} and app.query_params["models"] == "demo:tiny_vgg"
    assert time.monotonic() - began < 60  # the tiny demo at its own 32 px (2 idle cores: ~3 s)

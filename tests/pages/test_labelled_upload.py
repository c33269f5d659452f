"""A hosted user's labelled images: an archive uploaded through the sidebar gives top-1 / top-5 on Swap & Re-score;
a hostile one is refused there with the reason, and nothing of it is kept."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from fl_ui.sidebar import IMAGE_SOURCES
from fl_ui.testing import page_app, shown
from fl_ui.uploads import CONTENTS

from ..io.test_image_archives import HOSTILE, image_bytes

LABELLED = IMAGE_SOURCES[3]


def upload_labelled(app: AppTest, name: str, data: bytes, mime: str = "application/zip") -> AppTest:
    app.radio(key="img_choice").set_value(LABELLED).run()
    app.file_uploader(key="img_labelled_upload").set_value((name, data, mime))
    return app.run()


def sample_archive(imagenet_sample: Path, wnids: list[str]) -> bytes:
    """A zip of ``val/<wnid>/<photo>``, as a user zips a folder of ImageNet's validation layout."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for wnid in wnids:
            for photo in (imagenet_sample / wnid).iterdir():
                archive.write(photo, f"val/{wnid}/{photo.name}")
    return out.getvalue()


@pytest.fixture()
def uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "uploads"
    monkeypatch.setenv("FL_UPLOAD_DIR", str(folder))
    return folder


@pytest.mark.slow
def test_an_uploaded_imagefolder_archive_gives_top1_and_top5_on_swap_and_rescore(imagenet_sample: Path,
                                                                                   uploads: Path) -> None:
    """143 images, one per 7th class: three batches of 64 decoded in the engine's worker process (a daemonic process,
    where re-scoring once started DataLoader processes and failed every labelled upload of more than 64 images)."""
    wnids = sorted(p.name for p in imagenet_sample.iterdir() if p.is_dir())[:: 7]  # 143 classes, tench to ...
    app = page_app("views/swap_rescore.py", swaps="B,keep", sw_images="143").run()
    upload_labelled(app, "val.zip", sample_archive(imagenet_sample, wnids))
    assert not app.exception and not app.sidebar.error, [shown(e) for e in app.sidebar.error]
    [folder] = [p for p in uploads.iterdir() if p.name.startswith("images-")]
    assert sorted(p.name for p in folder.iterdir()) == [CONTENTS, *wnids]  # and the list of what was stored
    assert app.session_state["selection"].images == str(folder)
    text = " ".join(shown(c) for c in app.caption)
    assert "143 images" in text and "Folders are ImageNet-1k wnids" in text
    app.button(key="sw_run").click().run()
    assert not app.exception and not app.error, [shown(e) for e in app.error]
    table = app.dataframe[-1].value  # the screen's columns, in words
    assert table["variant"].tolist() == ["original", "B", "keep"]
    assert any("Each variant on 143 images" in shown(c) for c in app.caption)
    assert table["top-1"].iloc[0] >= 0.5 and table["top-5"].iloc[0] >= table["top-1"].iloc[0]  # the real MobileNetV2
    assert "No accuracy" not in " ".join(shown(i) for i in app.info)


def named_archive(imagenet_sample: Path, folders: dict[str, str]) -> bytes:
    """A zip of ``<folder>/<photo>`` with the folders named as a class would name them: ``{folder: wnid}``."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for folder, wnid in folders.items():
            for photo in (imagenet_sample / wnid).iterdir():
                archive.write(photo, f"{folder}/{photo.name}")
    return out.getvalue()


@pytest.mark.slow
def test_a_partly_matching_set_says_what_it_leaves_out_and_a_set_that_maps_to_nothing_says_why(
        imagenet_sample: Path, uploads: Path) -> None:
    partly = {"tench": "n01440764", "Goldfish": "n01443537", "dog": "n01484850", "cat": "n01491361",
              "car": "n01494475"}
    app = page_app("views/swap_rescore.py", swaps="B", sw_images="8").run()
    upload_labelled(app, "classes.zip", named_archive(imagenet_sample, partly))
    warnings = " ".join(shown(w) for w in app.warning)
    assert "3 of 5 images, in 3 of 5 folders ('car', 'cat', 'dog')" in warnings, warnings
    assert "2 of 5 classes are mapped" in " ".join(shown(c) for c in app.caption)
    assert "No accuracy" not in " ".join(shown(i) for i in app.info)

    upload_labelled(app, "others.zip", named_archive(imagenet_sample, {"dog": "n01484850", "cat": "n01491361"}))
    info = " ".join(shown(i) for i in app.info)
    assert "No accuracy on 2 images" in info and "no folder name ('cat', 'dog') is an ImageNet-1k wnid" in info
    assert "these have none" not in info and "Name each folder by" in info


@pytest.mark.slow
@pytest.mark.parametrize("case", ["zip bomb (ratio)", "zip member ../", "10^5 zip members", "tar symlink"])
def test_a_hostile_archive_is_refused_in_the_sidebar_and_nothing_is_kept(uploads: Path, case: str) -> None:
    name, build, message = HOSTILE[case]
    app = page_app("views/home.py", models="demo:tiny_vgg").run()
    upload_labelled(app, name, build())
    assert not app.exception
    errors = [shown(e) for e in app.sidebar.error]
    assert errors and name in errors[0] and re.search(message, errors[0]), errors
    assert not [p for p in uploads.rglob("*") if p.is_file() and p.suffix != ".lock"]
    assert app.session_state["selection"].images == "bundled"


@pytest.mark.slow
def test_swap_and_rescore_says_why_a_cifar_resnet_is_not_swapped(tmp_path: Path) -> None:
    for i in range(2):  # a folder of images: nothing is scored before Re-score is pressed
        (tmp_path / f"{i}.jpg").write_bytes(image_bytes(i))
    app = page_app("views/swap_rescore.py", models="demo:tiny_vgg,cifar:resnet20", images=str(tmp_path)).run()
    assert not app.exception and not app.error
    info = " ".join(shown(i) for i in app.info)
    assert "cifar resnet20 (random init) has no depthwise convolutions" in info and "nothing to swap" in info
    assert app.selectbox(key="sw_model").value == "demo:mobilenet_v2"

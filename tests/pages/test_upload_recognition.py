"""A checkpoint is recognised when it is added in the sidebar: akamaster's CIFAR ResNet-20 becomes cifar:resnet20 with
its 32-px preprocessing and the page it was added on switches to it; a state dict of an architecture FilterLens cannot
tell is added as weights only, and the sidebar says what runs on weights and how to name the architecture."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl_ui.channels import DEFAULT_CHANNEL_SPEC
from fl_ui.testing import page_app, shown

from ..conftest import CHECKPOINTS, require_fixture


def add_upload(app, checkpoint: Path):
    app.file_uploader(key="ckpt_upload").set_value((checkpoint.name, checkpoint.read_bytes(), "application/x"))
    return app.button(key="ckpt_add").click().run()


@pytest.fixture()
def uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    return tmp_path / "uploads"


@pytest.mark.slow
def test_an_uploaded_cifar_resnet_runs_as_one_and_the_page_it_was_added_on_shows_it(uploads: Path) -> None:
    checkpoint = require_fixture(CHECKPOINTS / "resnet20_cifar10.th")
    app = page_app("views/channel_axes.py", axes_ncal="64", axes_neval="32").run()
    assert app.selectbox(key="axes_model").value == DEFAULT_CHANNEL_SPEC
    add_upload(app, checkpoint)
    assert not app.exception and not app.sidebar.error, [shown(e) for e in app.sidebar.error]
    spec = app.session_state["selection"].specs[-1]
    assert spec.startswith("cifar:resnet20=") and spec.endswith("/resnet20_cifar10.th")
    [notice] = [shown(i) for i in app.sidebar.info]
    assert "resnet20_cifar10.th holds a CIFAR resnet20" in notice and "3 blocks in each" in notice
    assert "32 px" in notice and str(uploads) not in notice  # its preprocessing, and no server path
    assert app.selectbox(key="axes_model").value == spec  # the page switched to the upload
    assert any("resnet20_cifar10.th" in shown(c) and "32 px" in shown(c) for c in app.caption)


@pytest.mark.slow
def test_an_upload_of_an_architecture_it_cannot_tell_says_what_runs_on_weights_only(uploads: Path) -> None:
    checkpoint = require_fixture(CHECKPOINTS / "mobilenet_v2_imagenet.pt")
    app = page_app("views/energy_profiles.py", models="demo:tiny_vgg").run()
    add_upload(app, checkpoint)
    assert not app.exception and not app.sidebar.error
    assert app.session_state["selection"].specs[-1].startswith("weights:")
    [notice] = [shown(i) for i in app.sidebar.info]
    assert notice.startswith("mobilenet_v2_imagenet.pt is added as weights only: Energy Profiles")
    assert "Channel Axes and Swap & Re-score run the network" in notice and "torchvision:NAME=PATH" in notice
    app.run()
    assert not app.sidebar.info  # said once

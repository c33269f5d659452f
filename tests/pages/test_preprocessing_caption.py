"""Every page that feeds images to a model says where its preprocessing came from and where to change it (issue 36,
item 11: an uploaded MobileNetV2 ran with ImageNet's mean/std and nothing said so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl_ui.testing import page_app, shown

from ..conftest import MOBILENET_SPEC
from ..io.test_image_archives import image_bytes


def preprocessing_text(app) -> str:
    return " ".join(shown(c) for c in app.caption if shown(c).startswith("Preprocessing of **"))


@pytest.mark.slow
def test_an_uploaded_mobilenet_is_told_its_family_may_expect_mean_and_std_half(mobilenet, tmp_path: Path) -> None:
    for i in range(2):  # a folder of images: the page scores nothing before Re-score is pressed
        (tmp_path / f"{i}.jpg").write_bytes(image_bytes(i))
    app = page_app("views/swap_rescore.py", models=MOBILENET_SPEC, sw_model=MOBILENET_SPEC, images=str(tmp_path))
    app.run()
    assert not app.exception and not app.error
    text = preprocessing_text(app)
    assert "mean 0.485 0.456 0.406" in text and "torchvision's evaluation transform of mobilenet_v2" in text
    assert "mean and std 0.5" in text and "Preprocessing of uploaded weights" in text
    app = page_app("views/swap_rescore.py", models=f"{MOBILENET_SPEC}|mean=0.5/0.5/0.5;std=0.5/0.5/0.5",
                   sw_model=MOBILENET_SPEC, images=str(tmp_path)).run()
    assert "mean 0.5 0.5 0.5, std 0.5 0.5 0.5" in preprocessing_text(app) and "mean, std set by you" in \
        preprocessing_text(app)

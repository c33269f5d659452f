"""Shared fixtures: tiny deterministic models, the demo checkpoints, and the real third-party fixtures.

Real fixtures live in ``../shared/fixtures`` next to the checkout (``FL_FIXTURES`` overrides the location); tests
that use them skip with a clear reason when the folder is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from fl_core.io.images import bundled_images
from fl_core.io.models import load_model
from fl_ui.testing import page_app  # noqa: F401  (re-exported for page tests)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("FL_FIXTURES", REPO.parent / "shared" / "fixtures"))
CHECKPOINTS = FIXTURES / "checkpoints"
IMAGENET_SAMPLE = FIXTURES / "imagenet-sample"

SQUEEZENET_SPEC = f"torchvision:squeezenet1_0={CHECKPOINTS / 'squeezenet1_0_imagenet.pt'}"
MOBILENET_SPEC = f"torchvision:mobilenet_v2={CHECKPOINTS / 'mobilenet_v2_imagenet.pt'}"
MOBILENET_OVERRIDES = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
RESNET20_SPEC = f"weights:{CHECKPOINTS / 'resnet20_cifar10.th'}"
RESNET20_OVERRIDES = {"input_size": 32, "crop_pct": 1.0}


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real fixture {path} is absent (set FL_FIXTURES or place ../shared/fixtures next to the repo)")
    return path


@pytest.fixture(scope="session")
def imagenet_sample() -> Path:
    """The 1000-image, one-per-class ImageNet sample tree (ImageFolder layout)."""
    return _require(IMAGENET_SAMPLE)


@pytest.fixture(scope="session")
def squeezenet():
    """Real SqueezeNet 1.0 ImageNet weights as ``torchvision:squeezenet1_0=PATH``."""
    _require(CHECKPOINTS / "squeezenet1_0_imagenet.pt")
    return load_model(SQUEEZENET_SPEC)


@pytest.fixture(scope="session")
def mobilenet():
    """Real ImageNet MobileNetV2 (17 depthwise 3×3 layers), preprocessing mean/std 0.5 as its README says."""
    _require(CHECKPOINTS / "mobilenet_v2_imagenet.pt")
    return load_model(MOBILENET_SPEC, input_overrides=MOBILENET_OVERRIDES)


@pytest.fixture(scope="session")
def resnet20():
    """Real CIFAR-10 ResNet-20 (akamaster) loaded weights-only, 32-px input."""
    _require(CHECKPOINTS / "resnet20_cifar10.th")
    return load_model(RESNET20_SPEC, input_overrides=RESNET20_OVERRIDES)


@pytest.fixture(scope="session")
def demo():
    """The shipped demo model (trained) and its initialization."""
    return load_model("demo:tiny_vgg"), load_model("demo:tiny_vgg_init")


@pytest.fixture(scope="session")
def photos():
    """The bundled natural photos (offline)."""
    return bundled_images()


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests are slow tests too: ``-m "not slow"`` is the fast loop (DEVELOPING.md)."""
    for item in items:
        if item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.slow)

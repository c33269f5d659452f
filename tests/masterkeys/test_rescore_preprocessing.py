"""Registry models are preprocessed as their libraries evaluate them: timm's test-size config and crop modes,
torchvision's weights transforms; user overrides still win."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fl_core.io.images import input_transform, scaled_input, scaled_size
from fl_core.io.models import load_model
from fl_core.io.preprocessing import CROP_MODES, InputConfig


def _noise_image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


SHAPES = [(300, 200), (150, 410), (97, 97), (61, 300)]


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "size", "crop", "resize"), [
    ("timm:convnext_atto", 288, 0.95, 303),  # timm validate.py: test_input_size 288, test_crop_pct 0.95
    ("timm:resnet50", 288, 1.0, 288),  # resnet50.a1_in1k: test size 288, test crop 1.0
])
def test_timm_models_get_timms_evaluation_config(spec: str, size: int, crop: float, resize: int) -> None:
    cfg = load_model(spec).input_config
    assert (cfg.input_size, cfg.crop_pct, cfg.crop_mode, cfg.interpolation) == (size, crop, "center", "bicubic")
    assert cfg.resize_size == resize


@pytest.mark.slow
def test_timm_crop_mode_comes_from_the_pretrained_config() -> None:
    cfg = load_model("timm:convnext_tiny.fb_in22k_ft_in1k_384").input_config
    assert (cfg.input_size, cfg.crop_pct, cfg.crop_mode) == (384, 1.0, "squash")


@pytest.mark.slow
def test_user_overrides_win_over_the_registry_config() -> None:
    overrides = {"input_size": 224, "crop_pct": 0.875, "crop_mode": "border", "interpolation": "bilinear"}
    cfg = load_model("timm:convnext_atto", input_overrides=overrides).input_config
    assert (cfg.input_size, cfg.crop_pct, cfg.crop_mode, cfg.interpolation) == (224, 0.875, "border", "bilinear")


@pytest.mark.slow
def test_torchvision_models_take_their_weights_transforms() -> None:
    import torchvision

    loaded = load_model("torchvision:resnet50")
    preset = torchvision.models.ResNet50_Weights.DEFAULT.transforms()
    cfg = loaded.input_config
    assert (cfg.input_size, cfg.resize_size, cfg.interpolation, cfg.crop_mode) == (224, 232, "bilinear", "center")
    for width, height in SHAPES:
        image = _noise_image(width, height)
        torch.testing.assert_close(input_transform(cfg)(image), preset(image), atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", CROP_MODES)
@pytest.mark.parametrize("crop", [0.875, 0.95, 1.0])
def test_input_transform_is_timms_create_transform(mode: str, crop: float) -> None:
    from timm.data import create_transform

    cfg = InputConfig(input_size=96, crop_pct=crop, interpolation="bicubic", crop_mode=mode, mean=(0.5, 0.4, 0.3),
                      std=(0.2, 0.25, 0.3))
    reference = create_transform(input_size=(3, 96, 96), crop_pct=crop, crop_mode=mode, interpolation="bicubic",
                                 mean=cfg.mean, std=cfg.std)
    for seed, (width, height) in enumerate(SHAPES):
        image = _noise_image(width, height, seed)
        ours = input_transform(cfg)(image)
        assert ours.shape == (3, 96, 96)
        torch.testing.assert_close(ours, reference(image), atol=1e-6, rtol=0)


def test_border_mode_keeps_the_whole_image_and_pads_with_the_mean_colour() -> None:
    cfg = InputConfig(input_size=64, crop_pct=1.0, crop_mode="border", mean=(0.5, 0.4, 0.3), std=(1, 1, 1))
    x = input_transform(cfg)(_noise_image(128, 32))  # resized to 64×16: 24 padded rows above, 24 below
    padding = torch.cat([x[:, :24], x[:, -24:]], dim=1)
    mean = torch.tensor(cfg.mean).view(3, 1, 1)
    expected = (mean * 255).round() / 255 - mean  # the mean colour in 8 bits, normalized with std 1
    torch.testing.assert_close(padding, expected.expand_as(padding), atol=1e-6, rtol=0)
    assert x[:, 24:40].std() > 0.1  # the image itself, not padding


@pytest.mark.parametrize("mode", CROP_MODES)
def test_scaled_input_has_the_shape_of_the_models_resize(mode: str) -> None:
    cfg = InputConfig(input_size=64, crop_pct=0.8, crop_mode=mode)
    expected = {"center": (80, 200), "squash": (80, 80), "border": (32, 80)}[mode]  # (W, H) of a 40×100 image
    assert scaled_size(40, 100, cfg) == expected
    x = scaled_input(_noise_image(40, 100), cfg)
    assert tuple(x.shape[1:][::-1]) == expected


def test_crop_mode_override_survives_the_url() -> None:
    from fl_ui.state import decode_token, encode_token

    token = encode_token("weights:/srv/a.pt", {"crop_pct": 1.0, "crop_mode": "squash"})
    assert decode_token(token) == ("weights:/srv/a.pt", {"crop_pct": 1.0, "crop_mode": "squash"})

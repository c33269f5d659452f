"""Whitening curves: the stationary formula against brute force, known answers on a Markov field, real models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fl_core.firstlayer.patches import patch_pca
from fl_core.firstlayer.whitening import (
    InputAutocorrelation,
    WhiteningSettings,
    activation_maps,
    analyze_whitening,
    bank_autocorrelation,
    identity_bank,
    linear_responses,
    zca_bank,
)


def markov_field(rho: float, n: int, size: int, channels: int = 1, seed: int = 0) -> torch.Tensor:
    """Separable AR(1) Gaussian field: correlation ρ^|δ| along each axis, unit variance."""
    gen = np.random.default_rng(seed)
    x = gen.standard_normal((n, channels, size, size))
    scale = np.sqrt(1 - rho**2)
    for axis in (2, 3):
        x = np.moveaxis(x, axis, -1).copy()
        for i in range(1, size):
            x[..., i] = rho * x[..., i - 1] + scale * x[..., i]
        x = np.moveaxis(x, -1, axis)
    return torch.from_numpy(x)


def brute_force_curve(weight: torch.Tensor, images: torch.Tensor, max_distance: int) -> np.ndarray:
    """Σ_k E[y_k(p) y_k(p+δ)] − Σ_k μ_k² from the actual responses (horizontal and vertical averaged)."""
    y = F.conv2d(images.double(), weight.double())
    mean = y.mean(dim=(0, 2, 3), keepdim=True)
    curve = []
    for d in range(max_distance + 1):
        h = (y[..., :, : y.shape[-1] - d] * y[..., :, d:]).mean(dim=(0, 2, 3))
        v = (y[..., : y.shape[-2] - d, :] * y[..., d:, :]).mean(dim=(0, 2, 3))
        curve.append(float(((h + v) / 2 - mean.flatten() ** 2).sum()))
    curve = np.array(curve)
    return curve / curve[0]


def test_stationary_formula_matches_brute_force_responses() -> None:
    images = markov_field(0.8, 6, 96, channels=3, seed=1) + torch.tensor([1.0, -2.0, 0.5]).view(1, 3, 1, 1)
    weight = torch.randn(5, 3, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    acc = InputAutocorrelation(max_lag=10 + 4, device="cpu")
    acc.update(images)
    ours = bank_autocorrelation(weight, acc.correlation(), 10)
    np.testing.assert_allclose(ours, brute_force_curve(weight, images, 10), atol=0.03)


def test_rgb_of_a_markov_field_decays_as_rho_to_the_delta() -> None:
    rho = 0.85
    acc = InputAutocorrelation(max_lag=12, device="cpu")
    acc.update(markov_field(rho, 8, 128, seed=2))
    curve = bank_autocorrelation(identity_bank(1), acc.correlation(), 8)
    np.testing.assert_allclose(curve, rho ** np.arange(9), atol=0.03)


def test_zca_bank_whitens_a_markov_field() -> None:
    """For a separable AR(1) field the k×k ZCA bank gives C(δ)/C(0) = ρ^δ / k for δ ≥ k (derived in the docs)."""
    rho, k = 0.85, 3
    images = markov_field(rho, 8, 128, seed=3)
    acc = InputAutocorrelation(max_lag=8 + k - 1, device="cpu")
    acc.update(images)
    corr = acc.correlation()
    zca = bank_autocorrelation(zca_bank(patch_pca([images], (k, k), device="cpu")), corr, 8)
    rgb = bank_autocorrelation(identity_bank(1), corr, 8)
    delta = np.arange(k, 9)
    np.testing.assert_allclose(zca[k:], rho**delta / k, atol=0.02)
    assert np.all(zca[1:] < rgb[1:] - 0.2)


def test_activation_maps_are_the_linear_responses() -> None:
    x = torch.randn(1, 3, 20, 20)
    w = torch.randn(4, 3, 5, 5)
    maps = linear_responses(w, x)
    assert maps.shape == (4, 16, 16)
    torch.testing.assert_close(maps[2, 3, 4], (x[0, :, 3:8, 4:9] * w[2]).sum())


def test_activation_maps_of_a_model_are_its_first_conv_unpadded_on_the_scaled_image(demo, photos) -> None:
    """What the Whitening page draws: the first convolution's stride-1 responses without its padding (valid
    positions only), next to the very input they were computed from."""
    from fl_core.io.images import scaled_input, to_display

    trained, _ = demo
    image = photos.image(0)
    maps = activation_maps(trained, image, photos.names[0])
    x = scaled_input(image, trained.input_config).unsqueeze(0)
    conv = trained.model.features[0]
    assert conv.padding == (1, 1) and maps.layer == "features.0" and maps.label == trained.label
    expected = conv(x)[0, :, 1:-1, 1:-1].detach()  # the model's padded output, border positions dropped
    assert maps.maps.shape == (32, x.shape[2] - 2, x.shape[3] - 2)
    np.testing.assert_allclose(maps.maps, expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(maps.image, to_display(x[0], trained.input_config))


@pytest.mark.slow
def test_demo_reference_curves_match_the_paper_and_its_early_layer_does_not_whiten_yet(demo, photos) -> None:
    """RGB > 0.5, random ≈ RGB, ideal whitening far below (paper, δ = 10 px). The demo is trained for CPU minutes:
    its fitted ηt is small (early regime, e ∝ λ: a low-pass bank), so its responses are *not* decorrelated."""
    trained, init = demo
    result = analyze_whitening([trained, init], photos, WhiteningSettings(max_distance=10, seeds=10))
    at10 = result.at(10)
    assert at10["rgb"] > 0.5
    assert abs(at10["random"] - at10["rgb"]) < 0.1
    assert at10["zca"] < 0.2 < at10["rgb"] - 0.4
    assert at10[trained.spec] > at10["zca"] + 0.4
    payload = result.to_dict()
    assert set(payload["curves"]) == {"rgb", "zca", "random", trained.spec, init.spec}
    assert payload["distances"] == list(range(11)) and payload["curves"]["rgb"][0] == pytest.approx(1.0)


@pytest.mark.slow
def test_fully_trained_fixtures_decorrelate_their_input(squeezenet, resnet20, photos) -> None:
    """ImageNet SqueezeNet and CIFAR ResNet-20 (200 epochs) whiten: their curves fall well below RGB."""
    result = analyze_whitening([squeezenet, resnet20], photos.subset(range(6)), WhiteningSettings(max_distance=10))
    at10 = result.at(10)
    assert at10[squeezenet.spec] < at10["rgb"] - 0.1
    assert at10[resnet20.spec] < at10["random"] - 0.1

"""Streaming patch statistics equal the one-shot computation over all materialised patches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fl_core.errors import AnalysisError
from fl_core.firstlayer.patches import PatchStatistics, patch_pca


def all_patches(images: torch.Tensor, k: int) -> np.ndarray:
    """Every k×k patch, (channel, row, column) order, materialised (the authors' approach)."""
    return F.unfold(images.double(), k).transpose(1, 2).reshape(-1, images.shape[1] * k * k).numpy()


def test_streaming_covariance_equals_numpy_on_all_patches() -> None:
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(5, 3, 20, 17, generator=gen) + 3.0
    stats = PatchStatistics((3, 3), device="cpu", chunk_elements=300)  # forces many bands per image
    for batch in images.split(2):
        stats.update(batch)
    patches = all_patches(images, 3)
    assert stats.count == len(patches) == 5 * 18 * 15
    np.testing.assert_allclose(stats.mean().numpy(), patches.mean(0), atol=1e-12)
    np.testing.assert_allclose(stats.covariance().numpy(), np.cov(patches, rowvar=False), atol=1e-10)


def test_large_offset_keeps_float64_accuracy() -> None:
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(3, 1, 30, 30, generator=gen, dtype=torch.float64) * 1e-3 + 1e4
    stats = PatchStatistics((2, 2), device="cpu")
    stats.update(images)
    np.testing.assert_allclose(stats.covariance().numpy(), np.cov(all_patches(images, 2), rowvar=False),
                               rtol=1e-6, atol=1e-14)


def test_pca_orders_components_by_variance_and_matches_eigh() -> None:
    gen = torch.Generator().manual_seed(2)
    images = torch.nn.functional.avg_pool2d(torch.randn(4, 3, 40, 40, generator=gen), 3, 1)  # smooth -> spread
    pca = patch_pca([images], (3, 3), device="cpu")
    cov = np.cov(all_patches(images, 3), rowvar=False)
    eigvals = np.sort(np.linalg.eigvalsh(cov))[::-1]
    np.testing.assert_allclose(pca.lambdas, np.sqrt(np.clip(eigvals, 0, None)), rtol=1e-8)
    assert np.all(np.diff(pca.lambdas) <= 0)
    np.testing.assert_allclose(pca.components @ pca.components.T, np.eye(27), atol=1e-10)
    # u_i is an eigenvector: Σ u_i = λ_i² u_i
    np.testing.assert_allclose(cov @ pca.components[0], pca.lambdas[0] ** 2 * pca.components[0], rtol=1e-7)
    assert pca.component_images().shape == (27, 3, 3, 3)


def test_grouped_statistics_pool_single_channel_patches() -> None:
    images = torch.randn(2, 4, 12, 12)
    pooled = patch_pca([images], (3, 3), device="cpu", groups=4)
    single = patch_pca([images.reshape(8, 1, 12, 12)], (3, 3), device="cpu")
    np.testing.assert_allclose(pooled.lambdas, single.lambdas)
    assert pooled.kernel == (1, 3, 3)


def test_scaled_component_changes_exactly_one_eigenvalue() -> None:
    pca = patch_pca([torch.randn(2, 3, 16, 16)], (3, 3), device="cpu")
    scaled = pca.with_scaled_component(5, 3.0)
    assert sorted(scaled.lambdas.tolist()) == pytest.approx(sorted([*np.delete(pca.lambdas, 5), 3 * pca.lambdas[5]]))


def test_images_smaller_than_the_filter_give_a_clear_error() -> None:
    stats = PatchStatistics((7, 7), device="cpu")
    stats.update(torch.randn(1, 3, 5, 5))
    with pytest.raises(AnalysisError, match="smaller than the filter"):
        stats.pca()


@pytest.mark.slow
def test_float32_band_products_stay_within_the_stated_accuracy_of_float64(monkeypatch) -> None:
    """The rule of :func:`fl_core.compute.device.product_dtype` (float32 products on GPUs without fast float64) keeps
    the PCA of natural-photo 7×7×3 patches within its documented accuracy."""
    from fl_core.compute.device import product_dtype
    from fl_core.io.images import bundled_images, scaled_input
    from fl_core.io.preprocessing import InputConfig

    photos = bundled_images()
    images = torch.stack([scaled_input(photos.image(i), InputConfig(input_size=96))[:, :96, :96] for i in range(4)])
    exact = patch_pca([images], (7, 7), device="cpu")
    stats = PatchStatistics((7, 7), device="cpu", products=torch.float32)
    stats.update(images)
    fast = stats.pca()
    relative = np.abs(fast.lambdas - exact.lambdas) / exact.lambdas
    assert relative.max() < 5e-3 and np.median(relative) < 1e-4  # measured: 2.0e-3 and 8.6e-6
    alignment = np.abs((fast.components * exact.components).sum(1))
    assert alignment[:20].min() > 1 - 1e-6  # the components that carry the energy profile's shape
    assert stats.dtype == torch.float64 and product_dtype(torch.device("cpu")) == torch.float64
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))  # an RTX 4090 / L40
    assert product_dtype(torch.device("cuda")) == torch.float32
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H100 / H200
    assert product_dtype(torch.device("cuda")) == torch.float64


@pytest.mark.parametrize("chunk_elements", [300, 27 * 18 * 15, 27 * 18 * 15 * 3 + 5, 2**21])
def test_bands_of_rows_one_image_or_many_images_give_the_same_statistics(chunk_elements) -> None:
    """Bands of a few patch rows, of exactly one image, of three images with room to spare and of a whole batch (the
    accelerator's path, on the CPU) give the mean and covariance of all materialised patches to float64 rounding."""
    gen = torch.Generator().manual_seed(4)
    images = torch.randn(7, 3, 20, 17, generator=gen, dtype=torch.float64) + 2.0
    stats = PatchStatistics((3, 3), device="cpu", chunk_elements=chunk_elements)
    for batch in images.split(4):
        stats.update(batch)
    patches = all_patches(images, 3)
    assert stats.count == len(patches) == 7 * 18 * 15
    np.testing.assert_allclose(stats.mean().numpy(), patches.mean(0), rtol=1e-13)
    np.testing.assert_allclose(stats.covariance().numpy(), np.cov(patches, rowvar=False), rtol=1e-12, atol=1e-14)

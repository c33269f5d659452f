"""Streaming channel moments and local-axis metrics against independent numpy / torch computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl_core.channelaxes.layerstats import padded_input, patch_column_sums
from fl_core.channelaxes.moments import (
    ChannelMoments,
    FeatureVariance,
    input_capture,
    peer_overlap,
    peer_r2_all,
    peer_r2_topk_heldout,
    ridge_peer_coefficients,
    top_peers,
)


def correlated_data(n: int, n_channels: int, seed: int, offset: float = 0.0) -> np.ndarray:
    """Rows of a random linear mixture of independent normals, plus a constant offset."""
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(n_channels, n_channels))
    return rng.normal(size=(n, n_channels)) @ mixing + offset


def ols_r2(target: np.ndarray, predictors: np.ndarray) -> float:
    """In-sample R² of least squares with an intercept (numpy.linalg.lstsq)."""
    design = np.column_stack([np.ones(len(target)), predictors])
    coefficients, *_ = np.linalg.lstsq(design, target, rcond=None)
    residual = target - design @ coefficients
    return 1.0 - residual @ residual / ((target - target.mean()) @ (target - target.mean()))


# --- streaming moments --------------------------------------------------------------------------------------


def test_streaming_moments_match_numpy_with_large_offset() -> None:
    data = correlated_data(4000, 6, seed=0, offset=1e4)
    rng = np.random.default_rng(1)
    cuts = np.sort(rng.choice(np.arange(1, len(data)), size=12, replace=False))
    moments = ChannelMoments(6)
    for chunk in np.split(data, cuts):
        moments.update(torch.from_numpy(chunk))

    expected = np.cov(data, rowvar=False)
    assert moments.count == len(data)
    np.testing.assert_allclose(moments.mean().numpy(), data.mean(axis=0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(moments.covariance().numpy(), expected, rtol=0, atol=1e-10)
    expected_corr = np.corrcoef(data, rowvar=False)
    np.testing.assert_allclose(moments.correlation().numpy(), expected_corr, rtol=0, atol=1e-12)

    # The offset is large enough that the naive E[xxᵀ] − μμᵀ formula misses this tolerance.
    mean = data.mean(axis=0)
    naive = (data.T @ data - len(data) * np.outer(mean, mean)) / (len(data) - 1)
    assert np.abs(naive - expected).max() > 1e-10


def test_per_position_batches_and_chunk_size_match_numpy() -> None:
    rng = np.random.default_rng(2)
    maps = rng.normal(size=(10, 4, 5, 3)) + 50.0
    rows = maps.transpose(0, 2, 3, 1).reshape(-1, 4)
    whole = ChannelMoments(4).update(torch.from_numpy(maps))
    chunked = ChannelMoments(4).update(torch.from_numpy(maps), chunk_size=3)
    for moments in (whole, chunked):
        assert moments.count == 10 * 5 * 3
        expected = np.cov(rows, rowvar=False, ddof=0)
        np.testing.assert_allclose(moments.covariance(ddof=0).numpy(), expected, atol=1e-12)
        np.testing.assert_allclose(moments.mean().numpy(), rows.mean(axis=0), atol=1e-12)


def test_merging_two_accumulators_equals_one() -> None:
    data = torch.from_numpy(correlated_data(900, 5, seed=3, offset=-3e3))
    single = ChannelMoments(5).update(data)
    first = ChannelMoments.from_batches([data[:200], data[200:350]])
    second = ChannelMoments.from_batches([data[350:]])
    merged = first.merge(second).merge(ChannelMoments(5))
    assert merged.count == single.count
    torch.testing.assert_close(merged.mean(), single.mean(), rtol=0, atol=1e-10)
    torch.testing.assert_close(merged.covariance(), single.covariance(), rtol=0, atol=1e-10)


def test_dead_channel_has_zero_correlation() -> None:
    data = torch.randn(100, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    data[:, 1] = 0.0
    corr = ChannelMoments.from_batches([data]).correlation()
    assert torch.isfinite(corr).all()
    assert corr[1, 1] == 1.0 and corr[1, 0] == 0.0 and corr[2, 1] == 0.0


# --- §1 input capture ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("groups", "stride", "padding"), [(1, 2, 1), (2, 1, 2)])
def test_input_capture_identity_with_im2col(groups: int, stride: int, padding: int) -> None:
    generator = torch.Generator().manual_seed(groups)
    inputs = torch.randn(3, 4, 9, 8, dtype=torch.float64, generator=generator) + 0.7
    weight = torch.randn(6, 4 // groups, 3, 3, dtype=torch.float64, generator=generator)
    outputs = F.conv2d(inputs, weight, stride=stride, padding=padding, groups=groups)
    output_moments = ChannelMoments.from_batches([outputs])

    patches = F.unfold(inputs, kernel_size=3, padding=padding, stride=stride)  # (N, Cin·9, L), zero padded
    patch_rows = patches.transpose(1, 2).reshape(-1, patches.shape[1]).numpy()
    dim = 4 // groups * 9
    filters = weight.flatten(1).numpy()
    per_channel = len(filters) // groups
    raw, traces, eigen_ranges = [], [], []
    for g in range(groups):
        sigma = np.cov(patch_rows[:, g * dim : (g + 1) * dim], rowvar=False, ddof=0)
        group_filters = filters[g * per_channel : (g + 1) * per_channel]
        raw.append(np.einsum("id,de,ie->i", group_filters, sigma, group_filters))
        traces.append(np.trace(sigma))
        eigen_ranges.append(np.linalg.eigvalsh(sigma)[[0, -1]])
        if g == 0 and groups == 1:
            gram = group_filters @ sigma @ group_filters.T
            normalized_gram = gram / np.sqrt(np.outer(np.diag(gram), np.diag(gram)))
            np.testing.assert_allclose(output_moments.correlation().numpy(), normalized_gram, atol=1e-10)
    raw = np.concatenate(raw)

    # w_iᵀ Σ_X w_i equals the variance of the pre-bias conv output, zero padding included.
    np.testing.assert_allclose(output_moments.variance(ddof=0).numpy(), raw, rtol=1e-10)

    capture = input_capture(weight, output_moments.variance(ddof=0), torch.tensor(traces))
    norms = (filters**2).sum(axis=1)
    np.testing.assert_allclose(capture.raw.numpy(), raw, rtol=1e-10)
    np.testing.assert_allclose(capture.rayleigh.numpy(), raw / norms, rtol=1e-10)
    group_of = np.repeat(np.arange(groups), per_channel)
    # normalized by the layer's average trace (a layer constant: the reference's tr Σ_X / D), and by each group's
    np.testing.assert_allclose(capture.normalized.numpy(), raw / norms / (np.mean(traces) / dim), rtol=1e-10)
    np.testing.assert_allclose(
        capture.group_normalized.numpy(), raw / norms / (np.asarray(traces)[group_of] / dim), rtol=1e-10
    )
    low, high = np.asarray(eigen_ranges)[group_of].T
    rayleigh = capture.rayleigh.numpy()
    assert np.all(rayleigh >= low - 1e-12) and np.all(rayleigh <= high + 1e-12)


def test_an_all_zero_filter_captures_nothing_rather_than_nan() -> None:
    weight = torch.randn(3, 2, 3, 3, dtype=torch.float64)
    weight[1] = 0
    capture = input_capture(weight, torch.tensor([2.0, 0.0, 1.5], dtype=torch.float64), torch.tensor(4.0))
    assert capture.rayleigh[1] == 0 and capture.normalized[1] == 0 and capture.group_normalized[1] == 0
    assert torch.isfinite(capture.normalized).all()


# --- §2 peer overlap ----------------------------------------------------------------------------------------


def test_peer_overlap_matches_brute_force() -> None:
    corr_np = np.corrcoef(correlated_data(500, 7, seed=4), rowvar=False)
    overlap = peer_overlap(torch.from_numpy(corr_np), k=3)
    for i in range(7):
        others = np.abs(np.delete(corr_np[i], i))
        assert overlap.mean_abs[i].item() == pytest.approx(others.mean(), abs=1e-14)
        assert overlap.max_abs[i].item() == pytest.approx(others.max(), abs=1e-14)
        assert overlap.topk_mean[i].item() == pytest.approx(np.sort(others)[-3:].mean(), abs=1e-14)
    assert overlap.k == 3
    assert peer_overlap(torch.from_numpy(corr_np), k=50).k == 6
    assert not (top_peers(torch.from_numpy(corr_np), 6) == torch.arange(7)[:, None]).any()


# --- §4 peer reconstruction ---------------------------------------------------------------------------------


def test_all_peer_r2_equals_ols_r2() -> None:
    data = correlated_data(300, 6, seed=5, offset=2.0)
    r2 = peer_r2_all(torch.from_numpy(np.corrcoef(data, rowvar=False)), shrinkage=0.0).numpy()
    expected = [ols_r2(data[:, i], np.delete(data, i, axis=1)) for i in range(6)]
    np.testing.assert_allclose(r2, expected, atol=1e-10)


def planted_channels(n: int, seed: int) -> torch.Tensor:
    """Channels 0-3 correlated, channel 4 an exact copy of channel 0, channel 5 independent of all others."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=(n, 2))
    mixed = shared @ rng.normal(size=(2, 4)) + 0.5 * rng.normal(size=(n, 4))
    return torch.from_numpy(np.column_stack([mixed, mixed[:, 0], rng.normal(size=n)]))


def test_duplicate_channel_is_reconstructed_and_independent_one_is_not() -> None:
    data = planted_channels(4000, seed=6)
    r2_all = peer_r2_all(ChannelMoments.from_batches([data]).correlation(), shrinkage=1e-6)
    assert r2_all[4].item() > 0.999 and r2_all[0].item() > 0.999
    assert abs(r2_all[5].item()) < 0.01

    heldout = peer_r2_topk_heldout(data[:2000], data[2000:], k=3, ridge=1e-6)
    assert heldout.r2[4].item() > 0.999
    assert abs(heldout.r2[5].item()) < 0.01
    assert heldout.r2[1].item() > 0.3  # correlated through the shared factors


def test_topk_heldout_r2_matches_explicit_ridge_and_accepts_moments() -> None:
    data = correlated_data(1200, 8, seed=7, offset=5.0)
    fit, test = data[:600], data[600:]
    k, ridge = 3, 0.05
    result = peer_r2_topk_heldout(torch.from_numpy(fit), torch.from_numpy(test), k=k, ridge=ridge)

    corr = np.corrcoef(fit, rowvar=False)
    cov = np.cov(fit, rowvar=False, ddof=0)
    penalty = ridge * np.trace(cov) / 8
    for i in range(8):
        strength = np.abs(corr[i])
        strength[i] = -np.inf
        peers = np.argsort(-strength)[:k]
        centred = fit - fit.mean(axis=0)
        beta = np.linalg.solve(
            centred[:, peers].T @ centred[:, peers] / len(fit) + penalty * np.eye(k),
            centred[:, peers].T @ centred[:, i] / len(fit),
        )
        intercept = fit[:, i].mean() - beta @ fit[:, peers].mean(axis=0)
        residual = test[:, i] - intercept - test[:, peers] @ beta
        expected = 1.0 - residual @ residual / ((test[:, i] - test[:, i].mean()) ** 2).sum()
        assert sorted(result.peers[i].tolist()) == sorted(peers.tolist())
        assert result.r2[i].item() == pytest.approx(expected, abs=1e-10)

    streamed = peer_r2_topk_heldout(
        ChannelMoments.from_batches(torch.from_numpy(fit).split(97)),
        ChannelMoments.from_batches(torch.from_numpy(test).split(101)),
        k=k,
        ridge=ridge,
    )
    torch.testing.assert_close(streamed.r2, result.r2, rtol=0, atol=1e-10)
    assert result.to_dict()["k"] == k


def test_ridge_peer_coefficients_without_ridge_equal_least_squares() -> None:
    data = correlated_data(400, 5, seed=8, offset=-1.0)
    moments = ChannelMoments.from_batches([torch.from_numpy(data)])
    peer_sets = torch.tensor([[1, 2], [0, 4], [3, 1], [2, 0], [0, 1]])
    beta, intercept = ridge_peer_coefficients(moments.covariance(), moments.mean(), peer_sets, ridge=0.0)
    for i, peers in enumerate(peer_sets.tolist()):
        design = np.column_stack([np.ones(len(data)), data[:, peers]])
        coefficients, *_ = np.linalg.lstsq(design, data[:, i], rcond=None)
        np.testing.assert_allclose(beta[i].numpy(), coefficients[1:], atol=1e-10)
        assert intercept[i].item() == pytest.approx(coefficients[0], abs=1e-10)
    with pytest.raises(ValueError, match="itself"):
        ridge_peer_coefficients(moments.covariance(), moments.mean(), torch.tensor([[0, 1]] * 5), ridge=0.0)


@pytest.mark.parametrize("conv", [
    nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1, groups=2), nn.Conv2d(3, 2, 5, stride=2, padding=2),
    nn.Conv2d(3, 2, 3, dilation=2, padding="same"), nn.Conv2d(3, 2, (3, 2), stride=(1, 2)),
    nn.Conv2d(3, 2, 3, padding=1, padding_mode="reflect"), nn.Conv2d(2, 2, 1)])
def test_patch_column_sums_equal_the_sums_over_materialised_patches(conv) -> None:
    """The input-capture statistics' box sums against every im2col patch the conv sees (padding, stride, dilation,
    groups, padding modes), and their variances against the rows' own."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, conv.in_channels, 11, 9, generator=generator, dtype=torch.float64) + 0.5
    padded = padded_input(x, conv)
    patches = F.unfold(padded, conv.kernel_size, dilation=conv.dilation, stride=conv.stride)
    rows = patches.transpose(1, 2).reshape(-1, patches.shape[1])
    assert F.conv2d(x, conv.weight.double(), None, conv.stride, conv.padding, conv.dilation, conv.groups) \
        .shape[-2:].numel() * len(x) == len(rows)  # the conv's own output grid
    n, total, squares = patch_column_sums(x, conv, torch.float64)
    assert n == len(rows)
    torch.testing.assert_close(total, rows.sum(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(squares, rows.square().sum(0), rtol=1e-12, atol=1e-12)
    variance = FeatureVariance(len(total)).add(*patch_column_sums(x[:2], conv, torch.float64))
    variance.add(*patch_column_sums(x[2:], conv, torch.float64))
    torch.testing.assert_close(variance.variance(), rows.var(0, unbiased=False), rtol=1e-10, atol=1e-12)

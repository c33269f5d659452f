"""Significance of the channel axes, each estimator against an independent computation: the noise floor of the
Gaussian MI, permutation p-values under a null, bootstrap intervals that cover a known correlation, resampled
statistics equal to those of explicitly repeated images."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import kstest, spearmanr

from fl_core.channelaxes.comparison import (
    adjusted_rand_index,
    adjusted_rand_indices,
    kmeans_labels,
    pooled_over_bins,
    relevance_bins,
    row_spearman,
)
from fl_core.channelaxes.information import copula_normalize, gaussian_mi, target_excess
from fl_core.channelaxes.resampling import LayerSamples
from fl_core.channelaxes.significance import (
    Bootstrap,
    bootstrap,
    mi_null_mean,
    resample_weights,
    task_information,
)


@pytest.mark.slow
def test_the_noise_floor_is_the_mean_plug_in_mi_of_independent_gaussians_and_about_one_over_2n() -> None:
    rng = np.random.default_rng(0)
    for n in (20, 100, 384):
        x, y = rng.normal(size=(2, 20_000, n))
        r = np.array([np.corrcoef(a, b)[0, 1] for a, b in zip(x, y)])
        simulated = np.mean(-0.5 * np.log1p(-r ** 2))
        assert mi_null_mean(n) == pytest.approx(simulated, rel=0.03)
        assert mi_null_mean(n) == pytest.approx(1 / (2 * n), rel=3 / n)
    assert mi_null_mean(100, dimensions=3) == pytest.approx(3 * mi_null_mean(100))


def test_permutation_p_values_are_uniform_under_the_null_and_small_for_a_planted_channel() -> None:
    rng = np.random.default_rng(1)
    n, channels = 96, 600
    pooled = rng.normal(size=(n, channels))
    margin = rng.normal(size=n)
    pooled[:, 0] = margin + 0.5 * rng.normal(size=n)  # one channel carries the margin
    info = task_information(torch.from_numpy(pooled), torch.from_numpy(margin), n_permutations=199, seed=3)
    null_p = info.p_value[1:]
    assert kstest(null_p, "uniform").pvalue > 0.01
    assert abs(np.mean(null_p < 0.05) - 0.05) < 0.03
    assert info.p_value[0] == pytest.approx(1 / 200)
    assert info.null_mean == pytest.approx(mi_null_mean(n))
    assert info.permutation_mean == pytest.approx(info.null_mean, rel=0.05)  # the permutations agree with the formula
    expected = gaussian_mi(copula_normalize(torch.from_numpy(pooled)), copula_normalize(torch.from_numpy(margin)))
    np.testing.assert_allclose(info.information, expected.numpy(), rtol=1e-10)
    np.testing.assert_allclose(info.corrected, info.information - info.null_mean)
    assert info.significant_share == pytest.approx(np.mean(info.p_value < 0.05))
    assert "at the noise floor for" in info.sentence() and f"on {n} images" in info.sentence()
    again = task_information(torch.from_numpy(pooled), torch.from_numpy(margin), n_permutations=199, seed=3)
    np.testing.assert_array_equal(again.p_value, info.p_value)  # seeded


def weighted_correlation(weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    w = weights / weights.sum(1, keepdims=True)
    mx, my = w @ x, w @ y
    cov = w @ (x * y) - mx * my
    return cov / np.sqrt((w @ x ** 2 - mx ** 2) * (w @ y ** 2 - my ** 2))


def test_bootstrap_intervals_cover_a_known_correlation_about_95_times_in_100() -> None:
    rho, n, trials = 0.5, 80, 150
    rng = np.random.default_rng(2)
    covered = 0
    for trial in range(trials):
        x = rng.normal(size=n)
        y = rho * x + np.sqrt(1 - rho ** 2) * rng.normal(size=n)
        result = bootstrap(lambda w, x=x, y=y: {"r": weighted_correlation(w, x, y)}, [n], resamples=400,
                           seed=trial)["r"]
        assert result.estimate == pytest.approx(np.corrcoef(x, y)[0, 1])
        covered += result.low <= rho <= result.high
    assert 0.88 <= covered / trials <= 0.99


def test_resample_weights_count_draws_and_keep_the_first_set_alike_beside_others() -> None:
    alone, = resample_weights([30], 50, seed=7)
    first, second = resample_weights([30, 12], 50, seed=7)
    assert alone.shape == (50, 30) and np.all(alone.sum(1) == 30) and np.all(second.sum(1) == 12)
    np.testing.assert_array_equal(alone, first)
    assert not np.array_equal(alone, resample_weights([30], 50, seed=8)[0])


def test_bootstrap_combine_averages_resample_by_resample_and_refuses_unlike_resamples() -> None:
    values = np.arange(10.0)
    a = Bootstrap.from_values(1.0, values, 0.9, 0, (20,))
    b = Bootstrap.from_values(3.0, 2 * values, 0.9, 0, (20, 5))
    mean = Bootstrap.combine([a, b])
    assert mean.estimate == 2.0 and np.allclose(mean.values, 1.5 * values)
    assert a.minus(b).estimate == -2.0 and np.allclose(a.minus(b).values, -values)
    assert Bootstrap.combine([a, Bootstrap.from_values(1.0, values, 0.9, 1, (20,))]) is None  # another seed
    assert Bootstrap.combine([a, None]) is None
    assert np.isnan(Bootstrap.from_values(0.0, np.array([np.nan, np.nan, 1.0]), 0.9, 0, (3,)).low)


def planted_samples(n: int = 60, channels: int = 12, k: int = 3, evaluation: int = 10) -> LayerSamples:
    rng = np.random.default_rng(4)
    pooled = rng.normal(size=(n, channels)) + rng.normal(size=(n, 1))
    margin = pooled[:, :3].sum(1) + rng.normal(size=n)
    scores = torch.cat([copula_normalize(torch.from_numpy(pooled)),
                        copula_normalize(torch.from_numpy(margin))[:, None]], 1).numpy()
    peers = np.stack([np.roll(np.arange(channels), -s)[:] for s in range(1, k + 1)], 1)
    sums, squares = rng.normal(size=(n, channels)), rng.uniform(5, 6, size=(n, channels))
    norms = rng.uniform(0.5, 2, size=channels)
    norms[5] = 0.0  # an all-zero filter
    return LayerSamples(scores=scores, capture_sums=sums, capture_squares=squares, pre_positions=4,
                        squared_norms=norms, peers=peers, shrinkage=1e-3, peer_overlap=rng.uniform(size=channels),
                        peer_r2=rng.uniform(size=channels), lesion=rng.normal(size=(channels, evaluation)))


def test_resampled_statistics_equal_those_of_the_images_repeated_explicitly() -> None:
    samples = planted_samples()
    draws = np.random.default_rng(5).integers(0, 60, 60)
    eval_draws = np.random.default_rng(6).integers(0, 10, 10)
    weights = np.bincount(draws, minlength=60)[None].astype(float)
    eval_weights = np.bincount(eval_draws, minlength=10)[None].astype(float)
    table = samples.table(weights, eval_weights)

    z = torch.from_numpy(samples.scores[draws])
    np.testing.assert_allclose(table["task_info"][0], gaussian_mi(z[:, :-1], z[:, -1]).numpy(), rtol=1e-8)
    expected_excess = target_excess(z[:, :-1], z[:, -1], torch.from_numpy(samples.peers), shrinkage=1e-3)
    np.testing.assert_allclose(table["target_excess"][0], expected_excess.numpy(), rtol=1e-6, atol=1e-12)
    sums, squares = samples.capture_sums[draws], samples.capture_squares[draws]
    count = 60 * samples.pre_positions
    variance = squares.sum(0) / count - (sums.sum(0) / count) ** 2
    norms = samples.squared_norms
    expected_capture = np.where(norms > 0, variance / np.where(norms > 0, norms, 1), 0)
    np.testing.assert_allclose(table["input_capture"][0], expected_capture, rtol=1e-10)
    assert table["input_capture"][0, 5] == 0  # the zero filter captures nothing, not NaN
    np.testing.assert_allclose(table["lesion_dloss"][0], samples.lesion[:, eval_draws].mean(1), rtol=1e-10)
    np.testing.assert_array_equal(table["peer_r2"][0], samples.peer_r2)  # held fixed


def test_row_spearman_relevance_bins_and_batched_ari_match_their_one_at_a_time_versions() -> None:
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=(2, 5, 30))
    b[:, :10] = a[:, :10]
    expected = [spearmanr(x, y).statistic for x, y in zip(a, b)]
    np.testing.assert_allclose(row_spearman(a, b), expected, rtol=1e-12)
    assert np.isnan(row_spearman(np.ones((1, 5)), a[:1, :5])[0])

    table = {"task_info": rng.normal(size=22), "lesion_dloss": rng.normal(size=22), "peer_r2": rng.normal(size=22),
             "input_capture": rng.normal(size=22)}
    per_bin = relevance_bins(table, 3)
    order = np.argsort(table["task_info"], kind="stable")
    edges = [0, 7, 14, 22]
    assert list(per_bin["size"]) == [7, 7, 8]
    for b_index, (lo, hi) in enumerate(itertools.pairwise(edges)):
        chosen = order[lo:hi]
        assert per_bin["peer_r2"][b_index] == pytest.approx(
            spearmanr(table["peer_r2"][chosen], table["lesion_dloss"][chosen]).statistic)
    assert pooled_over_bins(per_bin["peer_r2"], per_bin["size"]) == pytest.approx(
        np.dot(per_bin["peer_r2"], [7, 7, 8]) / 22)
    assert pooled_over_bins([np.nan, 0.5], [3, 4]) == 0.5

    points = rng.normal(size=(4, 40, 2))
    labels = kmeans_labels(points, 3, n_init=4, seed=1)
    other = kmeans_labels(points[:, ::-1], 3, n_init=4, seed=2)
    assert labels.shape == (4, 40)
    np.testing.assert_allclose(adjusted_rand_indices(labels, other, 3),
                               [adjusted_rand_index(x, y) for x, y in zip(labels, other)], rtol=1e-12)
    blobs = np.repeat(np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]]), 10, axis=0)
    sets = blobs + rng.normal(scale=0.5, size=(3, 30, 2))
    truth = np.repeat(np.arange(3), 10)
    batched = kmeans_labels(sets, 3, n_init=4, seed=1)
    for one_set, found in zip(sets, batched):  # each set of the batch clustered as it would be alone
        assert adjusted_rand_index(found, truth) == 1.0
        assert adjusted_rand_index(kmeans_labels(one_set, 3, n_init=4, seed=1), truth) == 1.0

"""Axis comparison: Spearman, k-means groupings, ARI with its permutation null, and the pruning AUC."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from fl_core.channelaxes.comparison import auc_accuracy_vs_flops, axes_agreement, axis_clusters, spearman
from fl_core.errors import AnalysisError


def quadrant_features(n_per_cluster: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Four well-separated 2-D blobs (high/low × high/low) and their true labels."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [0.0, 10.0], [10.0, 0.0], [10.0, 10.0]])
    labels = np.repeat(np.arange(4), n_per_cluster)
    return centres[labels] + rng.normal(size=(len(labels), 2)), labels


def test_spearman_known_values() -> None:
    a = np.arange(20.0)
    assert spearman(a, np.exp(a)) == pytest.approx(1.0)
    assert spearman(torch.from_numpy(a), -(a**3)) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2, np.nan, 3, 4], [1, 3, 100, 2, 4]) == pytest.approx(0.8)


def test_axis_clusters_recover_planted_quadrants_on_any_scale() -> None:
    features, truth = quadrant_features(16, seed=0)
    features[:, 1] *= 1e-3  # standardization makes the second feature count as much as the first
    labels = axis_clusters(features, k=4, seed=3)
    assert adjusted_rand_score(truth, labels) == 1.0
    with pytest.raises(AnalysisError):
        axis_clusters(features[:3], k=4)


def test_identical_groupings_agree_and_permuted_ones_do_not() -> None:
    features, _ = quadrant_features(40, seed=1)
    same = axes_agreement(features, features * [2.0, 5.0] + 1.0, k=4, seeds=[0, 1, 2], n_init=5)
    assert same.ari_median == pytest.approx(1.0)
    assert same.ari == pytest.approx([1.0, 1.0, 1.0])
    assert abs(same.null_median) < 0.05
    assert same.p_value == pytest.approx(1 / (1 + 3 * 20))

    permuted = np.random.default_rng(2).permutation(len(features))
    unrelated = axes_agreement(features, features[permuted], k=4, seeds=[0, 1, 2], n_init=5)
    assert abs(unrelated.ari_median) < 0.1
    assert unrelated.p_value > 0.01
    assert unrelated.seeds == [0, 1, 2] and len(unrelated.null_ari) == 60
    json.dumps(unrelated.to_dict(), allow_nan=False)


def test_auc_of_accuracy_vs_flops() -> None:
    grid = [0.2, 0.4, 0.6, 0.7, 0.8]
    assert auc_accuracy_vs_flops(grid, [71.5] * 5) == pytest.approx(71.5)
    # a linear curve's normalized area is its value at the grid's midpoint
    line = [80.0 - 50.0 * x for x in grid]
    assert auc_accuracy_vs_flops(grid, line) == pytest.approx(80.0 - 50.0 * 0.5)
    # points in any order; a convex kink counted by the trapezoid rule
    assert auc_accuracy_vs_flops([1.0, 0.0, 0.5], [0.0, 1.0, 0.0]) == pytest.approx(0.25)
    with pytest.raises(AnalysisError):
        auc_accuracy_vs_flops([0.3, 0.3], [1.0, 2.0])


@pytest.mark.slow
def test_batched_kmeans_matches_scikit_learn_and_ari_matches_its_definition() -> None:
    from sklearn.cluster import KMeans

    from fl_core.channelaxes.comparison import adjusted_rand_index, kmeans_labels

    rng = np.random.default_rng(5)
    for seed in range(3):
        points = rng.normal(size=(300, 2)) * [1.0, 3.0]
        labels = kmeans_labels(points, 4, n_init=20, seed=seed)
        inertia = sum(((points[labels == c] - points[labels == c].mean(0)) ** 2).sum() for c in range(4))
        reference = KMeans(4, n_init=20, random_state=seed).fit(points).inertia_
        assert inertia <= reference * (1 + 1e-3)  # as good a local optimum as scikit-learn's
        assert np.array_equal(labels, kmeans_labels(points, 4, n_init=20, seed=seed))
    for _ in range(20):
        a, b = rng.integers(0, 4, 50), rng.integers(0, 3, 50)
        assert adjusted_rand_index(a, b) == pytest.approx(adjusted_rand_score(a, b), abs=1e-12)
    assert adjusted_rand_index([0] * 5, [1] * 5) == adjusted_rand_score([0] * 5, [1] * 5) == 1.0
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 2, 2]) == 1.0

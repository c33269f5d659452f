"""Comparing the local and target axes: rank correlation, cluster agreement, pruning AUC.

Section numbers (§6, §7) refer to docs/methods.md, "Channel axes".

These work on per-channel scores (C values per layer), so they run on CPU in numpy / scipy. The
protocol (features, k-means with k = 4, ARI with a permutation null, AUC normalization) is the project's
**proposed** one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from fl_core.errors import AnalysisError
from fl_core.results import Result

ArrayLike = np.ndarray | torch.Tensor | Sequence[float]


def _as_numpy(values: ArrayLike) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float64)


def spearman(a: ArrayLike, b: ArrayLike) -> float:
    """Spearman rank correlation of two per-channel scores (§7); pairs with a NaN in either are dropped. NaN (without
    scipy's warning) when either is constant over the pairs left: no ranking to correlate."""
    x, y = _as_numpy(a), _as_numpy(b)
    kept = np.isfinite(x) & np.isfinite(y)
    if kept.sum() < 2 or np.ptp(x[kept]) == 0 or np.ptp(y[kept]) == 0:
        return float("nan")
    return float(spearmanr(x[kept], y[kept]).statistic)


def spearman_matrix(table: pd.DataFrame) -> pd.DataFrame:
    """Spearman ρ between every pair of columns: the Pearson correlation of their average-tie ranks (NaN rows left
    out pairwise)."""
    return table.rank().corr()


def kmeans_labels(points: np.ndarray, k: int, n_init: int = 20, seed: int = 0, max_iter: int = 300) -> np.ndarray:
    """k-means (Lloyd) labels ``(n,)`` of ``points (n, F)``: the best of ``n_init`` k-means++-seeded restarts.

    All restarts run together as array operations (a layer's few hundred channels would otherwise spend their time
    in per-restart overhead) until no assignment changes; the restart with the lowest within-cluster sum of squares
    wins. An emptied cluster keeps its centre. Deterministic under ``seed``.
    """
    rng = np.random.default_rng(seed)
    n = len(points)
    centres = np.empty((n_init, k, points.shape[1]))
    centres[:, 0] = points[rng.integers(n, size=n_init)]
    nearest = ((points[None] - centres[:, :1]) ** 2).sum(-1)
    for j in range(1, k):  # k-means++: next centre drawn with probability ∝ squared distance to the nearest one
        weights = nearest + (nearest.sum(1, keepdims=True) == 0)
        cumulative = np.cumsum(weights / weights.sum(1, keepdims=True), axis=1)
        picks = np.minimum((cumulative < rng.random(n_init)[:, None]).sum(1), n - 1)
        centres[:, j] = points[picks]
        nearest = np.minimum(nearest, ((points[None] - centres[:, j:j + 1]) ** 2).sum(-1))
    squared = (points ** 2).sum(1)[None, :, None]
    eye = np.eye(k)
    labels = None
    for _ in range(max_iter):
        distances = squared - 2 * points @ centres.transpose(0, 2, 1) + (centres ** 2).sum(2)[:, None]
        assigned = distances.argmin(2)
        if labels is not None and np.array_equal(assigned, labels):
            break
        labels = assigned
        members = eye[labels]
        counts = members.sum(1)[..., None]
        centres = np.where(counts > 0, members.transpose(0, 2, 1) @ points / np.maximum(counts, 1), centres)
    best = np.take_along_axis(distances, assigned[..., None], 2)[..., 0].sum(1).argmin()
    return assigned[best]


def adjusted_rand_index(labels_a: ArrayLike, labels_b: ArrayLike) -> float:
    """Adjusted Rand index (Hubert & Arabie 1985) from the contingency table, the value of
    ``sklearn.metrics.adjusted_rand_score`` without its per-call validation (the permutation null calls it hundreds
    of times): ``(Σ C(n_ij,2) − E) / (½[Σ C(a_i,2) + Σ C(b_j,2)] − E)``, ``E = Σ C(a_i,2) Σ C(b_j,2) / C(n,2)``."""
    _, a = np.unique(np.asarray(labels_a), return_inverse=True)
    _, b = np.unique(np.asarray(labels_b), return_inverse=True)
    table = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(table, (a, b), 1.0)

    def pairs(counts: np.ndarray) -> float:
        return float((counts * (counts - 1) / 2).sum())

    rows, columns, total = pairs(table.sum(1)), pairs(table.sum(0)), pairs(np.array([len(a)]))
    expected = rows * columns / total if total else 0.0
    maximum = (rows + columns) / 2
    return 1.0 if maximum == expected else (pairs(table) - expected) / (maximum - expected)


def axis_clusters(features: ArrayLike, k: int = 4, n_init: int = 20, seed: int = 0) -> np.ndarray:
    """k-means labels ``(C,)`` of channels described by ``features (C, F)``, each column z-scored first (§7).

    A constant feature column is set to 0 rather than divided by a zero standard deviation.
    """
    values = _as_numpy(features)
    if values.ndim == 1:
        values = values[:, None]
    if values.shape[0] < k:
        raise AnalysisError(
            f"Clustering into k = {k} groups needs at least {k} channels, got {values.shape[0]}."
        )
    std = values.std(axis=0)
    standardized = (values - values.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return kmeans_labels(standardized, k, n_init, seed)


@dataclass(frozen=True)
class AxesAgreement(Result):
    """Agreement of the channel groupings induced by the two axes (proposed, docs/methods.md §7).

    Attributes:
        ari_median: median over seeds of the ARI between local-axis and target-axis k-means labels.
        ari: ARI per seed.
        null_median: median ARI after permuting the channels of the target axis (chance level, ≈ 0).
        null_ari: every permutation's ARI (``n_permutations`` per seed).
        p_value: ``(1 + #{null ≥ ari_median}) / (1 + #null)``.
        k: clusters per axis.
        seeds: k-means and permutation seeds.
    """

    ari_median: float
    ari: list[float]
    null_median: float
    null_ari: list[float]
    p_value: float
    k: int
    seeds: list[int]


def axes_agreement(
    local_features: ArrayLike,
    target_features: ArrayLike,
    k: int = 4,
    seeds: Sequence[int] = tuple(range(10)),
    n_init: int = 20,
    n_permutations: int = 20,
) -> AxesAgreement:
    """ARI between the k-means groupings of the local and the target axis, with a permutation null (§7).

    For each seed both feature sets are clustered (:func:`axis_clusters`) and compared with
    :func:`adjusted_rand_index`; the null permutes the channel order of the target labels.

    Args:
        local_features: ``(C, F_local)``, e.g. ``[log I_X, R̄_X]``.
        target_features: ``(C, F_target)``, e.g. ``[I(ā;m), TE]``.
        k: clusters per axis.
        seeds: one clustering and ``n_permutations`` permutations per seed.
        n_init: k-means restarts.
        n_permutations: permutations per seed for the null.
    """
    ari: list[float] = []
    null_ari: list[float] = []
    for seed in seeds:
        local_labels = axis_clusters(local_features, k, n_init, seed)
        target_labels = axis_clusters(target_features, k, n_init, seed)
        ari.append(float(adjusted_rand_index(local_labels, target_labels)))
        rng = np.random.default_rng(seed)
        null_ari.extend(
            float(adjusted_rand_index(local_labels, rng.permutation(target_labels)))
            for _ in range(n_permutations)
        )
    ari_median = float(np.median(ari))
    null = np.asarray(null_ari)
    return AxesAgreement(
        ari_median=ari_median,
        ari=ari,
        null_median=float(np.median(null)),
        null_ari=null_ari,
        p_value=float((1 + np.sum(null >= ari_median)) / (1 + null.size)),
        k=k,
        seeds=[int(s) for s in seeds],
    )


def auc_accuracy_vs_flops(flops_removed: ArrayLike, accuracy: ArrayLike) -> float:
    """Proposed pruning AUC (§6): trapezoid area under accuracy vs FLOPs-removed fraction ÷ the grid's range.

    The result is in the accuracy's own units (a constant curve gives that constant). Points are sorted by
    ``flops_removed`` first.
    """
    x, y = _as_numpy(flops_removed), _as_numpy(accuracy)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("flops_removed and accuracy must be 1-D and of equal length")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    span = x[-1] - x[0] if x.size else 0.0
    if span <= 0:
        raise AnalysisError("The pruning AUC needs at least two different FLOPs reductions.")
    return float(np.trapezoid(y, x) / span)

"""Comparing the local and target axes: rank correlation, cluster agreement, pruning AUC.

Section numbers (§6, §7) refer to docs/methods.md, "Channel axes".

These work on per-channel scores (C values per layer), so they run on CPU in numpy / scipy. The
protocol (features, k-means with k = 4, ARI with a permutation null, AUC normalization) is the project's
**proposed** one.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import rankdata, spearmanr

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


def _nearest_centres(points: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(index (R, n), squared distance (R, n))`` of the nearest of ``centres (R, k, F)`` to each of ``points
    (R, F, n)``, one centre and one feature at a time (with k and F small, numpy's batched matmul and its argmin over
    a short last axis are several times slower)."""
    best = np.full(points[:, 0].shape, np.inf)
    index = np.zeros(best.shape, dtype=np.intp)
    for j in range(centres.shape[1]):
        distance = np.zeros_like(best)
        for feature in range(points.shape[1]):
            distance += (points[:, feature] - centres[:, j, feature, None]) ** 2
        closer = distance < best
        best = np.where(closer, distance, best)
        index[closer] = j
    return index, best


def kmeans_labels(points: np.ndarray, k: int, n_init: int = 20, seed: int = 0, max_iter: int = 300) -> np.ndarray:
    """k-means (Lloyd) labels ``(n,)`` of ``points (n, F)``: the best of ``n_init`` k-means++-seeded restarts; of a
    batch of point sets ``(R, n, F)`` (bootstrap resamples), labels ``(R, n)``, each set clustered on its own.

    All restarts (of all sets) run together as array operations (a layer's few hundred channels would otherwise spend
    their time in per-restart overhead), each until its assignment no longer changes; the restart with the lowest
    within-cluster sum of squares wins. An emptied cluster keeps its centre. Deterministic under ``seed``.
    """
    single = points.ndim == 2
    points = points[None] if single else points
    rng = np.random.default_rng(seed)
    sets, n, features = points.shape
    batch = np.arange(sets)[:, None]
    centres = np.empty((sets, n_init, k, features))
    centres[:, :, 0] = points[batch, rng.integers(n, size=(sets, n_init))]
    nearest = ((points[:, None] - centres[:, :, :1]) ** 2).sum(-1)
    for j in range(1, k):  # k-means++: next centre drawn with probability ∝ squared distance to the nearest one
        weights = nearest + (nearest.sum(2, keepdims=True) == 0)
        cumulative = np.cumsum(weights / weights.sum(2, keepdims=True), axis=2)
        picks = np.minimum((cumulative < rng.random((sets, n_init))[..., None]).sum(2), n - 1)
        centres[:, :, j] = points[batch, picks]
        nearest = np.minimum(nearest, ((points[:, None] - centres[:, :, j:j + 1]) ** 2).sum(-1))
    # every (set, restart) as one run; only the runs whose assignment still changes are iterated
    runs = sets * n_init
    centres = centres.reshape(runs, k, features)
    labels = np.full((runs, n), -1)
    inertia = np.zeros(runs)
    active = np.arange(runs)
    own = np.ascontiguousarray(points.transpose(0, 2, 1)[np.repeat(np.arange(sets), n_init)])  # (runs, F, n)
    for _ in range(max_iter):
        assigned, distance = _nearest_centres(own, centres[active])
        inertia[active] = distance.sum(1)
        changed = (assigned != labels[active]).any(1)
        labels[active] = assigned
        active, assigned, own = active[changed], assigned[changed], own[changed]
        if not len(active):
            break
        cells = (assigned + k * np.arange(len(active))[:, None]).ravel()
        counts = np.bincount(cells, minlength=len(active) * k).reshape(-1, k)
        sums = np.stack([np.bincount(cells, own[:, f].ravel(), len(active) * k) for f in range(features)], -1)
        centres[active] = np.where(counts[..., None] > 0, sums.reshape(-1, k, features)
                                   / np.maximum(counts, 1)[..., None], centres[active])
    best = inertia.reshape(sets, n_init).argmin(1)
    chosen = labels.reshape(sets, n_init, n)[np.arange(sets), best]
    return chosen[0] if single else chosen


def adjusted_rand_indices(labels_a: np.ndarray, labels_b: np.ndarray, k: int) -> np.ndarray:
    """:func:`adjusted_rand_index` of each row of two ``(R, n)`` label arrays with values in ``0..k−1``."""
    a, b = np.eye(k)[labels_a], np.eye(k)[labels_b]
    table = a.transpose(0, 2, 1) @ b

    def pairs(counts: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return (counts * (counts - 1) / 2).sum(axes)

    rows, columns = pairs(table.sum(2), (1,)), pairs(table.sum(1), (1,))
    n = labels_a.shape[1]
    total = n * (n - 1) / 2
    expected = rows * columns / total if total else np.zeros_like(rows)
    maximum = (rows + columns) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(maximum == expected, 1.0, (pairs(table, (1, 2)) - expected) / (maximum - expected))


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
    """k-means labels ``(C,)`` of channels described by ``features (C, F)``, each column z-scored first (§7); of a
    batch ``(R, C, F)``, labels ``(R, C)``.

    A constant feature column is set to 0 rather than divided by a zero standard deviation.
    """
    values = _as_numpy(features)
    if values.ndim == 1:
        values = values[:, None]
    if values.shape[-2] < k:
        raise AnalysisError(
            f"Clustering into k = {k} groups needs at least {k} channels, got {values.shape[-2]}."
        )
    std = values.std(axis=-2, keepdims=True)
    standardized = (values - values.mean(axis=-2, keepdims=True)) / np.where(std > 0, std, 1.0)
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


# ------------------------------------------------------------------------------------- the axes of one layer


def percentile_ranks(values: ArrayLike) -> np.ndarray:
    """Average-tie percentile ranks in (0, 1] along the last axis; an undefined (NaN) value gets the middle rank 0.5,
    so it neither leads nor trails a composite score."""
    values = _as_numpy(values)
    finite = np.isfinite(values)
    ranks = rankdata(np.where(finite, values, np.inf), axis=-1) / np.maximum(finite.sum(-1, keepdims=True), 1)
    return np.where(finite, ranks, 0.5)


def safe_log(values: ArrayLike) -> np.ndarray:
    return np.log(np.clip(np.nan_to_num(_as_numpy(values), nan=0.0), 1e-12, None))


def importance_scores(table: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """The two-axis importance scores (higher = keep) from the per-channel table (columns ``(C,)``, or ``(R, C)``
    for R resamples).

    ``local`` = mean percentile of I_X and of −R̄_X; ``target`` = mean percentile of I(ā;m) and of TE [proposed].
    """
    capture, overlap = _as_numpy(table["input_capture"]), _as_numpy(table["peer_overlap"])
    info, excess = _as_numpy(table["task_info"]), _as_numpy(table["target_excess"])
    return {"local": (percentile_ranks(capture) + percentile_ranks(-overlap)) / 2,
            "target": (percentile_ranks(info) + percentile_ranks(excess)) / 2,
            "input_capture": capture, "peer_overlap": -overlap, "peer_r2": -_as_numpy(table["peer_r2"]),
            "task_info": info, "target_excess": excess}


def axis_features(table: Mapping[str, ArrayLike]) -> tuple[np.ndarray, np.ndarray]:
    """The features each axis groups the channels by (§7): local ``[log I_X, R̄_X]``, target ``[I(ā;m), TE]``
    (``(C, 2)`` each, or ``(R, C, 2)``)."""
    local = np.stack([safe_log(table["input_capture"]), _as_numpy(table["peer_overlap"])], axis=-1)
    return local, np.stack([_as_numpy(table["task_info"]), _as_numpy(table["target_excess"])], axis=-1)


def row_spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman ρ of each row of two ``(R, n)`` arrays (finite values): the Pearson correlation of their average-tie
    ranks; NaN for a constant row."""
    ranks_a, ranks_b = rankdata(a, axis=-1), rankdata(b, axis=-1)
    ranks_a -= ranks_a.mean(-1, keepdims=True)
    ranks_b -= ranks_b.mean(-1, keepdims=True)
    norms = np.sqrt((ranks_a ** 2).sum(-1) * (ranks_b ** 2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norms > 0, (ranks_a * ranks_b).sum(-1) / norms, np.nan)


RELEVANCE_PREDICTORS = ("peer_r2", "task_info", "input_capture")
"""What lesion damage is compared with within bins of task relevance (the paper's claim 3)."""
MIN_BIN = 4
"""The fewest channels a task-relevance bin needs for a within-bin ρ."""


def relevance_bins(table: Mapping[str, ArrayLike], bins: int) -> dict[str, np.ndarray]:
    """Within each of ``bins`` quantile bins of task information (equal numbers of channels: the channel of rank r of
    C falls in bin ⌊r·bins/C⌋), Spearman ρ of the mean-ablation Δloss with each of :data:`RELEVANCE_PREDICTORS`:
    ``{predictor: (bins,) or (R, bins)}`` (NaN for a bin with fewer than :data:`MIN_BIN` channels or a constant
    column), and ``size``: the channels per bin."""
    info = _as_numpy(table["task_info"])
    single = info.ndim == 1
    info = info[None] if single else info
    n = info.shape[1]
    order = np.argsort(info, axis=1, kind="stable")
    edges = [b * n // bins for b in range(bins + 1)]
    out: dict[str, np.ndarray] = {"size": np.diff(edges).astype(float)}
    columns = {name: np.broadcast_to(_as_numpy(table[name]), info.shape) for name in (*RELEVANCE_PREDICTORS,
                                                                                      "lesion_dloss")}
    lesion = np.take_along_axis(columns["lesion_dloss"], order, 1)
    for name in RELEVANCE_PREDICTORS:
        values = np.take_along_axis(columns[name], order, 1)
        out[name] = np.stack([row_spearman(values[:, lo:hi], lesion[:, lo:hi]) if hi - lo >= MIN_BIN
                              else np.full(len(info), np.nan) for lo, hi in itertools.pairwise(edges)], axis=1)
        if single:
            out[name] = out[name][0]
    return out


def pooled_over_bins(rhos: ArrayLike, sizes: ArrayLike) -> np.ndarray | float:
    """``Σ n_b ρ_b / Σ n_b`` over the bins where ρ is defined (last axis; NaN when none is)."""
    rhos, sizes = _as_numpy(rhos), np.broadcast_to(_as_numpy(sizes), np.shape(rhos))
    kept = np.isfinite(rhos) & (sizes > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = np.where(kept, rhos * sizes, 0).sum(-1) / np.where(kept, sizes, 0).sum(-1)
    return float(pooled) if np.ndim(pooled) == 0 else pooled


def axes_statistics(table: Mapping[str, np.ndarray], cluster_k: int = 4, bins: int = 4, seed: int = 0,
                    n_init: int = 20) -> dict[str, np.ndarray]:
    """The statistics the axes are compared on, for R tables at once (columns ``(R, C)``: the bootstrap's
    resamples): ``spearman`` ρ(I_X, I(ā;m)), ``spearman_composite`` ρ(local, target), ``ari`` of one k-means seed
    (when there are more channels than clusters) and, when the lesions ran, ``relevance_<predictor>``: ρ of the
    lesion Δloss with each of :data:`RELEVANCE_PREDICTORS` within task-relevance bins, pooled
    (:func:`relevance_bins`). Each value is ``(R,)``."""
    scores = importance_scores(table)
    out = {"spearman": row_spearman(_as_numpy(table["input_capture"]), _as_numpy(table["task_info"])),
           "spearman_composite": row_spearman(scores["local"], scores["target"])}
    if np.shape(table["task_info"])[-1] > cluster_k:
        local, target = axis_features(table)
        out["ari"] = adjusted_rand_indices(axis_clusters(local, cluster_k, n_init, seed),
                                           axis_clusters(target, cluster_k, n_init, seed), cluster_k)
    if np.isfinite(_as_numpy(table["lesion_dloss"])).all():
        per_bin = relevance_bins(table, bins)
        out.update({f"relevance_{name}": pooled_over_bins(per_bin[name], per_bin["size"])
                    for name in RELEVANCE_PREDICTORS})
    return out

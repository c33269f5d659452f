"""Sign- and scale-invariant clustering of filters, and the elbow / silhouette view for choosing k (Babaiee et al.,
arXiv:2401.14469 / 2509.11711; docs/methods.md, "Master keys").

* **Clustering** (*proposed*: the papers cluster with a 1-D autoencoder, A.1). Each filter y becomes its centred
  unit vector x = (y - ȳ)/‖y - ȳ‖, so sign, scale and DC offset do not matter, and the similarity to a centroid c
  (a unit vector) is |cos| = |⟨x, c⟩|. The objective Σ_i max_j |⟨x_i, c_j⟩| is maximised by Lloyd iterations
  c_j ← normalise(Σ_{i∈j} s_i x_i) with s_i = sign⟨x_i, c_j⟩ (each step never lowers it), started from a
  k-means++ draw (probability ∝ (1 - max|cos|)²) and repeated over seeded restarts; the best restart is kept.
  Runs on the chosen device, vectorised over restarts and filters.
* **Choosing k**: the mean |cos| (elbow) and the silhouette with distance d = 1 - |cos| on a seeded sample.

The assignment to the 8 published filters is :mod:`fl_core.masterkeys.assignment`; the whole analysis of a model
:func:`fl_core.masterkeys.clustering.analyze_master_keys`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from fl_core.compute.device import resolve_device
from fl_core.compute.progress import Progress, report
from fl_core.errors import AnalysisError
from fl_core.masterkeys.depthwise import constant_filters
from fl_core.masterkeys.settings import DEFAULT_K, DEFAULT_RESTARTS, MAX_ITERATIONS
from fl_core.results import Result

TOLERANCE = 1e-6  # stop when the mean |cos| of every restart improves by less
SILHOUETTE_SAMPLE = 2000
DEFAULT_SWEEP = tuple(range(2, 13))


def centred_unit_vectors(filters: torch.Tensor) -> torch.Tensor:
    """x = (y - ȳ)/‖y - ȳ‖ of (N, k, k) filters as (N, k²); constant filters give 0 vectors.

    Each filter is first divided by its largest |y| (x is scale-free), so that tiny filters — subnormal float32
    weights of dead channels, down to 1e-40 in real exports — do not underflow in the squares of the norm.
    """
    flat = filters.reshape(len(filters), -1)
    flat = flat / flat.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(flat.dtype).tiny)
    centred = flat - flat.mean(dim=1, keepdim=True)
    return centred / centred.norm(dim=1, keepdim=True).clamp_min(torch.finfo(flat.dtype).tiny)


def kmeans_plus_plus(units: torch.Tensor, k: int, restarts: int, generator: torch.Generator) -> torch.Tensor:
    """k-means++ seeds for ``restarts`` independent runs: (R, k, D) rows of ``units``.

    The first seed is uniform; each next one is drawn with probability ∝ D², D = 1 - max_j |⟨x, c_j⟩|.
    """
    first = torch.randint(len(units), (restarts,), generator=generator, device=units.device)
    seeds = [units[first]]
    distance = 1 - (seeds[0] @ units.T).abs()  # (R, N)
    for _ in range(1, k):
        weights = distance.clamp_min(0) ** 2
        weights = torch.where(weights.sum(dim=1, keepdim=True) > 0, weights, torch.ones_like(weights))
        chosen = units[torch.multinomial(weights, 1, generator=generator).squeeze(1)]
        seeds.append(chosen)
        distance = torch.minimum(distance, 1 - (chosen @ units.T).abs())
    return torch.stack(seeds, dim=1)


def _assign(units: torch.Tensor, centroids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Best centroid per point and restart, and the signed cosine to it: (R, N) each."""
    similarity = torch.matmul(units, centroids.transpose(1, 2))  # (R, N, k)
    labels = similarity.abs().argmax(dim=-1)
    return labels, similarity.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def _signed_sums(units: torch.Tensor, labels: torch.Tensor, cosine: torch.Tensor, k: int) -> torch.Tensor:
    """Σ_{i∈j} s_i x_i per cluster and restart, (R, k, D), as one batched product with a signed membership matrix."""
    signs = torch.where(cosine < 0, -1.0, 1.0).to(units.dtype).unsqueeze(-1)
    members = torch.zeros(*labels.shape, k, dtype=units.dtype, device=units.device)
    members.scatter_(2, labels[..., None], signs)
    return torch.matmul(members.transpose(1, 2), units)


def _reseed_empty(sums: torch.Tensor, fit: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
    """Give every empty cluster the worst-fitting point of its restart (a rare event, looped per empty cluster)."""
    empty = (sums.norm(dim=-1) <= 1e-12).nonzero().tolist()
    fit = fit.clone()
    for restart, cluster in empty:
        worst = int(fit[restart].argmin())
        sums[restart, cluster] = units[worst]
        fit[restart, worst] = 2.0
    return sums


def lloyd_abs_cosine(units: torch.Tensor, centroids: torch.Tensor, max_iter: int = MAX_ITERATIONS,
                     tol: float = TOLERANCE) -> tuple[torch.Tensor, int]:
    """Lloyd iterations of the |cos| objective from (R, k, D) seeds, until no restart improves its mean |cos| by
    more than ``tol``; returns the centroids and the iterations run."""
    k = centroids.shape[1]
    previous = torch.full((centroids.shape[0],), -1.0, dtype=units.dtype, device=units.device)
    iteration = 0
    for iteration in range(1, max_iter + 1):  # noqa: B007 (the count is returned)
        labels, cosine = _assign(units, centroids)
        objective = cosine.abs().mean(dim=1)
        if bool((objective - previous <= tol).all()):
            break
        sums = _reseed_empty(_signed_sums(units, labels, cosine, k), cosine.abs(), units)
        centroids = sums / sums.norm(dim=-1, keepdim=True)
        previous = objective
    return centroids, iteration


@dataclass(frozen=True)
class FilterClustering(Result):
    """Sign- and scale-invariant clusters of filters (module docstring).

    Attributes:
        k: number of clusters.
        seed: seed of the k-means++ draws.
        restarts: independent runs; the best (largest mean |cos|) is kept.
        iterations: Lloyd iterations of the best run.
        objective: mean over filters of |cos| to their centroid.
        centroids: (k, ks, ks) unit-norm, zero-mean centroids, largest cluster first, each oriented like the
            majority of its members.
        sizes: members per cluster.
        labels: (N,) cluster of each filter, -1 for constant filters (no shape to cluster).
        signs: (N,) +1 when the filter points like its centroid, -1 when it is the negative.
        cosine: (N,) |cos| to its centroid (0 for constant filters).
    """

    k: int
    seed: int
    restarts: int
    iterations: int
    objective: float
    centroids: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray
    signs: np.ndarray
    cosine: np.ndarray

    _private_fields = ("labels", "signs", "cosine")

    @property
    def mean_abs_cosine(self) -> np.ndarray:
        """Mean |cos| of each cluster's members to its centroid, (k,)."""
        valid = self.labels >= 0
        totals = np.bincount(self.labels[valid], weights=self.cosine[valid], minlength=self.k)
        return totals / np.maximum(self.sizes, 1)


def cluster_filters(filters: torch.Tensor | np.ndarray, k: int = DEFAULT_K, *, restarts: int = DEFAULT_RESTARTS,
                    max_iter: int = MAX_ITERATIONS, seed: int = 0, device: str | torch.device | None = None
                    ) -> FilterClustering:
    """Cluster (N, ks, ks) filters by |cos| of their centred unit vectors (module docstring).

    Raises:
        AnalysisError: fewer filters with a shape than clusters.
    """
    device = resolve_device(device)
    filters = torch.as_tensor(filters, dtype=torch.float32)
    valid = ~constant_filters(filters)
    n_valid = int(valid.sum())
    if n_valid < k:
        raise AnalysisError(f"Only {n_valid} filters have a shape (the rest are constant); choose k ≤ {n_valid}.")
    units = centred_unit_vectors(filters[valid]).to(device)
    generator = torch.Generator(device=device).manual_seed(int(seed))
    centroids, iterations = lloyd_abs_cosine(units, kmeans_plus_plus(units, k, restarts, generator), max_iter)
    labels, cosine = _assign(units, centroids)
    best = int(cosine.abs().mean(dim=1).argmax())
    return _canonical_clustering(centroids[best], labels[best], cosine[best], valid, filters.shape[-1], seed,
                                 restarts, iterations)


def _canonical_clustering(centroids: torch.Tensor, labels: torch.Tensor, cosine: torch.Tensor, valid: torch.Tensor,
                          size: int, seed: int, restarts: int, iterations: int) -> FilterClustering:
    """Order clusters by size, orient each centroid like most of its members, put -1 labels on constant filters."""
    k = len(centroids)
    counts = torch.bincount(labels, minlength=k)
    orientation = torch.where(torch.zeros(k, device=labels.device, dtype=cosine.dtype).index_add_(
        0, labels, cosine.sign()) < 0, -1.0, 1.0)
    order = torch.argsort(counts, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(k, device=order.device)
    n = len(valid)
    full_labels, full_signs, full_cosine = np.full(n, -1), np.zeros(n), np.zeros(n)
    mask = valid.numpy()
    full_labels[mask] = rank[labels].cpu().numpy()
    full_signs[mask] = (torch.where(cosine < 0, -1.0, 1.0) * orientation[labels]).cpu().numpy()
    full_cosine[mask] = cosine.abs().cpu().numpy()
    oriented = (centroids * orientation[:, None])[order].double().cpu().numpy().reshape(k, size, size)
    return FilterClustering(k=k, seed=int(seed), restarts=int(restarts), iterations=int(iterations),
                            objective=float(full_cosine[mask].mean()), centroids=oriented,
                            sizes=counts[order].cpu().numpy(), labels=full_labels, signs=full_signs,
                            cosine=full_cosine)


def silhouette_abs_cosine(units: torch.Tensor, labels: torch.Tensor, k: int) -> float:
    """Mean silhouette (b - a)/max(a, b) with the distance d = 1 - |cos| between unit vectors (N, D).

    a: mean distance to the other members of the own cluster; b: smallest mean distance to another cluster;
    0 for members of singleton clusters (the scikit-learn convention).
    """
    distance = (1 - (units @ units.T).abs()).clamp_min(0)
    distance.fill_diagonal_(0)
    members = F.one_hot(labels, k).to(distance.dtype)
    counts = members.sum(dim=0)
    totals = distance @ members  # (N, k): summed distance to each cluster
    own = counts[labels]
    a = totals.gather(1, labels[:, None]).squeeze(1) / (own - 1).clamp_min(1)
    to_others = (totals / counts.clamp_min(1)).masked_fill(counts == 0, float("inf"))
    b = to_others.scatter(1, labels[:, None], float("inf")).min(dim=1).values
    score = torch.nan_to_num((b - a) / torch.maximum(a, b), nan=0.0)
    return float(torch.where(own > 1, score, torch.zeros_like(score)).mean())


@dataclass(frozen=True)
class ClusterSweep(Result):
    """Cluster quality against k: mean |cos| to the centroid (elbow) and silhouette (d = 1 - |cos|).

    Attributes:
        ks: numbers of clusters tried.
        mean_abs_cosine: objective of the best restart per k.
        silhouette: mean silhouette on ``sample_size`` filters drawn with ``seed``.
        sample_size: filters in the silhouette sample.
        seed: seed of the clustering and the sample.
    """

    ks: tuple[int, ...]
    mean_abs_cosine: tuple[float, ...]
    silhouette: tuple[float, ...]
    sample_size: int
    seed: int

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"k": self.ks, "mean_abs_cosine": self.mean_abs_cosine, "silhouette": self.silhouette})

    @property
    def best_k(self) -> int:
        """The k of the largest silhouette."""
        return self.ks[int(np.argmax(self.silhouette))]


def cluster_sweep(filters: torch.Tensor | np.ndarray, ks: Sequence[int] = DEFAULT_SWEEP, *,
                  restarts: int = DEFAULT_RESTARTS, max_iter: int = MAX_ITERATIONS, seed: int = 0,
                  sample_size: int = SILHOUETTE_SAMPLE, device: str | torch.device | None = None,
                  progress: Progress | None = None) -> ClusterSweep:
    """Cluster for each k and score it: the elbow / silhouette view for choosing k."""
    device = resolve_device(device)
    filters = torch.as_tensor(filters, dtype=torch.float32)
    valid = ~constant_filters(filters)
    generator = torch.Generator().manual_seed(int(seed))
    sample = torch.nonzero(valid).squeeze(1)
    sample = sample[torch.randperm(len(sample), generator=generator)[:sample_size]]
    units = centred_unit_vectors(filters[sample]).to(device)
    objectives, silhouettes = [], []
    for i, k in enumerate(ks):
        report(progress, i / len(ks), f"k = {k}")
        clustering = cluster_filters(filters, k, restarts=restarts, max_iter=max_iter, seed=seed, device=device)
        objectives.append(clustering.objective)
        labels = torch.as_tensor(clustering.labels[sample.numpy()], device=device)
        silhouettes.append(silhouette_abs_cosine(units, labels, k))
    report(progress, 1.0, "cluster sweep done")
    return ClusterSweep(ks=tuple(int(k) for k in ks), mean_abs_cosine=tuple(objectives),
                        silhouette=tuple(silhouettes), sample_size=len(sample), seed=int(seed))

"""Master keys: sign- and scale-invariant clustering of depthwise filters and their assignment to the 8 published
master key filters (Babaiee et al., arXiv:2401.14469 / 2509.11711; ``shared/reference/master_keys.md``).

* **Clustering** (*proposed*: the papers cluster with a 1-D autoencoder, A.1). Each filter y becomes its centred
  unit vector x = (y - ȳ)/‖y - ȳ‖, so sign, scale and DC offset do not matter, and the similarity to a centroid c
  (a unit vector) is |cos| = |⟨x, c⟩|. The objective Σ_i max_j |⟨x_i, c_j⟩| is maximised by Lloyd iterations
  c_j ← normalise(Σ_{i∈j} s_i x_i) with s_i = sign⟨x_i, c_j⟩ (each step never lowers it), started from a
  k-means++ draw (probability ∝ (1 - max|cos|)²) and repeated over seeded restarts; the best restart is kept.
  Runs on the chosen device, vectorised over restarts and filters.
* **Choosing k**: the mean |cos| (elbow) and the silhouette with distance d = 1 - |cos| on a seeded sample.
* **Assignment to the published filters** (B.6, the authors' swap rule): k* = argmax_k |⟨y - ȳ, x_k⟩|,
  a = ⟨y, x_k*⟩, b = mean(y), with x_k the centred unit published 7×7 filters; for other kernel sizes the
  idealized models of a fitting method at that size (:func:`fl_core.masterkeys.fitting.idealized_templates`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from fl_core.backend import Progress, report, resolve_device, sub_progress
from fl_core.errors import AnalysisError
from fl_core.io.models import LoadedModel
from fl_core.masterkeys.depthwise import (
    DepthwiseBank,
    DepthwiseLayer,
    constant_filters,
    depthwise_bank,
    layer_statistics,
)
from fl_core.masterkeys.fitting import FitMethod, ScaleSpaceResult, fit_filters, idealized_templates
from fl_core.masterkeys.scalespace import (
    AffineTemplateFit,
    affine_fit_to_templates,
    centred_cosine,
    load_published_filters,
    normalize_learned_filter,
)
from fl_core.results import Result

N_MASTER_KEYS = 8
DEFAULT_K = 8
DEFAULT_RESTARTS = 8
MAX_ITERATIONS = 100
TOLERANCE = 1e-6  # stop when the mean |cos| of every restart improves by less
SILHOUETTE_SAMPLE = 2000


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


def cluster_sweep(filters: torch.Tensor | np.ndarray, ks: Sequence[int] = range(2, 13), *,
                  restarts: int = DEFAULT_RESTARTS, seed: int = 0, sample_size: int = SILHOUETTE_SAMPLE,
                  device: str | torch.device | None = None, progress: Progress | None = None) -> ClusterSweep:
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
        clustering = cluster_filters(filters, k, restarts=restarts, seed=seed, device=device)
        objectives.append(clustering.objective)
        labels = torch.as_tensor(clustering.labels[sample.numpy()], device=device)
        silhouettes.append(silhouette_abs_cosine(units, labels, k))
    report(progress, 1.0, "cluster sweep done")
    return ClusterSweep(ks=tuple(int(k) for k in ks), mean_abs_cosine=tuple(objectives),
                        silhouette=tuple(silhouettes), sample_size=len(sample), seed=int(seed))


def master_key_templates(kernel_size: int, method: FitMethod = "B") -> tuple[np.ndarray, str]:
    """The 8 reference filters at a kernel size and their description.

    7×7: the published filters; other odd sizes: the idealized models of ``method`` (σ fitted to the published
    filters) at that size.
    """
    if kernel_size == 7:
        return load_published_filters(), "the 8 published 7×7 master key filters"
    return idealized_templates(method, kernel_size), (f"the 8 idealized models (method {method}) at "
                                                      f"{kernel_size}×{kernel_size}")


@dataclass(frozen=True)
class PublishedAssignment(Result):
    """Each filter assigned to the nearest master key by the authors' affine rule (B.6), counted per layer/stage.

    Attributes:
        templates: which 8 reference filters were used.
        counts: (8,) filters per master key 1..8 (constant filters are not counted).
        mean_abs_cosine: (8,) mean |cos(y - ȳ, x_k)| of the filters assigned to each key (NaN when none).
        median_abs_cosine: median over the shaped filters of their best |cos(y - ȳ, x_k)| (to the key they are
            assigned to): one number for how close a bank is to the 8 keys (random filters: low).
        layers: layer names, rows of ``counts_per_layer``.
        counts_per_layer: (L, 8).
        stages: stage labels, rows of ``counts_per_stage``.
        counts_per_stage: (S, 8).
        n_constant: constant filters left out.
        fit: the per-filter fit (assignment, amplitude a, offset b, cosine); not serialised.
    """

    templates: str
    counts: np.ndarray
    mean_abs_cosine: np.ndarray
    median_abs_cosine: float
    layers: tuple[str, ...]
    counts_per_layer: np.ndarray
    stages: tuple[str, ...]
    counts_per_stage: np.ndarray
    n_constant: int
    fit: AffineTemplateFit

    _private_fields = ("fit",)

    def to_frame(self) -> pd.DataFrame:
        """Counts per layer: one row per layer, columns ``key_1`` … ``key_8``."""
        frame = pd.DataFrame(self.counts_per_layer, columns=[f"key_{i + 1}" for i in range(N_MASTER_KEYS)])
        return frame.assign(layer=list(self.layers))[["layer", *frame.columns]]

    def stage_frame(self) -> pd.DataFrame:
        """Counts per stage: one row per stage."""
        frame = pd.DataFrame(self.counts_per_stage, columns=[f"key_{i + 1}" for i in range(N_MASTER_KEYS)])
        return frame.assign(stage=list(self.stages))[["stage", *frame.columns]]


def assign_to_master_keys(filters: torch.Tensor | np.ndarray, layer_index: np.ndarray,
                          layers: Sequence[DepthwiseLayer], method: FitMethod = "B") -> PublishedAssignment:
    """Assign each filter to one of the 8 master keys (module docstring) and count per layer and stage."""
    filters = np.asarray(filters, dtype=np.float64)
    templates, description = master_key_templates(filters.shape[-1], method)
    fit = affine_fit_to_templates(filters, templates)
    shaped = ~constant_filters(torch.from_numpy(filters)).numpy()
    per_layer = np.zeros((len(layers), N_MASTER_KEYS), dtype=int)
    np.add.at(per_layer, (layer_index[shaped], fit.assignment[shaped]), 1)
    stage_ids = sorted({lay.stage for lay in layers})
    labels = {lay.stage: lay.stage_label for lay in layers}
    per_stage = np.stack([per_layer[[lay.stage == s for lay in layers]].sum(axis=0) for s in stage_ids])
    counts = per_layer.sum(axis=0)
    cos_sums = np.bincount(fit.assignment[shaped], weights=np.abs(fit.cosine[shaped]), minlength=N_MASTER_KEYS)
    mean_cos = np.divide(cos_sums, counts, out=np.full(N_MASTER_KEYS, np.nan), where=counts > 0)
    best = np.abs(fit.cosine[shaped])
    return PublishedAssignment(templates=description, counts=counts, mean_abs_cosine=mean_cos,
                               median_abs_cosine=float(np.median(best)) if best.size else float("nan"),
                               layers=tuple(lay.name for lay in layers), counts_per_layer=per_layer,
                               stages=tuple(labels[s] for s in stage_ids), counts_per_stage=per_stage,
                               n_constant=int((~shaped).sum()), fit=fit)


def type_representatives(filters: torch.Tensor | np.ndarray, fit: AffineTemplateFit) -> dict[int, np.ndarray]:
    """Per master key (1..8) with members: the normalised mean of sign(a)·(y - ȳ)/‖y - ȳ‖ over its filters.

    These are a model's own "master keys" in the orientation of the templates, comparable to the published
    filters (which are zero-mean as well).
    """
    units = centred_unit_vectors(torch.as_tensor(filters, dtype=torch.float64)).numpy()
    shaped = np.linalg.norm(units, axis=1) > 0
    signs = np.where(fit.amplitude < 0, -1.0, 1.0)[shaped]
    sums = np.zeros((N_MASTER_KEYS, units.shape[1]))
    np.add.at(sums, fit.assignment[shaped], units[shaped] * signs[:, None])
    size = np.shape(filters)[-1]
    norms = np.linalg.norm(sums, axis=1)
    return {i + 1: (sums[i] / norms[i]).reshape(size, size) for i in range(N_MASTER_KEYS) if norms[i] > 0}


def bank_assignment(source: LoadedModel | DepthwiseBank, method: FitMethod = "B", *, kernel_size: int | None = None,
                    layers: Sequence[str] | None = None, stages: Sequence[int] | None = None) -> PublishedAssignment:
    """:func:`assign_to_master_keys` of a model's depthwise filters of one kernel size (default: the most frequent),
    without clustering them."""
    bank = source if isinstance(source, DepthwiseBank) else depthwise_bank(source)
    chosen = bank.select(kernel_size, layers, stages)
    filters, layer_index = bank.filters(chosen)
    return assign_to_master_keys(filters, layer_index, chosen, method)


def assignment_summary_frame(assignments: Mapping[str, PublishedAssignment]) -> pd.DataFrame:
    """One row per bank (by label): filters assigned, median best |cos| to the 8 keys, and the count per key."""
    return pd.DataFrame([{"bank": label, "filters": int(a.counts.sum()), "median_abs_cosine": a.median_abs_cosine,
                          **{f"key_{i + 1}": int(n) for i, n in enumerate(a.counts)}}
                         for label, a in assignments.items()])


def model_master_keys(source: LoadedModel | DepthwiseBank, method: FitMethod = "B", *,
                      kernel_size: int | None = None, layers: Sequence[str] | None = None,
                      stages: Sequence[int] | None = None) -> dict[int, np.ndarray]:
    """A model's own master keys: key (1..8) -> the per-key mean filter (:func:`type_representatives`) of its
    depthwise filters of one kernel size, assigned as in :func:`assign_to_master_keys`."""
    bank = source if isinstance(source, DepthwiseBank) else depthwise_bank(source)
    filters, _ = bank.filters(bank.select(kernel_size, layers, stages))
    return type_representatives(filters, bank_assignment(bank, method, kernel_size=kernel_size, layers=layers,
                                                         stages=stages).fit)


def fit_model_master_keys(source: LoadedModel | DepthwiseBank, method: FitMethod = "B", *,
                          kernel_size: int | None = None, layers: Sequence[str] | None = None,
                          stages: Sequence[int] | None = None) -> ScaleSpaceResult:
    """σ (and α) of each master key *in a model*: the method's fit to its per-key mean filter
    (:func:`model_master_keys`); keys whose mean filter has no response to its normalising monomial (B.3) are
    left out."""
    bank = source if isinstance(source, DepthwiseBank) else depthwise_bank(source)
    keys = model_master_keys(bank, method, kernel_size=kernel_size, layers=layers, stages=stages)
    fittable = {}
    for index, representative in keys.items():
        with contextlib.suppress(AnalysisError):
            normalize_learned_filter(representative, index)
            fittable[index] = representative
    size = next(iter(keys.values())).shape[-1]
    count = sum(lay.n_filters for lay in bank.select(kernel_size, layers, stages))
    return fit_filters(fittable, method, f"per-key mean filters of {bank.label} ({count:,} {size}×{size} "
                                         f"filters, keys {', '.join(map(str, fittable))})")


@dataclass(frozen=True)
class FilterCluster(Result):
    """One cluster: its size and centroid, and how it compares with the 8 master keys.

    Attributes:
        size: members.
        share: fraction of the clustered filters.
        centroid: (k, k) zero-mean unit-norm centroid.
        mean_abs_cosine: mean |cos| of its members to the centroid (tightness).
        master_key: the reference filter (1..8) most similar to the centroid by |cos|.
        master_key_cosine: signed centred cosine between centroid and that reference filter.
        composition: (8,) members per master key under the affine assignment.
    """

    size: int
    share: float
    centroid: np.ndarray
    mean_abs_cosine: float
    master_key: int
    master_key_cosine: float
    composition: np.ndarray


@dataclass(frozen=True)
class MasterKeyResult(Result):
    """Clusters of a model's depthwise filters of one kernel size, and their assignment to the 8 master keys.

    ``to_dict()`` is the ``masterkeys`` CLI JSON (``k``, ``n_filters``, ``clusters`` [{``size``, ``centroid``}],
    ``published_assignment`` {``counts``}); ``to_frame()`` the cluster table.

    Attributes:
        spec, label: the model.
        kernel_size: k of the analysed k×k filters.
        kernel_sizes: filters per kernel size in the model.
        k, seed, restarts: clustering settings.
        n_filters: filters analysed (constant ones included; they are not clustered).
        n_constant: constant filters.
        objective: mean |cos| of the filters to their centroid.
        clusters: per cluster, largest first.
        published_assignment: counts per master key, layer and stage.
        layer_statistics: per-layer statistics (:func:`fl_core.masterkeys.depthwise.layer_statistics`).
        sweep: the elbow / silhouette view, when requested.
        skipped: depthwise layers left out (kernel shape).
        filters, labels, cosine, layer_index, templates: per-filter arrays (filters flipped to their centroid's
            orientation, cluster, |cos| to the centroid, layer) and the reference filters, for figures; not
            serialised.
    """

    spec: str
    label: str
    kernel_size: int
    kernel_sizes: dict[int, int]
    k: int
    seed: int
    restarts: int
    n_filters: int
    n_constant: int
    objective: float
    clusters: tuple[FilterCluster, ...]
    published_assignment: PublishedAssignment
    layer_statistics: tuple[dict, ...]
    sweep: ClusterSweep | None
    skipped: tuple[str, ...]
    filters: np.ndarray
    labels: np.ndarray
    cosine: np.ndarray
    layer_index: np.ndarray
    templates: np.ndarray

    _private_fields = ("filters", "labels", "cosine", "layer_index", "templates")

    def to_frame(self) -> pd.DataFrame:
        """One row per cluster: size, share, tightness, nearest master key and its cosine, composition."""
        return pd.DataFrame([{"cluster": i + 1, "size": c.size, "share": c.share,
                              "mean_abs_cosine": c.mean_abs_cosine, "master_key": c.master_key,
                              "master_key_cosine": c.master_key_cosine,
                              **{f"key_{j + 1}": int(n) for j, n in enumerate(c.composition)}}
                             for i, c in enumerate(self.clusters)])

    def layer_frame(self) -> pd.DataFrame:
        return pd.DataFrame(list(self.layer_statistics))

    def members(self, cluster: int, count: int = 32) -> np.ndarray:
        """Up to ``count`` member filters of a cluster (0-based), the best fitting first, flipped to the centroid."""
        index = np.flatnonzero(self.labels == cluster)
        return self.filters[index[np.argsort(-self.cosine[index], kind="stable")[:count]]]


def _cluster_summaries(clustering: FilterClustering, assignment: np.ndarray, templates: np.ndarray
                       ) -> tuple[FilterCluster, ...]:
    total = max(int(clustering.sizes.sum()), 1)
    similarity = centred_cosine(clustering.centroids[:, None], templates[None])  # (k, 8)
    tightness = clustering.mean_abs_cosine
    summaries = []
    for j in range(clustering.k):
        best = int(np.argmax(np.abs(similarity[j])))
        composition = np.bincount(assignment[clustering.labels == j], minlength=N_MASTER_KEYS)
        summaries.append(FilterCluster(size=int(clustering.sizes[j]), share=float(clustering.sizes[j] / total),
                                       centroid=clustering.centroids[j], mean_abs_cosine=float(tightness[j]),
                                       master_key=best + 1, master_key_cosine=float(similarity[j, best]),
                                       composition=composition))
    return tuple(summaries)


def analyze_master_keys(source: LoadedModel | DepthwiseBank, k: int = DEFAULT_K, *, kernel_size: int | None = None,
                        layers: Sequence[str] | None = None, stages: Sequence[int] | None = None,
                        restarts: int = DEFAULT_RESTARTS, seed: int = 0, sweep: Sequence[int] | None = None,
                        method: FitMethod = "B", device: str | torch.device | None = None,
                        progress: Progress | None = None) -> MasterKeyResult:
    """Extract, cluster and assign a model's depthwise filters of one kernel size.

    Args:
        source: a loaded model (full or weights-only) or its :class:`~fl_core.masterkeys.depthwise.DepthwiseBank`.
        k: clusters.
        kernel_size: which k×k filters (default: the most frequent size).
        layers, stages: restrict to these layer names / stage indices.
        restarts, seed: clustering restarts and seed.
        sweep: values of k for the elbow / silhouette view (``None``: skip it).
        method: fitting method of the idealized templates used for kernel sizes other than 7.
        device: where to cluster.
        progress: ``progress(fraction, message)``.
    """
    bank = source if isinstance(source, DepthwiseBank) else depthwise_bank(source)
    chosen = bank.select(kernel_size, layers, stages)
    size = chosen[0].kernel_size
    filters, layer_index = bank.filters(chosen)
    report(progress, 0.05, f"clustering {len(filters):,} {size}×{size} filters into {k}")
    clustering = cluster_filters(filters, k, restarts=restarts, seed=seed, device=device)
    report(progress, 0.3, "assigning to the 8 master keys")
    assignment = assign_to_master_keys(filters, layer_index, chosen, method)
    templates, _ = master_key_templates(size, method)
    swept = None
    if sweep:
        swept = cluster_sweep(filters, sweep, restarts=restarts, seed=seed, device=device,
                              progress=sub_progress(progress, 0.35, 0.95))
    report(progress, 1.0, "master keys done")
    return MasterKeyResult(
        spec=bank.spec, label=bank.label, kernel_size=size, kernel_sizes=bank.kernel_sizes, k=k, seed=seed,
        restarts=restarts, n_filters=len(filters), n_constant=assignment.n_constant, objective=clustering.objective,
        clusters=_cluster_summaries(clustering, assignment.fit.assignment, templates),
        published_assignment=assignment,
        layer_statistics=tuple(layer_statistics(bank, chosen).to_dict(orient="records")), sweep=swept,
        skipped=bank.skipped, filters=filters.numpy() * clustering.signs[:, None, None],
        labels=clustering.labels, cosine=clustering.cosine, layer_index=layer_index, templates=templates)

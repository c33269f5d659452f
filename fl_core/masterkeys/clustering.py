"""Master keys of a model: its depthwise filters of one kernel size clustered by |cos|
(:mod:`fl_core.masterkeys.kmeans`) and assigned to the 8 published master key filters
(:mod:`fl_core.masterkeys.assignment`), the clusters compared with those filters; one frozen
:class:`MasterKeySettings` says what is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd

from fl_core.arguments import ImagesLike, ModelLike, as_model, as_settings, weights_only_data
from fl_core.compute.budgets import check_clustering
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import ArgumentError, value_text
from fl_core.masterkeys.assignment import (
    N_MASTER_KEYS,
    PublishedAssignment,
    assign_to_master_keys,
    master_key_templates,
)
from fl_core.masterkeys.depthwise import DepthwiseBank, depthwise_bank, layer_statistics
from fl_core.masterkeys.kmeans import (
    ClusterSweep,
    FilterClustering,
    cluster_filters,
    cluster_sweep,
)
from fl_core.masterkeys.scalespace import centred_cosine
from fl_core.masterkeys.settings import MasterKeyOverrides, MasterKeySettings
from fl_core.results import Result, with_model_columns

if TYPE_CHECKING:
    from typing_extensions import Unpack


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

    _figures: ClassVar[dict[str, str]] = {
        "centroids": "fl_core.masterkeys.plots:centroids_vs_keys_figure",
        "composition": "fl_core.masterkeys.plots:composition_figure",
        "members": "fl_core.masterkeys.plots:members_figure",
        "stages": "fl_core.masterkeys.plots:stage_counts_figure",
        "layers": "fl_core.masterkeys.plots:layer_counts_figure",
        "sweep": "fl_core.masterkeys.plots:sweep_figure",
    }

    def missing_figure(self, kind: str) -> str | None:
        if kind == "sweep" and self.sweep is None:
            return "No sweep over k was run: analyse with sweep=(2, 4, 8, 12) to draw it."
        return None

    def figure_inputs(self, kind: str) -> tuple:
        if kind in ("stages", "layers"):
            return (self.published_assignment,)
        return (self.sweep,) if kind == "sweep" else (self,)

    def cluster_frame(self) -> pd.DataFrame:
        """One row per cluster: the model's label and spec, size, share, tightness, nearest master key and its
        cosine."""
        return with_model_columns(pd.DataFrame([{"cluster": i + 1, "size": c.size, "share": c.share,
                                                 "mean_abs_cosine": c.mean_abs_cosine, "master_key": c.master_key,
                                                 "master_key_cosine": c.master_key_cosine}
                                                for i, c in enumerate(self.clusters)]), self.label, self.spec)

    def to_frame(self) -> pd.DataFrame:
        """One row per cluster and published master key (long): the cluster's row of :meth:`cluster_frame`, then
        ``key`` (1-8) and ``key_filters``, how many of the cluster's filters are assigned to that key."""
        composition = pd.DataFrame([{"cluster": i + 1, "key": j + 1, "key_filters": int(n)}
                                    for i, c in enumerate(self.clusters) for j, n in enumerate(c.composition)])
        return self.cluster_frame().merge(composition, on="cluster")

    def cluster_label(self, cluster: int) -> int:
        """The internal label of cluster number ``cluster`` (1 … k, as :meth:`to_frame` numbers them)."""
        if isinstance(cluster, bool) or not isinstance(cluster, int | np.integer) or not 1 <= cluster <= len(
                self.clusters):
            raise ArgumentError(f"cluster {value_text(cluster)}: the clusters are numbered 1 to {len(self.clusters)}, "
                                "as in to_frame().")
        return int(cluster) - 1

    def layer_frame(self) -> pd.DataFrame:
        return pd.DataFrame(list(self.layer_statistics))

    def members(self, cluster: int = 1, count: int = 32) -> np.ndarray:
        """Up to ``count`` member filters of a cluster (numbered from 1, largest first, as in :meth:`to_frame`), the
        best fitting first, flipped to the centroid."""
        index = np.flatnonzero(self.labels == self.cluster_label(cluster))
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


def analyze_master_keys(model: ModelLike | DepthwiseBank, data: ImagesLike | None = None,
                        settings: MasterKeySettings | None = None, *, device: DeviceLike = None,
                        progress: ProgressLike = None,
                        **setting_overrides: Unpack[MasterKeyOverrides]) -> MasterKeyResult:
    """Extract, cluster and assign a model's depthwise filters of one kernel size.

    Args:
        model: a model (spec string, :class:`LoadedModel` or ``nn.Module``; full or weights-only) or its
            :class:`~fl_core.masterkeys.depthwise.DepthwiseBank`.
        data: not used: the filters are the data (images given as every family takes them are ignored
            with a notice, so one loop can pass the same data to every family).
        settings: clusters, restarts, seed, which filters, the sweep and the templates' fitting method;
            ``setting_overrides`` replace fields (``k=8``, ``stages=(2, 3)``, ...).
        **setting_overrides: fields of ``settings`` to replace, by name.
        device: where to cluster.
        progress: ``progress(fraction, message)``.
    """
    weights_only_data(data, "analyze_master_keys")
    settings = as_settings(MasterKeySettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    source = model if isinstance(model, DepthwiseBank) else as_model(model, progress=progress)
    s = settings
    bank = source if isinstance(source, DepthwiseBank) else depthwise_bank(source)
    chosen = bank.select(s.kernel_size, s.layers, s.stages)
    size = chosen[0].kernel_size
    filters, layer_index = bank.filters(chosen)
    check_clustering(len(filters), size * size, max((s.k, *(s.sweep or ()))), s.restarts, s.max_iterations,
                     what=f"{size}×{size} depthwise filters of {bank.label}")
    report(progress, 0.05, f"clustering {len(filters):,} {size}×{size} filters into {s.k}")
    clustering = cluster_filters(filters, s.k, restarts=s.restarts, max_iter=s.max_iterations, seed=s.seed,
                                 device=device)
    report(progress, 0.3, "assigning to the 8 master keys")
    assignment = assign_to_master_keys(filters, layer_index, chosen, s.method)
    templates, _ = master_key_templates(size, s.method)
    swept = None
    if s.sweep:
        swept = cluster_sweep(filters, s.sweep, restarts=s.restarts, max_iter=s.max_iterations, seed=s.seed,
                              device=device, progress=sub_progress(progress, 0.35, 0.95))
    report(progress, 1.0, "master keys done")
    return MasterKeyResult(
        spec=bank.spec, label=bank.label, kernel_size=size, kernel_sizes=bank.kernel_sizes, k=s.k, seed=s.seed,
        restarts=s.restarts, n_filters=len(filters), n_constant=assignment.n_constant,
        objective=clustering.objective, clusters=_cluster_summaries(clustering, assignment.fit.assignment, templates),
        published_assignment=assignment,
        layer_statistics=tuple(layer_statistics(bank, chosen).to_dict(orient="records")), sweep=swept,
        skipped=bank.skipped, filters=filters.numpy() * clustering.signs[:, None, None],
        labels=clustering.labels, cosine=clustering.cosine, layer_index=layer_index, templates=templates)

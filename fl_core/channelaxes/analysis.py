"""Channel Axes: task relevance vs local replaceability of every channel of a layer (Safaai et al. 2026).

``analyze_channels`` runs, for one conv layer of a model (:func:`analyze_layers` for several, sharing their passes):

1. one streaming pass over the calibration set for every layer analysed (:mod:`fl_core.channelaxes.layerstats`);
2. the **local axis** (input capture I_X, peer overlap R̄_X, peer-reconstruction R²) and the **target axis** (task
   information I(ā;m) with its noise floor and permutation p-values, target-excess TE, redundancy/synergy proxies);
3. lesions (mean/zero-ablation) and peer replacement of every channel on the evaluation set, batched
   (:mod:`fl_core.channelaxes.interventions`);
4. FLOPs-matched pruning curves for each criterion with and without recovery fine-tune
   (:mod:`fl_core.channelaxes.pruning`);
5. the comparison of the axes: Spearman ρ, the ARI of their k-means groupings with a permutation null, which axis
   predicts removability better (lesion Δloss and pruning AUC), the paper's claim 3 within task-relevance bins, all
   with bootstrap intervals over images (:mod:`fl_core.channelaxes.significance`); optionally the same at
   initialization, over several seeds (:mod:`fl_core.channelaxes.initialization`), and the paper's claims as rows
   (:mod:`fl_core.channelaxes.claims`).

All definitions are the project's **proposed** ones (docs/methods.md, "Channel axes"); the paper's method
section is not public. Sign conventions: every *score* is an importance, higher = keep; Δloss > 0 = the
intervention hurt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch

from fl_core.arguments import ImagesLike, ModelLike, as_model, as_settings
from fl_core.channelaxes.axes import (
    AxesComparison,
    Removability,
    compare_axes,
    interval_of,
    layer_intervals,
    removability,
)
from fl_core.channelaxes.calibration import ChannelData, as_channel_data
from fl_core.channelaxes.comparison import importance_scores, spearman_matrix
from fl_core.channelaxes.estimate import channels_estimate, input_seconds
from fl_core.channelaxes.initialization import SharedMode, init_networks, recalibrate_batchnorm, shared_mode
from fl_core.channelaxes.interventions import ChannelInterventions, channel_interventions, folded_around
from fl_core.channelaxes.layerstats import (
    LayerStatistics,
    LocalAxis,
    TargetAxis,
    collect_statistics,
    local_axis,
    target_axis,
)
from fl_core.channelaxes.pruning import PruningResult, prune_curves
from fl_core.channelaxes.resampling import LayerSamples
from fl_core.channelaxes.settings import ChannelOverrides, ChannelSettings
from fl_core.channelaxes.significance import Bootstrap
from fl_core.channelaxes.site import ChannelSite, channel_layer, locate_site
from fl_core.compute.budgets import check_channel_statistics
from fl_core.compute.device import DeviceLike, analysis_threads, cpu_layout, cpu_threads, resolve_device
from fl_core.compute.progress import Progress, ProgressLike, progress_callback, report, silent, sub_progress
from fl_core.errors import AnalysisError, ArgumentError
from fl_core.io.layers import ConvLayer, conv_inventory
from fl_core.io.models import LoadedModel
from fl_core.results import Result, jsonable, with_model_columns

AXIS_SCORES = ("local", "target", "input_capture", "peer_overlap", "peer_r2", "task_info", "target_excess")
"""Importance scores derived from the two axes (higher = keep), also usable as pruning criteria."""
CORRELATED_METRICS = ("input_capture", "peer_overlap", "peer_r2", "task_info", "target_excess", "synergy",
                      "lesion_dloss", "replacement_dloss", "peer_support")
"""Per-channel columns of :meth:`ChannelAxesResult.metric_correlations` (with the baseline scores)."""

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fl_core.channelaxes.claims import ClaimsTable


def channel_table(stats: LayerStatistics, local, target) -> pd.DataFrame:
    """One row per channel with every local- and target-axis metric."""

    def numpy(t: torch.Tensor) -> np.ndarray:
        return t.detach().double().cpu().numpy()

    significance = target.significance
    columns = {
        "index": np.arange(stats.site.n_channels),
        "input_capture": numpy(local.capture.normalized),
        "input_capture_group": numpy(local.capture.group_normalized),
        "input_capture_rayleigh": numpy(local.capture.rayleigh),
        "input_capture_raw": numpy(local.capture.raw),
        "peer_overlap": numpy(local.overlap.mean_abs),
        "peer_overlap_max": numpy(local.overlap.max_abs),
        "peer_overlap_topk": numpy(local.overlap.topk_mean),
        "peer_r2": numpy(local.reconstruction.r2),
        "peer_r2_all": numpy(local.r2_all_post),
        "peer_r2_all_pre": numpy(local.r2_all_pre),
        "task_info": numpy(target.task_info),
        "task_info_corrected": numpy(target.task_info) - significance.null_mean,
        "task_info_p": significance.p_value,
        "task_info_gauss": numpy(target.task_info_gauss),
        "target_excess": numpy(target.target_excess),
        "redundancy": numpy(target.pairwise.redundancy),
        "synergy": numpy(target.pairwise.synergy),
        "net_synergy": numpy(target.pairwise.net_synergy),
        "triplet_synergy": numpy(target.triplets.synergy) if target.triplets is not None
        else np.full(stats.site.n_channels, np.nan),
        "filter_norm": numpy(stats.weight.flatten(1).norm(dim=1)),
        "activation_mean": numpy(local.post_means),
        "dead": local.dead.cpu().numpy(),
    }
    return pd.DataFrame(columns)


@dataclass(frozen=True)
class ChannelAxesResult(Result):
    """Both axes, the interventions, the pruning curves and their comparison for one layer.

    Attributes:
        spec, label: the model.
        layer: the conv.
        site: where its channels were observed and intervened on.
        data: description of the calibration / evaluation sets.
        n_calibration, n_evaluation: their sizes.
        positions: spatial positions per image at the site.
        settings: the estimator choices.
        seed: the data split / sampling seed.
        table: one row per channel (every metric, its task information's p-value, lesion effect and baseline score).
        axes: Spearman ρ and ARI between the axes, with intervals and the task information's noise floor.
        init_axes: the same at initialization, its first seed (``None`` if not run).
        init_spec: the initialization checkpoint compared.
        calibration_loss, calibration_accuracy: the network on the calibration images.
        interventions: the batched lesion / replacement run (``None`` if not run).
        removability: which scores predict removability (claim 3 within task-relevance bins included).
        pruning: the pruning curves (``None`` if not run).
        filters: the conv weight (for tiles and hover).
        warnings: notes for the user.
        timings: seconds per stage.
        init_seeds_axes: the comparison at every initialization seed (the first is ``init_axes``).
        init_recalibrated: the initialization's BatchNorm statistics were re-estimated on the calibration images.
        depth: the layer's position among the network's convolutions (0 = the first).
        n_layers: the network's convolutions.
        source: the data source as given (a path, ``crops``), for the command that reproduces the result.
    """

    spec: str
    label: str
    layer: str
    site: ChannelSite
    data: str
    n_calibration: int
    n_evaluation: int
    positions: int
    settings: ChannelSettings
    seed: int
    table: pd.DataFrame
    axes: AxesComparison
    init_axes: AxesComparison | None
    init_spec: str | None
    calibration_loss: float
    calibration_accuracy: float
    interventions: ChannelInterventions | None
    removability: Removability
    pruning: PruningResult | None
    filters: np.ndarray
    warnings: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    init_seeds_axes: tuple[AxesComparison, ...] = ()
    init_recalibrated: bool = False
    depth: int = 0
    n_layers: int = 1
    source: str | None = None

    _private_fields = ("table", "filters", "interventions", "pruning", "axes", "init_axes", "init_seeds_axes")

    _figures: ClassVar[dict[str, str]] = {
        "axes": "fl_core.channelaxes.plots:axes_scatter_figure",
        "lesions": "fl_core.channelaxes.plots:lesion_bars_figure",
        "peers": "fl_core.channelaxes.plots:peer_support_figure",
        "correlations": "fl_core.channelaxes.plots:metric_correlation_figure",
        "filter": "fl_core.channelaxes.plots:filter_figure",
        "pruning": "fl_core.channelaxes.plots:pruning_curves_figure",
        "claims": "fl_core.channelaxes.plots:claims_figure",
    }

    def missing_figure(self, kind: str) -> str | None:
        if kind == "pruning" and self.pruning is None:
            return "No pruning curves were computed: run the analysis with pruning=PruningSettings()."
        if kind in ("lesions", "peers") and self.interventions is None:
            return "No lesions were run: run the analysis with lesion_kinds=('mean', 'replace')."
        if kind == "peers" and "replace" not in self.interventions.dloss:
            return "No peer replacement was run: run the analysis with 'replace' among its lesion_kinds."
        return None

    def figure_inputs(self, kind: str) -> tuple:
        if kind == "claims":
            return (self.claims(),)
        if kind != "pruning":
            return (self,)
        if self.pruning is None:
            raise AnalysisError("No pruning curves were computed: run the analysis with pruning=PruningSettings().")
        return (self.pruning,)

    def to_frame(self) -> pd.DataFrame:
        """One row per channel: the model's label and spec, the layer, then :attr:`table`."""
        return with_model_columns(self.table, self.label, self.spec, layer=self.layer)

    @property
    def init_summary(self) -> AxesComparison | None:
        """The initialization's comparison over all its seeds: ρ and ARI averaged over the seeds, their intervals
        from the seeds' bootstrap resamples averaged resample by resample (one seed: that seed's comparison)."""
        seeds = self.init_seeds_axes or ((self.init_axes,) if self.init_axes is not None else ())
        if len(seeds) <= 1:
            return seeds[0] if seeds else None
        intervals = {name: combined for name in seeds[0].intervals
                     if (combined := Bootstrap.combine([s.intervals.get(name) for s in seeds])) is not None}
        return AxesComparison(spearman=float(np.mean([s.spearman for s in seeds])),
                              spearman_composite=float(np.mean([s.spearman_composite for s in seeds])),
                              agreement=None, spearman_ci=interval_of(intervals, "spearman"),
                              spearman_composite_ci=interval_of(intervals, "spearman_composite"),
                              ari_ci=interval_of(intervals, "ari"), intervals=intervals)

    def init_dict(self) -> dict | None:
        """The ``init`` key of :meth:`to_dict`: the spec, the seeds, whether BatchNorm was recalibrated, ``spearman``
        and ``spearman_ci`` over the seeds (and every other key of :class:`AxesComparison`), and ``per_seed``."""
        summary = self.init_summary
        if summary is None:
            return None
        seeds = self.init_seeds_axes or (self.init_axes,)
        ari = [s.ari for s in seeds]
        return {"spec": self.init_spec, "seeds": [s.seed for s in seeds], "recalibrated": self.init_recalibrated,
                **summary.to_dict(), "ari": float(np.nanmean(ari)) if np.isfinite(ari).any() else None,
                "spearman_sd": float(np.std([s.spearman for s in seeds])),
                "per_seed": [s.to_dict() for s in seeds] if len(seeds) > 1 else []}

    def to_dict(self) -> dict:
        """JSON-safe result with the keys of docs/cli.md, "JSON output" (``layer``, ``channels``, ``spearman``,
        ``spearman_ci``, ``ari``, ``init``, ``pruning``, ``claims``)."""
        out = super().to_dict()
        agreement = self.axes.agreement
        out.update({
            "channels": self.table.to_dict(orient="records"),
            "spearman": self.axes.spearman,
            "spearman_ci": self.axes.spearman_ci,
            "spearman_composite": self.axes.spearman_composite,
            "ari": agreement.ari_median if agreement else None,
            "ari_ci": self.axes.ari_ci,
            "ari_null": agreement.null_median if agreement else None,
            "ari_p_value": agreement.p_value if agreement else None,
            "agreement": agreement.to_dict() if agreement else None,
            "task_information": None if self.axes.significance is None else self.axes.significance.to_dict(),
            "shared_mode": None if self.axes.shared_mode is None else self.axes.shared_mode.to_dict(),
            "bootstrap": self.axes.to_dict().get("bootstrap"),
            "init": self.init_dict(),
            "interventions": None if self.interventions is None else {
                "base_loss": self.interventions.base_loss, "base_accuracy": self.interventions.base_accuracy,
                "replacement": self.replacement_method(),
                **{k: v for k, v in self.interventions.effects.to_dict().items() if k not in ("loss", "accuracy")}},
            "pruning": {} if self.pruning is None else self.pruning.curves_dict(),
            "pruning_protocol": None if self.pruning is None else {
                k: v for k, v in self.pruning.to_dict().items() if k != "curves"},
            "claims": self.claims().rows(),
        })
        return jsonable(out)

    def claims(self) -> ClaimsTable:
        """The paper's five claims measured on this layer (:func:`fl_core.channelaxes.claims.channel_claims`)."""
        from fl_core.channelaxes.claims import channel_claims

        return channel_claims([self])

    def noise_floor_sentence(self) -> str:
        """``Trained: task information is at the noise floor for 92 % of channels on 384 images ...`` (and the same
        at initialization)."""
        parts = []
        for name, axes in (("trained", self.axes), ("at initialization", self.init_axes)):
            if axes is not None and axes.significance is not None:
                parts.append(f"{name}: {axes.significance.sentence()}")
        text = "; ".join(parts)
        return text[:1].upper() + text[1:] + "." if parts else ""

    def metric_correlations(self) -> pd.DataFrame:
        """Spearman ρ between every pair of :data:`CORRELATED_METRICS` and the baseline criteria's scores (``score_*``
        but random) that vary across the channels (a quantity that is the same for every channel has no rank
        correlation: it drew a blank row), a square table by column name."""
        scores = [c for c in self.table.columns if c.startswith("score_") and c != "score_random"]
        columns = [c for c in (*CORRELATED_METRICS, *scores) if self.table[c].nunique() > 1]
        return spearman_matrix(self.table[columns])

    def replacement_method(self) -> str:
        """How the peer-replacement Δloss relates to folding the reconstruction into the next layer."""
        readers = ", ".join(self.site.consumers)
        if self.site.exact_fold:
            return f"per-position substitution at {self.site.activation}, identical to folding it into {readers}"
        if self.site.foldable:
            return (f"per-position substitution at {self.site.activation}; folding it into {readers} would be exact "
                    "only away from their zero-padded borders")
        return f"per-position substitution at {self.site.activation} (its readers cannot absorb it as a fold)"

    def summary_frame(self) -> pd.DataFrame:
        """The per-layer summary: axis agreement with intervals, the noise floor, removability and pruning AUCs, one
        row per quantity (``low``, ``high``: the bootstrap interval where there is one)."""
        axes = self.axes
        rows = [("Spearman ρ (I_X vs task information)", axes.spearman, axes.spearman_ci),
                ("Spearman ρ (local vs target composite)", axes.spearman_composite, axes.spearman_composite_ci)]
        if axes.agreement:
            rows += [(f"ARI (k = {axes.agreement.k}, median of {len(axes.agreement.ari)} seeds)",
                      axes.agreement.ari_median, axes.ari_ci),
                     ("ARI permutation null (median)", axes.agreement.null_median, None),
                     ("ARI p-value", axes.agreement.p_value, None)]
        if axes.significance is not None:
            rows += [("channels with measurable task information (p < 0.05)", axes.significance.significant_share,
                      None), ("task information noise floor E[I] under independence (nats)",
                              axes.significance.null_mean, None)]
        if axes.shared_mode is not None:
            rows.append(("shared mode: variance share of the first principal component",
                         axes.shared_mode.variance_share, None))
        init = self.init_summary
        if init is not None:
            seeds = len(self.init_seeds_axes) or 1
            rows.append((f"Spearman ρ at initialization ({seeds} seed{'s' * (seeds > 1)})", init.spearman,
                         init.spearman_ci))
            if self.init_axes.agreement:
                rows.append(("ARI at initialization", self.init_axes.agreement.ari_median, self.init_axes.ari_ci))
            if self.init_axes.significance is not None:
                rows.append(("channels with measurable task information at initialization",
                             self.init_axes.significance.significant_share, None))
            if self.init_axes.shared_mode is not None:
                mode = self.init_axes.shared_mode
                rows += [("shared mode at initialization: variance share", mode.variance_share, None),
                         ("shared mode at initialization: |correlation with the margin|",
                          abs(mode.margin_correlation), None),
                         ("Spearman ρ at initialization without the shared mode", mode.spearman_without, None)]
        removable = self.removability
        for axis in ("local", "target"):
            if axis in removable.lesion_spearman:
                rows.append((f"ρ({axis} score, lesion Δloss)", removable.lesion_spearman[axis], None))
        if removable.relevance is not None:
            for name, value in removable.relevance.pooled.items():
                rows.append((f"within task-relevance bins: ρ({name.replace('_', ' ')}, lesion Δloss)", value,
                             removable.relevance.ci.get(name)))
        for key, value in removable.pruning_auc.items():
            curve = self.pruning.curves[key.removesuffix("_finetuned")]
            ci = curve.auc_finetuned_ci if key.endswith("_finetuned") else curve.auc_ci
            rows.append((f"pruning AUC, {key.replace('_', ' ')} (n = {self.pruning.n_images})", value, ci))
        for key, value in removable.refinement.items():
            rows.append((f"lesion rank-R², {key.replace('_', ' ')} (the project's own test)", value, None))
        return pd.DataFrame([(q, v, ci[0] if ci else np.nan, ci[1] if ci else np.nan) for q, v, ci in rows],
                            columns=["quantity", "value", "low", "high"])


@dataclass(frozen=True)
class LayerAxes:
    """One layer's statistics pass and both axes (:func:`layers_axes`)."""

    site: ChannelSite
    stats: LayerStatistics
    local: LocalAxis
    target: TargetAxis
    table: pd.DataFrame

    def samples(self, shrinkage: float, interventions: ChannelInterventions | None = None) -> LayerSamples:
        return LayerSamples.of(self.stats, self.local, shrinkage, interventions)

    def shared_mode(self) -> SharedMode:
        return shared_mode(self.stats.pooled, self.stats.margin, self.table["input_capture"].to_numpy())


def layers_axes(model: torch.nn.Module, layers: Sequence[str], data: ChannelData, settings: ChannelSettings,
                device: torch.device, progress: Progress | None) -> list[LayerAxes]:
    """Sites, statistics and both axes of several layers of a private model copy from one pass over the calibration
    images (on a copy with every BatchNorm folded but the layers' own: :func:`~.interventions.folded_around`)."""
    example = data.calibration.head(1)[0].to(device)
    sites = [locate_site(model, layer, example) for layer in layers]
    passes = collect_statistics(folded_around(model, sites, example), sites, data.calibration, device=device,
                                batch_size=settings.batch_size, progress=progress)
    out = []
    for site, stats in zip(sites, passes):
        local = local_axis(stats, settings.axes)
        target = target_axis(stats, local.peers, settings.axes)
        out.append(LayerAxes(site, stats, local, target, channel_table(stats, local, target)))
    return out


def layer_axes(model: torch.nn.Module, layer: str, data: ChannelData, settings: ChannelSettings,
               device: torch.device, progress: Progress | None):
    """``(site, statistics, local axis, per-channel table)`` of one layer (:func:`layers_axes`)."""
    axes = layers_axes(model, [layer], data, settings, device, progress)[0]
    return axes.site, axes.stats, axes.local, axes.table


def resolve_layers(loaded: LoadedModel, layers: Sequence[str | None] | str) -> list[ConvLayer]:
    """The convolutions analysed, every one checked before any image is read: names (``None``: the default layer,
    :func:`~fl_core.channelaxes.site.channel_layer`), or ``"all"``: every convolution with at least two output
    channels, in the network's order."""
    if layers == "all":
        chosen = [lay for lay in conv_inventory(loaded) if lay.out_channels >= 2]
    else:
        chosen = [channel_layer(loaded, name) for name in ([layers] if isinstance(layers, str) else layers)]
    names = [lay.name for lay in chosen]
    if not chosen or len(set(names)) < len(names):
        raise ArgumentError(f"layers: give one or more different convolutions, not {names or 'none'}.")
    for lay in chosen:
        check_channel_statistics(lay.out_channels, what=f"layer {lay.name} of {loaded.label}")
    return chosen


def init_comparisons(init: ModelLike, layers: Sequence[str], data: ChannelData, settings: ChannelSettings,
                     device: torch.device, progress: Progress | None) -> tuple[list[list[AxesComparison]], bool]:
    """Each layer's axes at every initialization seed (:func:`~.initialization.init_networks`), one statistics pass
    per seed for all layers, after recalibrating BatchNorm when ``settings.init_recalibrate``: ``(per layer: one
    comparison per seed, whether BatchNorm was recalibrated)``."""
    networks = init_networks(init, settings.init_seed, settings.init_seeds)
    comparisons: list[list[AxesComparison]] = [[] for _ in layers]
    recalibrated = False
    for i, (seed, network) in enumerate(networks):
        part = sub_progress(progress, i / len(networks), (i + 1) / len(networks))
        model = cpu_layout(network.copy_model().to(device).eval(), device)
        if settings.init_recalibrate:
            report(part, 0.0, f"initialization{'' if seed is None else f' seed {seed}'}: recalibrating BatchNorm")
            recalibrated = recalibrate_batchnorm(model, data.calibration, device, settings.batch_size) > 0
        for j, axes in enumerate(layers_axes(model, layers, data, settings, device, sub_progress(part, 0.1, 0.9))):
            comparisons[j].append(compare_axes(
                axes.table, settings, layer_intervals(axes.samples(settings.axes.shrinkage), settings),
                axes.target.significance, axes.shared_mode(), seed))
    return comparisons, recalibrated


def analyze_layers(loaded: LoadedModel, data: ChannelData, settings: ChannelSettings, layers: Sequence[ConvLayer],
                   init: ModelLike | None, device: torch.device, progress: Progress | None
                   ) -> list[ChannelAxesResult]:
    """:func:`analyze_channels` of each of ``layers`` (resolved by :func:`resolve_layers`): one statistics pass for
    all of them, then each layer's lesions, pruning curves and intervals, then the initialization's axes (one pass
    per seed for all layers)."""
    if len(data.calibration) < 2 * settings.axes.k:
        raise AnalysisError(f"Use at least {2 * settings.axes.k} calibration images (got {len(data.calibration)}).")
    names = [lay.name for lay in layers]
    inventory = [lay.name for lay in conv_inventory(loaded)]
    share = 1 / (len(layers) + (init is not None) + 1)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    model = cpu_layout(loaded.copy_model().to(device).eval(), device)
    passes = layers_axes(model, names, data, settings, device, sub_progress(progress, 0, share))
    timings["statistics"] = time.perf_counter() - start
    evaluation = data.evaluation.materialized(settings.memory_bytes)
    parts = []
    for i, axes in enumerate(passes):
        stage = sub_progress(progress, share * (i + 1), share * (i + 2))
        parts.append(_layer_result(model, axes, data, evaluation, settings, device, stage))
    init_seeds: list[list[AxesComparison]] = [[] for _ in layers]
    recalibrated = False
    if init is not None:
        start = time.perf_counter()
        init_seeds, recalibrated = init_comparisons(init, names, data, settings, device,
                                                    sub_progress(progress, 1 - share, 1))
        timings["initialization"] = time.perf_counter() - start
    report(progress, 1.0, "done")
    init_spec = None if init is None else as_model(init, "init").spec
    results = []
    for (axes, table, comparison, interventions, pruning, removable, stage_timings), seeds in zip(parts, init_seeds):
        stats = axes.stats
        results.append(ChannelAxesResult(
            spec=loaded.spec, label=loaded.label, layer=axes.site.layer, site=axes.site, data=data.description,
            n_calibration=stats.n_images, n_evaluation=len(evaluation), positions=stats.positions, settings=settings,
            seed=data.seed, table=table, axes=comparison, init_axes=seeds[0] if seeds else None, init_spec=init_spec,
            calibration_loss=stats.loss, calibration_accuracy=stats.accuracy, interventions=interventions,
            removability=removable, pruning=pruning, filters=stats.weight.float().cpu().numpy(),
            warnings=data.warnings + dead_channel_notes(table, axes.site.layer),
            timings={**timings, **stage_timings}, init_seeds_axes=tuple(seeds), init_recalibrated=recalibrated,
            depth=inventory.index(axes.site.layer) if axes.site.layer in inventory else 0,
            n_layers=len(inventory), source=data.source))
    return results


def _layer_result(model: torch.nn.Module, axes: LayerAxes, data: ChannelData, evaluation, settings: ChannelSettings,
                  device: torch.device, progress: Progress | None):
    """One layer's lesions, comparison with intervals, pruning curves and removability."""
    timings: dict[str, float] = {}
    interventions = None
    local = axes.local
    if settings.lesion_kinds:
        start = time.perf_counter()
        interventions = channel_interventions(
            model, axes.site, evaluation, local.post_means, local.replacement_peers, local.replacement_beta,
            local.replacement_intercept, kinds=settings.lesion_kinds, device=device, batch_size=settings.batch_size,
            memory_bytes=settings.memory_bytes, progress=sub_progress(progress, 0, 0.6))
        timings["interventions"] = time.perf_counter() - start
    table = add_intervention_columns(axes.table, interventions)
    report(progress, 0.6, "comparing the axes")
    start = time.perf_counter()
    intervals = layer_intervals(axes.samples(settings.axes.shrinkage, interventions), settings)
    comparison = compare_axes(table, settings, intervals, axes.target.significance, axes.shared_mode())
    timings["significance"] = time.perf_counter() - start
    pruning_result = None
    if settings.pruning is not None:
        start = time.perf_counter()
        pruning_result = prune_curves(model, axes.site.layer, data.calibration, evaluation, importance_scores(table),
                                      settings.pruning, device=device, means=local.post_means.cpu().numpy(),
                                      readers=axes.site.consumers if axes.site.foldable else (),
                                      batch_size=settings.batch_size, memory_bytes=settings.memory_bytes,
                                      resamples=settings.axes.bootstrap, seed=settings.axes.seed,
                                      progress=sub_progress(progress, 0.65, 1))
        timings["pruning"] = time.perf_counter() - start
        for name, scores in pruning_result.scores.items():
            if name not in AXIS_SCORES:
                table[f"score_{name}"] = scores
    removable = removability(table, pruning_result, settings.relevance_bins, intervals)
    return axes, table, comparison, interventions, pruning_result, removable, timings


def dead_channel_notes(table: pd.DataFrame, layer: str) -> tuple[str, ...]:
    """A note naming the channels whose activation is constant on every calibration image, when there are any."""
    dead = table.loc[table["dead"], "index"].tolist()
    if not dead:
        return ()
    shown = ", ".join(map(str, dead[:12])) + (f" and {len(dead) - 12} more" if len(dead) > 12 else "")
    return (f"{len(dead)} channel{'s' * (len(dead) > 1)} of {layer} ({shown}) never change on the calibration images "
            "(dead): their task information is 0, their peer R² 1 (their mean reconstructs them exactly), and they "
            "rank as the most removable.",)


def analyze_channels(model: ModelLike, data: ImagesLike | ChannelData | None = None,
                     settings: ChannelSettings | None = None, *, init: ModelLike | None = None,
                     device: DeviceLike = None, progress: ProgressLike = None,
                     **setting_overrides: Unpack[ChannelOverrides]) -> ChannelAxesResult:
    """Both axes, lesions, peer replacement and pruning curves of one conv layer, compared (module docstring).

    Args:
        model: the model (a spec string, :class:`LoadedModel` or ``nn.Module``; never changed: the analysis works on
            private copies).
        data: calibration and evaluation sets (:func:`fl_core.channelaxes.calibration.channel_data`), or their source
            (``"crops"``, the default, a labelled ImageFolder tree, or labelled images a script holds, e.g. a
            ``TensorDataset(images, labels)``: :func:`~fl_core.arguments.as_images`), 256 + 64 images split with the
            axes' seed.
        settings: the layer, estimator choices, interventions and pruning protocol; ``setting_overrides`` replace
            fields (``layer=``, ``cluster_k=``, the axes' ``k=``, ``seed=``, ``init_seeds=``, ...).
        **setting_overrides: fields of ``settings`` to replace, by name.
        init: the same architecture at initialization, to compare the axes before training (a registry architecture
            at random init is drawn from ``init_seed`` on, ``init_seeds`` times).
        device: where to run.
        progress: ``progress(fraction, message)``; its first message is the expected duration
            (:func:`~fl_core.channelaxes.estimate.estimate_channels`).
    """
    settings = as_settings(ChannelSettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    with cpu_threads(analysis_threads(device)):  # all cores when idle; fewer beside other work
        loaded = as_model(model, progress=progress)
        conv = resolve_layers(loaded, [settings.layer])[0]  # before the calibration data: a bad layer is refused
        if not isinstance(data, ChannelData):
            report(progress, 0.0, "preparing the calibration and evaluation images")
        data = as_channel_data(data, loaded, seed=settings.axes.seed)
        init = None if init is None else as_model(init, "init", progress)
        if progress is not silent:
            report(progress, 0.0, f"{conv.name}: timing the network to estimate the duration")
            estimate = channels_estimate(loaded, conv.name, len(data.calibration), len(data.evaluation), settings,
                                         init is not None, device, reading=input_seconds(data, device))
            report(progress, 0.0, f"{conv.name}: {estimate.text()} expected")
        return analyze_layers(loaded, data, settings, [conv], init, device, progress)[0]


def add_intervention_columns(table: pd.DataFrame, interventions: ChannelInterventions | None) -> pd.DataFrame:
    """Add the lesion / replacement columns (NaN for kinds that were not run)."""
    table = table.copy()
    n = len(table)
    names = {"mean": "lesion", "zero": "lesion_zero", "replace": "replacement"}
    for kind, prefix in names.items():
        done = interventions is not None and kind in interventions.dloss
        table[f"{prefix}_dloss"] = interventions.dloss[kind] if done else np.full(n, np.nan)
        table[f"{prefix}_daccuracy"] = interventions.daccuracy[kind] if done else np.full(n, np.nan)
    support = None if interventions is None else interventions.peer_support
    table["peer_support"] = support if support is not None else np.full(n, np.nan)
    return table

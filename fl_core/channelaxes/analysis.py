"""Channel Axes: task relevance vs local replaceability of every channel of a layer (Safaai et al. 2026).

``analyze_channels`` runs, for one conv layer of a model:

1. one streaming pass over the calibration set (:mod:`fl_core.channelaxes.layerstats`);
2. the **local axis** (input capture I_X, peer overlap R̄_X, peer-reconstruction R²) and the **target axis** (task
   information I(ā;m), target-excess TE, redundancy/synergy proxies);
3. lesions (mean/zero-ablation) and peer replacement of every channel on the evaluation set, batched
   (:mod:`fl_core.channelaxes.interventions`);
4. FLOPs-matched pruning curves for each criterion with and without recovery fine-tune
   (:mod:`fl_core.channelaxes.pruning`);
5. the comparison of the axes: Spearman ρ, the ARI of their k-means groupings with a permutation null, and which
   axis predicts removability better (lesion Δloss and pruning AUC), optionally at initialization too.

All definitions are the project's **proposed** ones (docs/methods.md, "Channel axes"); the paper's method
section is not public. Sign conventions: every *score* is an importance, higher = keep; Δloss > 0 = the
intervention hurt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch
from scipy.stats import rankdata

from fl_core.arguments import ImagesLike, ModelLike, as_model, as_settings
from fl_core.backend import (
    DeviceLike,
    Progress,
    ProgressLike,
    analysis_threads,
    cpu_layout,
    cpu_threads,
    progress_callback,
    report,
    resolve_device,
    silent,
    sub_progress,
)
from fl_core.channelaxes.calibration import ChannelData, as_channel_data
from fl_core.channelaxes.comparison import AxesAgreement, axes_agreement, spearman, spearman_matrix
from fl_core.channelaxes.estimate import channels_estimate, input_seconds
from fl_core.channelaxes.interventions import ChannelInterventions, channel_interventions, folded_around
from fl_core.channelaxes.layerstats import (
    LayerStatistics,
    collect_layer_statistics,
    local_axis,
    target_axis,
)
from fl_core.channelaxes.pruning import PruningResult, prune_curves
from fl_core.channelaxes.settings import ChannelOverrides, ChannelSettings
from fl_core.channelaxes.site import ChannelSite, channel_layer, locate_site
from fl_core.compute.budgets import check_channel_statistics
from fl_core.errors import AnalysisError
from fl_core.results import Result, jsonable, with_model_columns

AXIS_SCORES = ("local", "target", "input_capture", "peer_overlap", "peer_r2", "task_info", "target_excess")
"""Importance scores derived from the two axes (higher = keep), also usable as pruning criteria."""
CORRELATED_METRICS = ("input_capture", "peer_overlap", "peer_r2", "task_info", "target_excess", "synergy",
                      "lesion_dloss", "replacement_dloss", "peer_support")
"""Per-channel columns of :meth:`ChannelAxesResult.metric_correlations` (with the baseline scores)."""

if TYPE_CHECKING:
    from typing_extensions import Unpack


def _percentile(values: np.ndarray) -> np.ndarray:
    """Average-tie percentile ranks in (0, 1]; NaN ranks lowest."""
    values = np.where(np.isfinite(values), values, -np.inf)
    return rankdata(values) / len(values)


def _safe_log(values: np.ndarray) -> np.ndarray:
    return np.log(np.clip(np.nan_to_num(values, nan=0.0), 1e-12, None))


def importance_scores(table: pd.DataFrame) -> dict[str, np.ndarray]:
    """The two-axis importance scores (higher = keep) of :data:`AXIS_SCORES` from the per-channel table.

    ``local`` = mean percentile of I_X and of −R̄_X; ``target`` = mean percentile of I(ā;m) and of TE [proposed].
    """
    capture, overlap = table["input_capture"].to_numpy(), table["peer_overlap"].to_numpy()
    info, excess = table["task_info"].to_numpy(), table["target_excess"].to_numpy()
    return {"local": (_percentile(capture) + _percentile(-overlap)) / 2,
            "target": (_percentile(info) + _percentile(excess)) / 2,
            "input_capture": capture, "peer_overlap": -overlap, "peer_r2": -table["peer_r2"].to_numpy(),
            "task_info": info, "target_excess": excess}


def channel_table(stats: LayerStatistics, local, target) -> pd.DataFrame:
    """One row per channel with every local- and target-axis metric."""

    def numpy(t: torch.Tensor) -> np.ndarray:
        return t.detach().double().cpu().numpy()

    columns = {
        "index": np.arange(stats.site.n_channels),
        "input_capture": numpy(local.capture.normalized),
        "input_capture_rayleigh": numpy(local.capture.rayleigh),
        "input_capture_raw": numpy(local.capture.raw),
        "peer_overlap": numpy(local.overlap.mean_abs),
        "peer_overlap_max": numpy(local.overlap.max_abs),
        "peer_overlap_topk": numpy(local.overlap.topk_mean),
        "peer_r2": numpy(local.reconstruction.r2),
        "peer_r2_all": numpy(local.r2_all_post),
        "peer_r2_all_pre": numpy(local.r2_all_pre),
        "task_info": numpy(target.task_info),
        "task_info_gauss": numpy(target.task_info_gauss),
        "target_excess": numpy(target.target_excess),
        "redundancy": numpy(target.pairwise.redundancy),
        "synergy": numpy(target.pairwise.synergy),
        "net_synergy": numpy(target.pairwise.net_synergy),
        "triplet_synergy": numpy(target.triplets.synergy) if target.triplets is not None
        else np.full(stats.site.n_channels, np.nan),
        "filter_norm": numpy(stats.weight.flatten(1).norm(dim=1)),
        "activation_mean": numpy(local.post_means),
    }
    return pd.DataFrame(columns)


@dataclass(frozen=True)
class AxesComparison(Result):
    """How the two axes relate across a layer's channels (proposed, §7).

    Attributes:
        spearman: ρ between input capture I_X and task information I(ā;m).
        spearman_composite: ρ between the composite local and target scores.
        agreement: ARI of k-means groupings of [log I_X, R̄_X] vs [I(ā;m), TE] with a permutation null
            (``None`` when the layer has too few channels).
    """

    spearman: float
    spearman_composite: float
    agreement: AxesAgreement | None


def compare_axes(table: pd.DataFrame, settings: ChannelSettings | None = None) -> AxesComparison:
    """Spearman ρ and the ARI of the axis groupings of one layer (``settings``: default ChannelSettings())."""
    settings = settings or ChannelSettings()
    scores = importance_scores(table)
    local = np.column_stack([_safe_log(table["input_capture"].to_numpy()), table["peer_overlap"].to_numpy()])
    target = np.column_stack([table["task_info"].to_numpy(), table["target_excess"].to_numpy()])
    agreement = None
    if len(table) > settings.cluster_k:
        agreement = axes_agreement(local, target, k=settings.cluster_k, seeds=range(settings.cluster_seeds))
    return AxesComparison(spearman=spearman(table["input_capture"], table["task_info"]),
                          spearman_composite=spearman(scores["local"], scores["target"]), agreement=agreement)


@dataclass(frozen=True)
class Removability(Result):
    """Which per-channel scores predict measured removability (proposed, §5-§6).

    Attributes:
        lesion_spearman: ρ(importance, Δloss of mean-ablation) per score (higher = better predictor).
        replacement_spearman: ρ(importance, Δloss after peer replacement) per score.
        better_axis_lesion: ``local`` or ``target``, whichever composite has the larger lesion ρ (``None``: a tie,
            or no ρ defined).
        pruning_auc: AUC of the ``local`` and ``target`` pruning curves (fine-tuned ones as ``*_finetuned``).
        better_axis_pruning: the axis whose pruning curve has the larger AUC (without fine-tune; ``None``: a tie or
            no pruning).
        refinement: rank-regression R² of the lesion effect on [I_X, I(ā;m)] (``r2_base``) and with peer overlap
            and peer R² added (``r2_with_peers``), and the ``gain``: how much peer support refines removability.
    """

    lesion_spearman: dict[str, float]
    replacement_spearman: dict[str, float]
    better_axis_lesion: str | None
    pruning_auc: dict[str, float]
    better_axis_pruning: str | None
    refinement: dict[str, float]


def _rank_r2(target: np.ndarray, predictors: list[np.ndarray]) -> float:
    """In-sample R² of least squares (with intercept) of the ranks of ``target`` on the ranks of ``predictors``."""
    y = _percentile(target)
    design = np.column_stack([np.ones(len(y)), *(_percentile(p) for p in predictors)])
    coefficients, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coefficients
    total = ((y - y.mean()) ** 2).sum()
    return float(1 - (residual @ residual) / total) if total > 0 else float("nan")


def better_axis(scores: dict[str, float]) -> str | None:
    """``local`` or ``target``, whichever scores higher; ``None`` for a tie or an undefined score (e.g. no lesion
    changed the loss, so no ρ is defined)."""
    local, target = scores["local"], scores["target"]
    if not (np.isfinite(local) and np.isfinite(target)) or np.isclose(local, target, rtol=0, atol=1e-9):
        return None
    return "local" if local > target else "target"


def removability(table: pd.DataFrame, pruning: PruningResult | None) -> Removability:
    """Spearman ρ of every importance score with the lesion and replacement effects; pruning AUCs by axis."""
    scores = importance_scores(table)
    lesion, replace = table["lesion_dloss"].to_numpy(), table["replacement_dloss"].to_numpy()
    lesion_rho = {k: spearman(v, lesion) for k, v in scores.items()} if np.isfinite(lesion).any() else {}
    replace_rho = {k: spearman(v, replace) for k, v in scores.items()} if np.isfinite(replace).any() else {}
    better_lesion = better_axis(lesion_rho) if lesion_rho else None
    auc: dict[str, float] = {}
    if pruning is not None:
        for axis in ("local", "target"):
            if axis in pruning.curves:
                auc[axis] = pruning.curves[axis].auc
                if pruning.curves[axis].auc_finetuned is not None:
                    auc[f"{axis}_finetuned"] = pruning.curves[axis].auc_finetuned
    better_pruning = better_axis(auc) if {"local", "target"} <= set(auc) else None
    refinement: dict[str, float] = {}
    if np.isfinite(lesion).all() and len(table) > 6:
        base = [table["input_capture"].to_numpy(), table["task_info"].to_numpy()]
        peers = [-table["peer_overlap"].to_numpy(), -table["peer_r2"].to_numpy()]
        r2_base, r2_peers = _rank_r2(lesion, base), _rank_r2(lesion, base + peers)
        refinement = {"r2_base": r2_base, "r2_with_peers": r2_peers, "gain": r2_peers - r2_base}
    return Removability(lesion_spearman=lesion_rho, replacement_spearman=replace_rho,
                        better_axis_lesion=better_lesion, pruning_auc=auc, better_axis_pruning=better_pruning,
                        refinement=refinement)


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
        table: one row per channel (every metric, lesion effect and baseline score).
        axes: Spearman ρ and ARI between the axes.
        init_axes: the same at initialization (``None`` if not run).
        init_spec: the initialization checkpoint compared.
        calibration_loss, calibration_accuracy: the network on the calibration images.
        interventions: the batched lesion / replacement run (``None`` if not run).
        removability: which scores predict removability.
        pruning: the pruning curves (``None`` if not run).
        filters: the conv weight (for tiles and hover).
        warnings: notes for the user.
        timings: seconds per stage.
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

    _private_fields = ("table", "filters", "interventions", "pruning", "axes", "init_axes")

    _figures: ClassVar[dict[str, str]] = {
        "axes": "fl_core.channelaxes.plots:axes_scatter_figure",
        "lesions": "fl_core.channelaxes.plots:lesion_bars_figure",
        "peers": "fl_core.channelaxes.plots:peer_support_figure",
        "correlations": "fl_core.channelaxes.plots:metric_correlation_figure",
        "filter": "fl_core.channelaxes.plots:filter_figure",
        "pruning": "fl_core.channelaxes.plots:pruning_curves_figure",
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
        return (self.pruning,) if kind == "pruning" else (self,)

    def to_frame(self) -> pd.DataFrame:
        """One row per channel: the model's label and spec, the layer, then :attr:`table`."""
        return with_model_columns(self.table, self.label, self.spec, layer=self.layer)

    def to_dict(self) -> dict:
        """JSON-safe result with the keys of docs/cli.md, "JSON output" (``layer``, ``channels``, ``spearman``, ``ari``,
        ``pruning``)."""
        out = super().to_dict()
        agreement = self.axes.agreement
        out.update({
            "channels": self.table.to_dict(orient="records"),
            "spearman": self.axes.spearman,
            "spearman_composite": self.axes.spearman_composite,
            "ari": agreement.ari_median if agreement else None,
            "ari_null": agreement.null_median if agreement else None,
            "ari_p_value": agreement.p_value if agreement else None,
            "agreement": agreement.to_dict() if agreement else None,
            "init": None if self.init_axes is None else {"spec": self.init_spec, **self.init_axes.to_dict()},
            "interventions": None if self.interventions is None else {
                "base_loss": self.interventions.base_loss, "base_accuracy": self.interventions.base_accuracy,
                "replacement": self.replacement_method(),
                **{k: v for k, v in self.interventions.effects.to_dict().items() if k not in ("loss", "accuracy")}},
            "pruning": {} if self.pruning is None else self.pruning.curves_dict(),
            "pruning_protocol": None if self.pruning is None else {
                k: v for k, v in self.pruning.to_dict().items() if k != "curves"},
        })
        return jsonable(out)

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
        """The per-layer summary: axis agreement, removability and pruning AUCs, one row per quantity."""
        rows = [("Spearman ρ (I_X vs task information)", self.axes.spearman),
                ("Spearman ρ (local vs target composite)", self.axes.spearman_composite)]
        if self.axes.agreement:
            rows += [(f"ARI (k = {self.axes.agreement.k}, median of {len(self.axes.agreement.ari)} seeds)",
                      self.axes.agreement.ari_median),
                     ("ARI permutation null (median)", self.axes.agreement.null_median),
                     ("ARI p-value", self.axes.agreement.p_value)]
        if self.init_axes is not None:
            rows.append(("Spearman ρ at initialization", self.init_axes.spearman))
            if self.init_axes.agreement:
                rows.append(("ARI at initialization", self.init_axes.agreement.ari_median))
        for axis in ("local", "target"):
            if axis in self.removability.lesion_spearman:
                rows.append((f"ρ({axis} score, lesion Δloss)", self.removability.lesion_spearman[axis]))
        for key, value in self.removability.pruning_auc.items():
            rows.append((f"pruning AUC, {key.replace('_', ' ')}", value))
        for key, value in self.removability.refinement.items():
            rows.append((f"lesion rank-R², {key.replace('_', ' ')}", value))
        return pd.DataFrame(rows, columns=["quantity", "value"])


def layer_axes(model: torch.nn.Module, layer: str, data: ChannelData, settings: ChannelSettings,
                device: torch.device, progress: Progress | None):
    """Site, statistics, both axes and the per-channel table of one layer of a private model copy (its statistics
    pass on a copy with every BatchNorm folded but the layer's own: :func:`~.interventions.folded_around`)."""
    example, _ = data.calibration.head(1)
    site = locate_site(model, layer, example.to(device))
    stats = collect_layer_statistics(folded_around(model, site, example.to(device)), site, data.calibration,
                                     device=device, batch_size=settings.batch_size, progress=progress)
    local = local_axis(stats, settings.axes)
    target = target_axis(stats, local.peers, settings.axes)
    return site, stats, local, channel_table(stats, local, target)


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
            fields (``layer=``, ``cluster_k=``, the axes' ``k=``, ``seed=``, ...).
        **setting_overrides: fields of ``settings`` to replace, by name.
        init: the same architecture at initialization, to compare the axes before training.
        device: where to run.
        progress: ``progress(fraction, message)``; its first message is the expected duration
            (:func:`~fl_core.channelaxes.estimate.estimate_channels`).
    """
    settings = as_settings(ChannelSettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    with cpu_threads(analysis_threads(device)):  # all cores when idle; fewer beside other work
        loaded = as_model(model, progress=progress)
        conv = channel_layer(loaded, settings.layer)  # before the calibration data is built: a bad layer is refused
        check_channel_statistics(conv.out_channels, what=f"layer {conv.name} of {loaded.label}")
        if not isinstance(data, ChannelData):
            report(progress, 0.0, "preparing the calibration and evaluation images")
        data = as_channel_data(data, loaded, seed=settings.axes.seed)
        init = None if init is None else as_model(init, "init", progress)
        if len(data.calibration) < 2 * settings.axes.k:
            raise AnalysisError(f"Use at least {2 * settings.axes.k} calibration images (got {len(data.calibration)}).")
        if progress is not silent:
            report(progress, 0.0, f"{conv.name}: timing the network to estimate the duration")
            estimate = channels_estimate(loaded, conv.name, len(data.calibration), len(data.evaluation), settings,
                                         init is not None, device, reading=input_seconds(data, device))
            report(progress, 0.0, f"{conv.name}: {estimate.text()} expected")
        timings: dict[str, float] = {}
        start = time.perf_counter()
        model = cpu_layout(loaded.copy_model().to(device).eval(), device)
        site, stats, local, table = layer_axes(model, conv.name, data, settings, device, sub_progress(progress, 0, 0.2))
        timings["statistics"] = time.perf_counter() - start
        evaluation = data.evaluation.materialized(settings.memory_bytes)

        interventions = None
        if settings.lesion_kinds:
            start = time.perf_counter()
            interventions = channel_interventions(
                model, site, evaluation, local.post_means, local.replacement_peers, local.replacement_beta,
                local.replacement_intercept, kinds=settings.lesion_kinds, device=device, batch_size=settings.batch_size,
                memory_bytes=settings.memory_bytes, progress=sub_progress(progress, 0.2, 0.5))
            timings["interventions"] = time.perf_counter() - start
        table = add_intervention_columns(table, interventions)
        report(progress, 0.5, "comparing the axes")
        axes = compare_axes(table, settings)

        pruning_result = None
        if settings.pruning is not None:
            start = time.perf_counter()
            pruning_result = prune_curves(model, conv.name, data.calibration, evaluation, importance_scores(table),
                                          settings.pruning, device=device, means=local.post_means.cpu().numpy(),
                                          readers=site.consumers if site.foldable else (),
                                          batch_size=settings.batch_size, memory_bytes=settings.memory_bytes,
                                          progress=sub_progress(progress, 0.5, 0.9))
            timings["pruning"] = time.perf_counter() - start
            for name, scores in pruning_result.scores.items():
                if name not in AXIS_SCORES:
                    table[f"score_{name}"] = scores

        init_axes = None
        if init is not None:
            start = time.perf_counter()
            init_model = cpu_layout(init.copy_model().to(device).eval(), device)
            *_, init_table = layer_axes(init_model, conv.name, data, settings, device, sub_progress(progress, 0.9, 1))
            init_axes = compare_axes(init_table, settings)
            timings["initialization"] = time.perf_counter() - start
        report(progress, 1.0, "done")
        return ChannelAxesResult(
            spec=loaded.spec, label=loaded.label, layer=conv.name, site=site, data=data.description,
            n_calibration=stats.n_images, n_evaluation=len(evaluation), positions=stats.positions, settings=settings,
            seed=data.seed, table=table, axes=axes, init_axes=init_axes, init_spec=init.spec if init else None,
            calibration_loss=stats.loss, calibration_accuracy=stats.accuracy, interventions=interventions,
            removability=removability(table, pruning_result), pruning=pruning_result,
            filters=stats.weight.float().cpu().numpy(), warnings=data.warnings, timings=timings)


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

"""The two axes of one layer compared, with intervals over images: Spearman ρ and the ARI of their groupings
(:class:`AxesComparison`), and which scores predict removability, the paper's claim 3 within task-relevance bins
included (:class:`Removability`). Section numbers (§5-§7) refer to docs/methods.md, "Channel axes"; the numerics are in
:mod:`fl_core.channelaxes.comparison`, the intervals in :mod:`fl_core.channelaxes.significance`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fl_core.channelaxes.comparison import (
    RELEVANCE_PREDICTORS,
    AxesAgreement,
    axes_agreement,
    axes_statistics,
    axis_features,
    importance_scores,
    percentile_ranks,
    pooled_over_bins,
    relevance_bins,
    spearman,
)
from fl_core.channelaxes.initialization import SharedMode
from fl_core.channelaxes.pruning import PruningResult
from fl_core.channelaxes.resampling import LayerSamples
from fl_core.channelaxes.settings import ChannelSettings
from fl_core.channelaxes.significance import Bootstrap, TaskInformation, bootstrap
from fl_core.results import Result

BOOTSTRAP_RESTARTS = 5
"""k-means restarts of each clustering in a bootstrap resample (the estimate itself takes the settings' 20 per seed
and the median over seeds)."""


def layer_intervals(samples: LayerSamples, settings: ChannelSettings) -> dict[str, Bootstrap]:
    """Bootstrap intervals over images of :func:`~fl_core.channelaxes.comparison.axes_statistics` (ρ, composite ρ,
    ARI and, with lesions, claim 3's within-bin ρs) on one layer's samples (:mod:`fl_core.channelaxes.resampling`)."""
    return bootstrap(lambda *weights: axes_statistics(samples.table(*weights), settings.cluster_k,
                                                      settings.relevance_bins, n_init=BOOTSTRAP_RESTARTS),
                     samples.sizes, resamples=settings.axes.bootstrap, seed=settings.axes.seed, chunk=samples.chunk)


@dataclass(frozen=True)
class AxesComparison(Result):
    """How the two axes relate across a layer's channels (proposed, §7), with intervals over images.

    Attributes:
        spearman: ρ between input capture I_X and task information I(ā;m).
        spearman_composite: ρ between the composite local and target scores.
        agreement: ARI of k-means groupings of [log I_X, R̄_X] vs [I(ā;m), TE] with a permutation null
            (``None`` when the layer has too few channels).
        spearman_ci, spearman_composite_ci, ari_ci: bootstrap percentile intervals over images (``None``: no
            bootstrap).
        significance: the task information's noise floor and p-values.
        shared_mode: the first principal component of the pooled activations (:mod:`.initialization`).
        seed: the seed of the random initialization measured (``None``: a trained network or a fixed initialization).
        intervals: every bootstrap of :func:`layer_intervals` (resamples kept, to combine layers and seeds).
    """

    spearman: float
    spearman_composite: float
    agreement: AxesAgreement | None
    spearman_ci: list[float] | None = None
    spearman_composite_ci: list[float] | None = None
    ari_ci: list[float] | None = None
    significance: TaskInformation | None = None
    shared_mode: SharedMode | None = None
    seed: int | None = None
    intervals: dict[str, Bootstrap] = field(default_factory=dict)

    _private_fields = ("intervals",)

    @property
    def ari(self) -> float:
        return self.agreement.ari_median if self.agreement else float("nan")

    def to_dict(self) -> dict:
        out = super().to_dict()
        if self.intervals:
            out["bootstrap"] = {"resamples": len(next(iter(self.intervals.values())).values),
                                "seed": next(iter(self.intervals.values())).seed,
                                "images": list(next(iter(self.intervals.values())).sizes)}
        return out


def interval_of(intervals: dict[str, Bootstrap], name: str) -> list[float] | None:
    """``[low, high]`` of the bootstrap ``name`` (``None``: not resampled)."""
    return intervals[name].interval if name in intervals and len(intervals[name].values) else None


def compare_axes(table: pd.DataFrame, settings: ChannelSettings | None = None,
                 intervals: dict[str, Bootstrap] | None = None, significance: TaskInformation | None = None,
                 shared: SharedMode | None = None, seed: int | None = None) -> AxesComparison:
    """Spearman ρ and the ARI of the axis groupings of one layer (``settings``: default ChannelSettings()), with the
    intervals of :func:`layer_intervals` when given."""
    settings = settings or ChannelSettings()
    intervals = intervals or {}
    scores = importance_scores(table)
    agreement = None
    if len(table) > settings.cluster_k:
        agreement = axes_agreement(*axis_features(table), k=settings.cluster_k, seeds=range(settings.cluster_seeds))
    return AxesComparison(spearman=spearman(table["input_capture"], table["task_info"]),
                          spearman_composite=spearman(scores["local"], scores["target"]), agreement=agreement,
                          spearman_ci=interval_of(intervals, "spearman"),
                          spearman_composite_ci=interval_of(intervals, "spearman_composite"),
                          ari_ci=interval_of(intervals, "ari"), significance=significance, shared_mode=shared,
                          seed=seed, intervals=intervals)


@dataclass(frozen=True)
class RelevanceBins(Result):
    """The paper's claim 3 as it states it: within bins of task relevance, does peer R² predict lesion damage while
    task information and input capture do not? (§5; the rank regression of :class:`Removability` is the project's own
    addition.)

    Attributes:
        bins: quantile bins of task information (equal numbers of channels).
        sizes: channels per bin.
        per_bin: ``{predictor: [ρ(predictor, mean-ablation Δloss) per bin]}``.
        pooled: ``{predictor: Σ n_b ρ_b / Σ n_b}`` (the paper says peer R² predicts the damage, without a
            direction).
        ci: ``{predictor: [low, high]}`` bootstrap intervals over images (calibration and evaluation images resampled
            independently; ``None`` without the per-image losses).
    """

    bins: int
    sizes: list[float]
    per_bin: dict[str, list[float]]
    pooled: dict[str, float]
    ci: dict[str, list[float] | None]


def relevance_result(table: pd.DataFrame, bins: int, intervals: dict[str, Bootstrap]) -> RelevanceBins | None:
    """:class:`RelevanceBins` of a table with lesion effects (``None`` without them)."""
    if not np.isfinite(table["lesion_dloss"].to_numpy()).all():
        return None
    per_bin = relevance_bins(table, bins)
    sizes = per_bin.pop("size")
    return RelevanceBins(bins=bins, sizes=sizes, per_bin=per_bin,
                         pooled={name: pooled_over_bins(values, sizes) for name, values in per_bin.items()},
                         ci={name: interval_of(intervals, f"relevance_{name}") for name in RELEVANCE_PREDICTORS})


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
        refinement: the project's own addition, not the paper's test: in-sample rank-regression R² of the lesion
            effect on [I_X, I(ā;m)] (``r2_base``) and with peer overlap and peer R² added (``r2_with_peers``), and
            the ``gain``.
        relevance: the paper's claim 3 within task-relevance bins (:class:`RelevanceBins`; ``None`` without lesions).
    """

    lesion_spearman: dict[str, float]
    replacement_spearman: dict[str, float]
    better_axis_lesion: str | None
    pruning_auc: dict[str, float]
    better_axis_pruning: str | None
    refinement: dict[str, float]
    relevance: RelevanceBins | None = None


def _rank_r2(target: np.ndarray, predictors: list[np.ndarray]) -> float:
    """In-sample R² of least squares (with intercept) of the ranks of ``target`` on the ranks of ``predictors``."""
    y = percentile_ranks(target)
    design = np.column_stack([np.ones(len(y)), *(percentile_ranks(p) for p in predictors)])
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


def removability(table: pd.DataFrame, pruning: PruningResult | None, bins: int = 4,
                 intervals: dict[str, Bootstrap] | None = None) -> Removability:
    """Spearman ρ of every importance score with the lesion and replacement effects; pruning AUCs by axis; claim 3
    within ``bins`` task-relevance bins (its intervals from :func:`layer_intervals`)."""
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
                        refinement=refinement, relevance=relevance_result(table, bins, intervals or {}))

"""The two-axis paper's five claims as rows, measured here (Safaai et al. 2026; the Training Lab's table for Chowers
& Weiss is :mod:`fl_core.lab.claims`).

Each row gives the paper's number, the measurement on the layers analysed (averaged over the layers, its bootstrap
interval from their resamples averaged resample by resample), the settings and the command that prints it, and a
verdict with its reason. The paper's numbers come from its abstract and from secondary summaries (docs/methods.md,
"The paper's claims"); the thresholds behind the verdicts are this project's [proposed]:

1. weakly aligned after training, strongly coupled at initialization: the trained ρ(I_X, I(ā;m)) interval inside
   (−0.3, 0.3), the initialization's above 0.3, and their paired difference above 0;
2. different channel groupings: the ARI's interval below 0.1;
3. peer support refines removability: within task-relevance bins, the ρ of peer R² with the lesion Δloss below 0
   (interval), while the intervals of task information and input capture include 0;
4. local-axis scores prune better than target-axis scores: one layer's curves without an interval cannot decide it
   (the paper prunes many layers of CIFAR-100 networks to FLOPs targets, with fine-tuning);
5. the separation follows residualized gradient directions: needs the axes along a training run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd

from fl_core.channelaxes.significance import Bootstrap
from fl_core.results import Result
from fl_core.settings import settings_to_argv

if TYPE_CHECKING:
    from fl_core.channelaxes.analysis import AxesComparison, ChannelAxesResult

WEAK = 0.3
"""|ρ| below this is a weak alignment, above it a strong coupling [proposed]."""
CHANCE_ARI = 0.1
"""An ARI below this: groupings that barely agree [proposed]."""
VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive", "cannot be tested offline")


@dataclass(frozen=True)
class PaperClaim:
    """One claim of the paper: its number, wording, the paper's value (text) and what is measured here."""

    number: int
    claim: str
    paper: str
    measure: str


PAPER_CLAIMS: tuple[PaperClaim, ...] = (
    PaperClaim(1, "The axes are weakly aligned after training, though strongly coupled at random initialization",
               "ρ ≈ 0.01 trained vs ≈ 0.7 at initialization (abstract: 'weakly aligned', 'strongly coupled at random "
               "initialization'; the numbers are unconfirmed)",
               "Spearman ρ(I_X, I(ā;m)) of the trained network, mean over the layers"),
    PaperClaim(2, "The axes induce different channel groupings",
               "ARI ≈ 0.02 (unconfirmed)", "ARI of the k-means groupings of the two axes, mean over the layers"),
    PaperClaim(3, "Peer support refines removability beyond input capture and task relevance",
               "lesion + peer replacement: within matched task-relevance bins peer R² predicts lesion damage, task "
               "relevance and input capture do not (no number published)",
               "ρ(peer R², mean-ablation Δloss) within task-relevance quantile bins, pooled, mean over the layers"),
    PaperClaim(4, "Local-axis metrics predict removability better than target-axis metrics under FLOPs-matched "
               "pruning", "AUC gains of +8.0 / +6.6 / +10.1 pp on CIFAR-100 ResNet-18 / VGG-16 / MobileNetV2 "
               "(unconfirmed)", "pruning AUC of the local minus the target composite (pp), mean over the layers"),
    PaperClaim(5, "A Gaussian linear analysis explains the separation: the SGD update turns near-orthogonal to both "
               "information gradients after early training", "no number published",
               "cosine of the layer's update with the gradients of input capture and of task information"),
)


@dataclass(frozen=True)
class ClaimRow(Result):
    """One claim measured here.

    Attributes:
        number: the claim's number (1-5).
        claim: what the paper claims.
        paper: the paper's number or wording.
        measure: what ``measured`` is.
        measured: the value here (``None``: not measured).
        ci_low, ci_high: its bootstrap interval over images (``None``: none).
        verdict: one of :data:`VERDICTS`.
        why: the reason for the verdict, with the per-layer values.
        settings: layers, images, initialization seeds and bootstrap of the measurement.
        command: the command that prints it.
    """

    number: int
    claim: str
    paper: str
    measure: str
    measured: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str
    why: str
    settings: str
    command: str


@dataclass(frozen=True)
class ClaimsTable(Result):
    """The paper's five claims measured on one or several layers of a network (:func:`channel_claims`)."""

    claims: tuple[ClaimRow, ...]

    _figures: ClassVar[dict[str, str]] = {"claims": "fl_core.channelaxes.plots:claims_figure"}

    def rows(self) -> list[dict]:
        """One dict per claim (the ``claims`` key of the ``channels`` command's JSON)."""
        return [row.to_dict() for row in self.claims]

    def to_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self.rows())
        return frame.assign(claim=[f"{r.number}. {r.claim}" for r in self.claims]).drop(columns="number")


def _mean(parts: Sequence[Bootstrap | None], fallback: Sequence[float]) -> tuple[float | None, Bootstrap | None]:
    """The mean over layers of a statistic and its combined bootstrap (``None`` where the layers have none)."""
    combined = Bootstrap.combine(list(parts)) if parts else None
    values = [v for v in fallback if v is not None and np.isfinite(v)]
    return (float(np.mean(values)) if values else None), combined


def _inside(interval: Bootstrap | None, low: float = -np.inf, high: float = np.inf) -> bool | None:
    """Whether the interval lies inside (low, high) (``None``: no interval)."""
    if interval is None or not np.isfinite([interval.low, interval.high]).all():
        return None
    return low < interval.low and interval.high < high


def _text(value: float | None, interval: Bootstrap | None) -> str:
    if value is None:
        return "–"
    ci = f" [{interval.low:+.2f}, {interval.high:+.2f}]" if interval is not None and np.isfinite(interval.low) else ""
    return f"{value:+.2f}{ci}"


def _row(claim: PaperClaim, measured: float | None, interval: Bootstrap | None, verdict: str, why: str,
         settings: str, command: str) -> ClaimRow:
    low, high = (interval.low, interval.high) if interval is not None else (None, None)
    finite = [None if v is None or not np.isfinite(v) else float(v) for v in (measured, low, high)]
    return ClaimRow(number=claim.number, claim=claim.claim, paper=claim.paper, measure=claim.measure,
                    measured=finite[0], ci_low=finite[1], ci_high=finite[2], verdict=verdict, why=why,
                    settings=settings, command=command)


def _verdict(checks: Sequence[bool | None]) -> str:
    known = [c for c in checks if c is not None]
    if not known:
        return "inconclusive"
    return "reproduced" if all(known) and len(known) == len(checks) else "partly" if any(known) else "not reproduced"


def alignment_claim(results: Sequence[ChannelAxesResult]) -> tuple[float | None, Bootstrap | None, str, str]:
    """Claim 1: the trained ρ, its interval, the verdict and why (with the initialization and the paired
    difference when it was measured)."""
    trained, trained_ci = _mean([r.axes.intervals.get("spearman") for r in results], [r.axes.spearman for r in results])
    inits: list[AxesComparison | None] = [r.init_summary for r in results]
    weak = _inside(trained_ci, -WEAK, WEAK)
    if any(i is None for i in inits):
        why = (f"trained ρ {_text(trained, trained_ci)} ({'inside' if weak else 'not inside'} ±{WEAK}); no "
               "initialization compared (--init), so the coupling at initialization is not tested")
        return trained, trained_ci, "partly" if weak else "inconclusive" if weak is None else "not reproduced", why
    init, init_ci = _mean([i.intervals.get("spearman") for i in inits], [i.spearman for i in inits])
    separation = None if init is None or trained is None else init - trained
    separation_ci = None if init_ci is None else init_ci.minus(trained_ci)
    coupled = _inside(init_ci, WEAK)
    separated = _inside(separation_ci, 0.0)
    per_layer = "; ".join(f"{r.layer}: trained {_text(r.axes.spearman, r.axes.intervals.get('spearman'))}, init "
                          f"{_text(i.spearman, i.intervals.get('spearman'))}" for r, i in zip(results, inits))
    why = (f"trained ρ {_text(trained, trained_ci)} ({'weak' if weak else 'not weak'}: |ρ| < {WEAK}), at "
           f"initialization {_text(init, init_ci)} ({'coupled' if coupled else 'not coupled'}: ρ > {WEAK}), the "
           f"difference {_text(separation, separation_ci)} ({'above' if separated else 'not above'} 0). {per_layer}")
    return trained, trained_ci, _verdict([weak, coupled, separated]), why


def grouping_claim(results: Sequence[ChannelAxesResult]) -> tuple[float | None, Bootstrap | None, str, str]:
    """Claim 2: the ARI, its interval, the verdict and why."""
    ari, ari_ci = _mean([r.axes.intervals.get("ari") for r in results], [r.axes.ari for r in results])
    if ari is None:
        return None, None, "inconclusive", "too few channels for k-means groupings"
    below = _inside(ari_ci, high=CHANCE_ARI)
    above = _inside(ari_ci, low=CHANCE_ARI)
    verdict = ("reproduced" if below else "not reproduced" if above else "partly" if ari < CHANCE_ARI
               else "inconclusive")
    per_layer = "; ".join(f"{r.layer}: {_text(r.axes.ari, r.axes.intervals.get('ari'))} (permutation p = "
                          f"{r.axes.agreement.p_value:.2f})" for r in results if r.axes.agreement)
    return ari, ari_ci, verdict, f"ARI {_text(ari, ari_ci)} against {CHANCE_ARI} (≈ 0: chance). {per_layer}"


def relevance_claim(results: Sequence[ChannelAxesResult]) -> tuple[float | None, Bootstrap | None, str, str]:
    """Claim 3: the within-bin ρ of peer R² with the lesion Δloss, its interval, the verdict and why."""
    bins = [r.removability.relevance for r in results]
    if any(b is None for b in bins):
        return None, None, "inconclusive", "no lesions ran (--lesions mean), so lesion damage is not measured"
    combined = {}
    for name in ("peer_r2", "task_info", "input_capture"):
        combined[name] = _mean([r.axes.intervals.get(f"relevance_{name}") for r in results],
                               [b.pooled[name] for b in bins])
    peer, peer_ci = combined["peer_r2"]
    predicts = _inside(peer_ci, high=0.0)
    others = {name: _inside(ci, high=0.0) or _inside(ci, low=0.0) for name, (_, ci) in list(combined.items())[1:]}
    if predicts is None:
        verdict = "inconclusive"
    elif not predicts:
        verdict = "not reproduced"
    else:
        verdict = "partly" if any(others.values()) else "reproduced"
    why = (f"within {bins[0].bins} task-relevance bins: ρ(peer R², Δloss) {_text(peer, peer_ci)} (a negative ρ: "
           "well reconstructed channels cost less); ρ(task information, Δloss) "
           f"{_text(*combined['task_info'])}, ρ(input capture, Δloss) {_text(*combined['input_capture'])}; "
           f"{results[0].n_evaluation} evaluation images")
    return peer, peer_ci, verdict, why


def pruning_claim(results: Sequence[ChannelAxesResult]) -> tuple[float | None, None, str, str]:
    """Claim 4: the local minus target pruning AUC (pp), without an interval; inconclusive (module docstring)."""
    gains = [100 * (r.removability.pruning_auc["local"] - r.removability.pruning_auc["target"]) for r in results
             if {"local", "target"} <= set(r.removability.pruning_auc)]
    if len(gains) < len(results):
        return None, None, "inconclusive", "no pruning curves of both composites (--criteria local target ...)"
    removed = max(max(r.pruning.flops_removed) for r in results)
    return (float(np.mean(gains)), None, "inconclusive",
            f"local − target AUC {', '.join(f'{g:+.1f} pp' for g in gains)} on one layer each (at most "
            f"{removed:.1%} of the MACs removed), without fine-tuning and without an interval over images; the paper "
            "prunes many layers of CIFAR-100 networks to FLOPs targets and fine-tunes")


def settings_text(results: Sequence[ChannelAxesResult]) -> str:
    """Layers, images, initialization and bootstrap of a measurement, in words."""
    first = results[0]
    bootstrap = first.axes.to_dict().get("bootstrap") or {"resamples": 0, "seed": first.settings.axes.seed}
    text = (f"{first.label}, {len(results)} layer{'s' * (len(results) > 1)} ({', '.join(r.layer for r in results)}); "
            f"N = {first.n_calibration} calibration + {first.n_evaluation} evaluation images ({first.data}); "
            f"{bootstrap['resamples']} bootstrap resamples, seed {bootstrap['seed']}")
    if first.init_spec:
        seeds = [s.seed for s in first.init_seeds_axes if s.seed is not None]
        text += (f"; initialization {first.init_spec}, "
                 + (f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}" if seeds else "fixed weights")
                 + ", BatchNorm "
                 f"{'recalibrated' if first.init_recalibrated else 'as initialized'}")
    return text


def command_text(results: Sequence[ChannelAxesResult]) -> str:
    """The ``channels`` command that measures ``results`` again."""
    first = results[0]
    parts = ["python -m fl_core channels", f"--model {first.spec}", *(f"--layer {r.layer}" for r in results)]
    if first.init_spec:
        parts.append(f"--init {first.init_spec}")
    parts += [f"--data {first.source or '<images>'}", f"--calibration {first.n_calibration}",
              f"--evaluation {first.n_evaluation}"]
    parts += settings_to_argv(first.settings, exclude=("layer", "pruning", "criteria"))
    if first.settings.pruning is None:
        parts.append("--criteria")
    return " ".join(parts)


def channel_claims(results: Sequence[ChannelAxesResult]) -> ClaimsTable:
    """The paper's five claims measured on ``results`` (layers of one network analysed together; module
    docstring)."""
    settings, command = settings_text(results), command_text(results)
    measured = [alignment_claim(results), grouping_claim(results), relevance_claim(results), pruning_claim(results),
                (None, None, "cannot be tested offline", "needs the layer's axes and its SGD updates along a training "
                 "run (the Training Lab's axes over training), not a trained network beside one initialization")]
    return ClaimsTable(tuple(_row(claim, *values, settings, command) for claim, values in zip(PAPER_CLAIMS, measured)))

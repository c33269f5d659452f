"""The two-axis paper's five claims as rows, measured here (Safaai et al. 2026; the Training Lab's table for Chowers
& Weiss is :mod:`fl_core.lab.claims`).

Each row gives the paper's number, the measurement on the layers analysed (averaged over the layers, its bootstrap
interval from their resamples averaged resample by resample), the settings and the command that prints it, and a
verdict with its reason. The verdict weighs every layer's own checks (never the average alone): ``reproduced`` when
all hold, ``not reproduced`` when none does, ``partly`` in between, ``inconclusive`` when no interval decides. The
paper's numbers come from its abstract and secondary summaries (docs/methods.md, "The paper's claims"); the checks are
this project's [proposed]:

1. weakly aligned after training, strongly coupled at initialization: the trained ρ(I_X, I(ā;m)) interval inside
   (−0.3, 0.3), the initialization's above 0.3, and their paired difference above 0;
2. different channel groupings: the ARI's interval below 0.1;
3. peer support refines removability: within task-relevance bins, the interval of the ρ of peer R² with the lesion
   Δloss excludes 0 (the paper states no direction), while the intervals of task information and input capture
   include 0;
4. local-axis scores prune better than target-axis scores: one layer's curves without an interval cannot decide it
   (the paper prunes many layers of CIFAR-100 networks to FLOPs targets, with fine-tuning);
5. the separation follows residualized gradient directions: needs the axes along a training run (the Training Lab's
   ``--channel-axes``, :mod:`fl_core.channelaxes.training`), not one network beside its initialization.

Along a training run (:func:`trajectory_claims`) claims 1, 2 and 5 are measured on the followed layer's snapshots:
claim 1 compares step 0 with the last snapshot, claim 2 reads the last snapshot's ARI, and claim 5 asks that after
early training (the snapshots past the first :data:`EARLY_SHARE` of the steps) both update cosines' intervals lie
inside ±:data:`NEAR_ORTHOGONAL` [proposed].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import numpy as np
import pandas as pd

from fl_core.channelaxes.significance import Bootstrap
from fl_core.results import Result
from fl_core.settings import settings_to_argv

if TYPE_CHECKING:
    from fl_core.channelaxes.analysis import ChannelAxesResult
    from fl_core.channelaxes.pruning import NetworkPruningResult
    from fl_core.channelaxes.training import AxesSnapshot, AxesTrajectory

WEAK = 0.3
"""|ρ| below this is a weak alignment, above it a strong coupling [proposed]."""
CHANCE_ARI = 0.1
"""An ARI below this: groupings that barely agree [proposed]."""
NEAR_ORTHOGONAL = 0.1
"""|cos| below this: an update near-orthogonal to an information gradient (claim 5) [proposed]."""
EARLY_SHARE = 0.25
"""The share of a run's steps that is "early training", left out of claim 5's check [proposed]."""
VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive", "cannot be tested offline")


class Interval(NamedTuple):
    """A stored interval (a snapshot's ``[low, high]``), checked like a :class:`Bootstrap`'s."""

    low: float
    high: float


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


def _inside(interval: Bootstrap | Interval | None, low: float = -np.inf, high: float = np.inf) -> bool | None:
    """Whether the interval lies inside (low, high) (``None``: no interval)."""
    if interval is None or not np.isfinite([interval.low, interval.high]).all():
        return None
    return low < interval.low and interval.high < high


def _text(value: float | None, interval: Bootstrap | Interval | None) -> str:
    if value is None:
        return "–"
    ci = f" [{interval.low:+.2f}, {interval.high:+.2f}]" if interval is not None and np.isfinite(interval.low) else ""
    return f"{value:+.2f}{ci}"


def _row(claim: PaperClaim, measured: float | None, interval: Bootstrap | Interval | Sequence[float] | None,
         verdict: str, why: str, settings: str, command: str) -> ClaimRow:
    low, high = ((interval.low, interval.high) if isinstance(interval, Bootstrap) else
                 (None, None) if interval is None else tuple(interval))
    finite = [None if v is None or not np.isfinite(v) else float(v) for v in (measured, low, high)]
    return ClaimRow(number=claim.number, claim=claim.claim, paper=claim.paper, measure=claim.measure,
                    measured=finite[0], ci_low=finite[1], ci_high=finite[2], verdict=verdict, why=why,
                    settings=settings, command=command)


def verdict(checks: Sequence[bool | None]) -> str:
    """``reproduced`` when every check holds, ``not reproduced`` when none that could be decided does, ``partly``
    in between, ``inconclusive`` when no interval decides any (``None``: undecided)."""
    known = [c for c in checks if c is not None]
    if not known:
        return "inconclusive"
    if all(known):
        return "reproduced" if len(known) == len(checks) else "partly"
    return "partly" if any(known) else "not reproduced"


def _bound(interval: Bootstrap | Interval | None, low: float = -np.inf, high: float = np.inf) -> bool | None:
    """True when the interval lies inside (low, high), False when it lies wholly outside, ``None`` when it straddles
    a bound or is missing."""
    inside = _inside(interval, low, high)
    if inside is None or inside:
        return inside
    return False if interval.high <= low or interval.low >= high else None


def alignment_claim(results: Sequence[ChannelAxesResult]) -> tuple[float | None, Bootstrap | None, str, str]:
    """Claim 1: the trained ρ (mean over the layers), its interval, the verdict over every layer's checks (a weak
    trained ρ; with an initialization, a coupled one there and a positive paired difference) and why."""
    trained, trained_ci = _mean([r.axes.intervals.get("spearman") for r in results], [r.axes.spearman for r in results])
    checks, lines = [], []
    for result in results:
        ci = result.axes.intervals.get("spearman")
        weak = _bound(ci, -WEAK, WEAK)
        line = f"{result.layer}: trained {_text(result.axes.spearman, ci)}"
        init = result.init_summary
        if init is None:
            checks += [weak, None, None]
            lines.append(line)
            continue
        init_ci = init.intervals.get("spearman")
        difference = None if init_ci is None else init_ci.minus(ci)
        coupled, separated = _bound(init_ci, WEAK), _bound(difference, 0.0)
        checks += [weak, coupled, separated]
        lines.append(f"{line}, initialization {_text(init.spearman, init_ci)}, difference "
                     f"{_text(init.spearman - result.axes.spearman, difference)}")
    tests = (f"weak: the trained interval inside ±{WEAK}; coupled: the initialization's above {WEAK}; separated: the "
             "paired difference above 0")
    if all(r.init_summary is None for r in results):
        tests += "; no initialization compared (--init), so the coupling is not tested"
    return trained, trained_ci, verdict(checks), f"{tests}. {'; '.join(lines)}"


def grouping_claim(results: Sequence[ChannelAxesResult]) -> tuple[float | None, Bootstrap | None, str, str]:
    """Claim 2: the ARI (mean over the layers), its interval, the verdict (each layer's interval below
    :data:`CHANCE_ARI`) and why."""
    ari, ari_ci = _mean([r.axes.intervals.get("ari") for r in results], [r.axes.ari for r in results])
    if ari is None:
        return None, None, "inconclusive", "too few channels for k-means groupings"
    checks = [_bound(r.axes.intervals.get("ari"), high=CHANCE_ARI) for r in results]
    per_layer = "; ".join(f"{r.layer}: {_text(r.axes.ari, r.axes.intervals.get('ari'))} (permutation p = "
                          f"{r.axes.agreement.p_value:.2f})" for r in results if r.axes.agreement)
    return ari, ari_ci, verdict(checks), f"each layer's ARI interval against {CHANCE_ARI} (0: chance). {per_layer}"


def relevance_claim(results: Sequence[ChannelAxesResult]) -> tuple[float | None, Bootstrap | None, str, str]:
    """Claim 3: the within-bin ρ of peer R² with the lesion Δloss (mean over the layers), its interval, the verdict
    (each layer: peer R²'s interval below 0, task information's and input capture's straddling 0) and why."""
    bins = [r.removability.relevance for r in results]
    if any(b is None for b in bins):
        return None, None, "inconclusive", "no lesions ran (--lesions mean), so lesion damage is not measured"
    peer, peer_ci = _mean([r.axes.intervals.get("relevance_peer_r2") for r in results],
                          [b.pooled["peer_r2"] for b in bins])
    checks, lines = [], []
    for result, relevance in zip(results, bins):
        intervals = {name: result.axes.intervals.get(f"relevance_{name}") for name in relevance.pooled}
        for name in relevance.pooled:  # peer R² predicts (its interval excludes 0); the others do not
            excludes = _excludes_zero(intervals[name])
            checks.append(excludes if name == "peer_r2" or excludes is None else not excludes)
        lines.append(f"{result.layer}: " + ", ".join(f"{name} {_text(relevance.pooled[name], intervals[name])}"
                                                     for name in relevance.pooled))
    direction = ("a positive ρ: better reconstructed channels cost more when mean-ablated" if peer and peer > 0 else
                 "a negative ρ: better reconstructed channels cost less")
    why = (f"ρ(·, mean-ablation Δloss) within {bins[0].bins} task-relevance bins on {results[0].n_evaluation} "
           "evaluation images; reproduced when peer R²'s interval excludes 0 (the paper gives no direction; here "
           f"{direction}) while task information's and input capture's include 0. {'; '.join(lines)}")
    return peer, peer_ci, verdict(checks), why


def _excludes_zero(interval: Bootstrap | None) -> bool | None:
    """Whether the interval lies wholly on one side of 0 (``None``: no interval)."""
    if interval is None or not np.isfinite([interval.low, interval.high]).all():
        return None
    return bool(interval.low > 0 or interval.high < 0)


def pruning_claim(results: Sequence[ChannelAxesResult], network: NetworkPruningResult | None = None
                  ) -> tuple[float | None, list[float] | None, str, str]:
    """Claim 4: the local minus target pruning AUC (pp). With the layers pruned together to FLOPs targets
    (``network``): the paired difference after the recovery fine-tune (before it without one), with its interval:
    reproduced when it lies above 0 and the targets reach 30 % of the MACs, partly when it lies above 0 short of
    that, not reproduced below 0, inconclusive when it contains 0. Otherwise one layer at a time: inconclusive."""
    if network is not None and network.differences:
        key = "recovered" if "recovered" in network.differences else "auc"
        gain, ci = network.differences[key]["local_minus_target_pp"], network.differences[key]["ci"]
        deep = max(network.targets) >= 0.3
        above = None if ci is None else ci[0] > 0
        below = None if ci is None else ci[1] < 0
        outcome = ("reproduced" if deep else "partly") if above else "not reproduced" if below else "inconclusive"
        recovery = (f"after a {network.recovery_steps}-step recovery fine-tune" if key == "recovered"
                    else "without recovery")
        return (gain, ci, outcome,
                f"local − target AUC of {len(network.layers)} layers pruned together to "
                f"{', '.join(f'{t:.0%}' for t in network.targets)} of the MACs, {recovery}, on "
                f"{network.n_images} evaluation images (one image: {100 / network.n_images:.1f} points of accuracy); "
                "reproduced when the interval lies above 0 with targets up to 30 %; the paper prunes CIFAR-100 "
                "networks")
    gains = [100 * (r.removability.pruning_auc["local"] - r.removability.pruning_auc["target"]) for r in results
             if {"local", "target"} <= set(r.removability.pruning_auc)]
    if len(gains) < len(results):
        return None, None, "inconclusive", "no pruning curves of both composites (--criteria local target ...)"
    removed = max(max(r.pruning.flops_removed) for r in results)
    return (float(np.mean(gains)), None, "inconclusive",
            f"local − target AUC {', '.join(f'{g:+.1f} pp' for g in gains)} on one layer each (at most "
            f"{removed:.1%} of the MACs removed), without an interval; prune the layers together to FLOPs targets "
            "(--flops-targets 0.1 0.2 0.3) for the paper's protocol")


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


def command_text(results: Sequence[ChannelAxesResult], network: NetworkPruningResult | None = None) -> str:
    """The ``channels`` command that measures ``results`` (and ``network``) again."""
    first = results[0]
    parts = ["python -m fl_core channels", f"--model {first.spec}", *(f"--layer {r.layer}" for r in results)]
    if first.init_spec:
        parts.append(f"--init {first.init_spec}")
    parts += [f"--data {first.source or '<images>'}", f"--calibration {first.n_calibration}",
              f"--evaluation {first.n_evaluation}"]
    parts += settings_to_argv(first.settings, exclude=("layer", "pruning", "criteria"))
    if first.settings.pruning is None:
        parts.append("--criteria")
    else:
        parts += ["--criteria", *first.settings.pruning.criteria]
    if network is not None:
        parts += ["--flops-targets", *map(str, network.settings.flops_targets),
                  f"--recovery-steps {network.settings.recovery_steps}"]
    return " ".join(parts)


def channel_claims(results: Sequence[ChannelAxesResult], network: NetworkPruningResult | None = None
                   ) -> ClaimsTable:
    """The paper's five claims measured on ``results`` (layers of one network analysed together; module
    docstring), claim 4 on ``network`` when the layers were also pruned together to FLOPs targets."""
    settings, command = settings_text(results), command_text(results, network)
    measured = [alignment_claim(results), grouping_claim(results), relevance_claim(results),
                pruning_claim(results, network),
                (None, None, "cannot be tested offline", "needs the layer's axes and its SGD updates along a training "
                 "run: the Training Lab's axes over training measure them (python -m fl_core train --channel-axes "
                 "LAYER), not a trained network beside one initialization")]
    return ClaimsTable(tuple(_row(claim, *values, settings, command) for claim, values in zip(PAPER_CLAIMS, measured)))


def _interval(bounds: list[float] | None) -> Interval | None:
    """A snapshot's stored ``[low, high]`` (``None``: none stored)."""
    if not bounds or any(v is None for v in bounds):
        return None
    return Interval(float(bounds[0]), float(bounds[1]))


def _late_snapshots(trajectory: AxesTrajectory) -> list[AxesSnapshot]:
    """The snapshots after early training: past the first :data:`EARLY_SHARE` of the run's steps."""
    last = trajectory.snapshots[-1].step
    return [s for s in trajectory.snapshots if s.step > EARLY_SHARE * last]


def trajectory_alignment(trajectory: AxesTrajectory) -> tuple[float | None, Interval | None, str, str]:
    """Claim 1 along a run: the last snapshot's ρ and interval; coupled at step 0 (interval above :data:`WEAK`),
    weak at the end (inside ±WEAK), separated (step 0's interval wholly above the last one's: the snapshots are not
    resampled together, so this is stricter than a paired difference)."""
    first, last = trajectory.snapshots[0], trajectory.snapshots[-1]
    start, end = _interval(first.spearman_ci), _interval(last.spearman_ci)
    separated = None if start is None or end is None else (True if start.low > end.high else
                                                            False if start.high < end.low else None)
    checks = [_bound(start, WEAK), _bound(end, -WEAK, WEAK), separated]
    return (last.spearman, end, verdict(checks),
            f"coupled: step {first.step}'s interval above {WEAK}; weak: step {last.step}'s inside ±{WEAK}; separated: "
            f"the first interval wholly above the last. Step {first.step}: {_text(first.spearman, start)}; step "
            f"{last.step}: {_text(last.spearman, end)}")


def trajectory_grouping(trajectory: AxesTrajectory) -> tuple[float | None, Interval | None, str, str]:
    """Claim 2 along a run: the last snapshot's ARI and its interval against :data:`CHANCE_ARI`."""
    last = trajectory.snapshots[-1]
    if not np.isfinite(last.ari):
        return None, None, "inconclusive", "too few channels for k-means groupings"
    interval = _interval(last.ari_ci)
    return (last.ari, interval, verdict([_bound(interval, high=CHANCE_ARI)]),
            f"step {last.step}'s ARI interval against {CHANCE_ARI} (0: chance): {_text(last.ari, interval)}")


def trajectory_orthogonality(trajectory: AxesTrajectory) -> tuple[float | None, Interval | None, str, str]:
    """Claim 5 along a run: after early training, each snapshot's cosines of the update with the gradients of input
    capture and of task information inside ±:data:`NEAR_ORTHOGONAL`; measured: the last snapshot's larger one."""
    late = _late_snapshots(trajectory)
    names = ("cos_update_capture", "cos_update_information")
    if not late:
        return None, None, "inconclusive", "no snapshot after early training"
    checks = [_bound(_interval(s.cosines_ci.get(name)), -NEAR_ORTHOGONAL, NEAR_ORTHOGONAL)
              for s in late for name in names]
    last = late[-1]
    larger = max(names, key=lambda name: abs(last.cosines.get(name, 0.0)))
    held = sum(c is True for c in checks)
    at_last = ", ".join(f"cos(update, {symbol}) {_text(last.cosines[name], _interval(last.cosines_ci.get(name)))}"
                        for name, symbol in zip(names, ("∇I_X", "∇I")))
    return (last.cosines[larger], _interval(last.cosines_ci.get(larger)), verdict(checks),
            f"after the first {EARLY_SHARE * 100:.0f} % of the steps, both cosines' intervals inside "
            f"±{NEAR_ORTHOGONAL} at every snapshot: {held} of {len(checks)} hold ({len(late)} snapshots, steps "
            f"{late[0].step}-{last.step}). Step {last.step}: {at_last}; shown: the larger")


def trajectory_claims(trajectory: AxesTrajectory) -> ClaimsTable:
    """Claims 1, 2 and 5 measured along a training run on its followed layer (module docstring), with the ``channels``
    command that measures the run's checkpoints again."""
    n = trajectory.snapshots[0].n_images
    settings = (f"{trajectory.layer}, {len(trajectory.snapshots)} snapshots (steps {trajectory.steps[0]}-"
                f"{trajectory.steps[-1]}), N = {n} analysis images ({trajectory.data}); {trajectory.bootstrap} "
                f"bootstrap resamples, seed {trajectory.seed}")
    command = f"python -m fl_core channels --model weights:RUN_DIR --layer {trajectory.layer}"
    measured = {1: trajectory_alignment, 2: trajectory_grouping, 5: trajectory_orthogonality}
    return ClaimsTable(tuple(_row(claim, *measured[claim.number](trajectory), settings, command)
                             for claim in PAPER_CLAIMS if claim.number in measured))

"""Analyses of Training Lab runs: the profile trajectory against the linear theory, profile consistency between
runs, and the claims of Chowers & Weiss (Tables 1–3, Fig. 2, App. D) measured on runs next to the published values.

* Trajectory: at every snapshot step t, the energy profile (Def. 2.2) of w_t − w_0 (the authors' protocol) and of
  the raw w_t, each with the one-parameter theory fit (τ = ηt, Pearson r; Thm. 4.2), and Pearson(e(w_t), e(w_0)).
  The theory predicts that the fitted τ grows with t (τ = ηt); we report Spearman's ρ between step and τ.
* Comparisons use pairs of runs whose configurations differ in exactly one factor (the training length may
  differ: random labels train longer, as in the paper). Since the theory makes the profile a function of ηt alone,
  pairs are also compared at matched time (*proposed*, not in the paper): the final profile of the run with the
  smaller fitted ηt against the other run's snapshot whose fitted ηt is closest.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from fl_core.firstlayer.energy import correlation_matrix, energy_profile, fit_linear_theory, pearson, random_init_banks
from fl_core.firstlayer.patches import PatchPCA
from fl_core.firstlayer.settings import EnergySettings
from fl_core.lab.runs import Run
from fl_core.lab.settings import RunSettings
from fl_core.results import Result
from fl_core.settings import setting_value

SCHEDULE_FIELDS = ("steps", "snapshots")


# ---------------------------------------------------------------------------------------------------- trajectory


@dataclass(frozen=True)
class Trajectory(Result):
    """The first layer of one run over its snapshot steps.

    Attributes:
        run: the run's name.
        steps: snapshot steps (0 = initialization).
        lambdas: patch std λ_i of the components, in profile order (App. D.2: the modified spectrum).
        profiles: (S, D) max-normalized e_i of w_t − w_0 (NaN at step 0 and for a frozen first layer).
        theory: (S, D) the theory profile fitted to each row of ``profiles``.
        r, eta_t: (S,) Pearson r and τ = ηt of those fits.
        raw_profiles, raw_theory, raw_r, raw_eta_t: the same for the raw weights w_t.
        vs_init: (S,) Pearson r between e(w_t) and e(w_0) (Table 1 "trained vs init" at the last step).
        eta_t_trend: Spearman ρ between step and fitted τ over steps > 0 (the theory predicts τ ∝ t: ρ = 1).
        reference_r: App. D.2 only: r of the theory evaluated on the unmodified spectrum (else ``None``).
    """

    run: str
    steps: np.ndarray
    lambdas: np.ndarray
    profiles: np.ndarray
    theory: np.ndarray
    r: np.ndarray
    eta_t: np.ndarray
    raw_profiles: np.ndarray
    raw_theory: np.ndarray
    raw_r: np.ndarray
    raw_eta_t: np.ndarray
    vs_init: np.ndarray
    eta_t_trend: float
    reference_r: np.ndarray | None = None

    _figures: ClassVar[dict[str, str]] = {
        "profiles": "fl_core.lab.plots:trajectory_figure",
        "fit": "fl_core.lab.plots:fit_over_steps_figure",
    }

    def to_frame(self) -> pd.DataFrame:
        """Long table: one row per (step, component)."""
        steps, comps = np.meshgrid(self.steps, np.arange(1, len(self.lambdas) + 1), indexing="ij")
        return pd.DataFrame({"step": steps.ravel(), "component": comps.ravel(),
                             "lambda": np.tile(self.lambdas, len(self.steps)),
                             "profile_minus_init": self.profiles.ravel(), "theory_minus_init": self.theory.ravel(),
                             "profile_raw": self.raw_profiles.ravel(), "theory_raw": self.raw_theory.ravel()})

    def steps_frame(self) -> pd.DataFrame:
        """One row per snapshot step: the fits and the correlation with the initialization."""
        frame = pd.DataFrame({"step": self.steps, "r_minus_init": self.r, "eta_t_minus_init": self.eta_t,
                              "r_raw": self.raw_r, "eta_t_raw": self.raw_eta_t, "vs_init": self.vs_init})
        if self.reference_r is not None:
            frame["r_unmodified_spectrum"] = self.reference_r
        return frame


def _fit_rows(profiles: np.ndarray, lambdas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Theory fits of every row: (theory profiles, r, τ); NaN rows stay NaN."""
    theory, r, tau = np.full_like(profiles, np.nan), np.full(len(profiles), np.nan), np.full(len(profiles), np.nan)
    for i, profile in enumerate(profiles):
        if np.all(np.isfinite(profile)) and profile.std() > 0:
            fit = fit_linear_theory(profile, lambdas)
            theory[i], r[i], tau[i] = fit.profile, fit.r, fit.eta_t
    return theory, r, tau


def _moved_profiles(snapshots: dict[int, np.ndarray], pca: PatchPCA) -> np.ndarray:
    """e(w_t − w_0) per step; NaN where the first layer has not moved."""
    rows = []
    for step in sorted(snapshots):
        delta = snapshots[step] - snapshots[0]
        rows.append(energy_profile(delta, pca) if np.any(delta) else np.full(pca.dim, np.nan))
    return np.stack(rows)


def snapshot_trajectory(name: str, snapshots: dict[int, np.ndarray], pca: PatchPCA,
                        reference_pca: PatchPCA | None = None) -> Trajectory:
    """Profiles and theory fits at every snapshot (step 0 = the initialization must be among them)."""
    steps = np.array(sorted(snapshots))
    raw = np.stack([energy_profile(snapshots[s], pca) for s in steps])
    moved = _moved_profiles(snapshots, pca)
    theory, r, tau = _fit_rows(moved, pca.lambdas)
    raw_theory, raw_r, raw_tau = _fit_rows(raw, pca.lambdas)
    valid = (steps > 0) & np.isfinite(tau)
    trend = float(spearmanr(steps[valid], tau[valid]).statistic) if valid.sum() >= 3 else float("nan")
    reference = None
    if reference_pca is not None:
        reference = _fit_rows(_moved_profiles(snapshots, reference_pca), reference_pca.lambdas)[1]
    return Trajectory(run=name, steps=steps, lambdas=pca.lambdas, profiles=moved, theory=theory, r=r, eta_t=tau,
                      raw_profiles=raw, raw_theory=raw_theory, raw_r=raw_r, raw_eta_t=raw_tau,
                      vs_init=np.array([pearson(p, raw[0]) for p in raw]), eta_t_trend=trend,
                      reference_r=reference)


def run_trajectory(run: Run) -> Trajectory:
    """The :class:`Trajectory` of a run (see :func:`snapshot_trajectory`)."""
    return snapshot_trajectory(run.name, run.snapshots, run.pca, run.reference_pca)


# --------------------------------------------------------------------------------------------------- consistency


@dataclass(frozen=True)
class RunCorrelations(Result):
    """Pearson correlation between the final first-layer profiles of runs (Table 1's consistency matrix).

    Attributes:
        names: run names.
        matrix: profiles of w_T − w_0 (the authors' protocol).
        raw_matrix: profiles of the raw weights w_T.
        basis: which patch PCA the profiles were measured in.
    """

    names: tuple[str, ...]
    matrix: np.ndarray
    raw_matrix: np.ndarray
    basis: str

    _figures: ClassVar[dict[str, str]] = {"correlation": "fl_core.lab.plots:run_correlation_figure"}

    def to_frame(self, raw: bool = False) -> pd.DataFrame:
        return pd.DataFrame(self.raw_matrix if raw else self.matrix, index=self.names, columns=self.names)


def data_pca(run: Run) -> PatchPCA:
    """The PCA of the unmodified data (App. D.2 runs: their reference PCA), in which runs are compared."""
    return run.reference_pca or run.pca


def common_bases(runs: Sequence[Run]) -> dict[int, PatchPCA]:
    """One patch PCA per patch dimension: the first such run's, so every profile of that size shares a basis."""
    bases: dict[int, PatchPCA] = {}
    for run in runs:
        bases.setdefault(data_pca(run).dim, data_pca(run))
    return bases


def final_profiles(runs: Sequence[Run], subtract_init: bool) -> list[np.ndarray]:
    """Each run's last-step profile in the common basis of its patch size (NaN if the layer never moved)."""
    bases = common_bases(runs)
    out = []
    for run in runs:
        pca = bases[data_pca(run).dim]
        weights = run.final_weights - (run.init_weights if subtract_init else 0)
        out.append(energy_profile(weights, pca) if np.any(weights) else np.full(pca.dim, np.nan))
    return out


def run_correlations(runs: Sequence[Run]) -> RunCorrelations:
    """The consistency matrix between runs (minus init and raw)."""
    names = tuple(run.name for run in runs)
    basis = ", ".join(f"{pca.n_patches:,} patches of {pca.kernel[0]}×{pca.kernel[1]}×{pca.kernel[2]}"
                      for pca in common_bases(runs).values())
    return RunCorrelations(names=names, matrix=correlation_matrix(final_profiles(runs, True)),
                           raw_matrix=correlation_matrix(final_profiles(runs, False)), basis=basis)


# -------------------------------------------------------------------------------------------- claims vs the paper


@dataclass(frozen=True)
class PaperClaim:
    """A published claim: what it says, where, the published numbers, the CIFAR10 value we compare with, what is
    measured (``unit``: appended to the numbers, empty for correlations) and which measured values agree with it.

    ``agrees`` is the closed interval of values that agree with the claim [proposed; the paper gives no test]: for a
    claimed high correlation, at least the lowest published value − 0.1; for a published mean ± sd, the union of
    mean ± 2 sd over the data sets; for a qualitative claim, the interval stated in :data:`PAPER_CLAIMS`.
    """

    claim: str
    source: str
    paper: str
    value: float | None
    measure: str
    agrees: tuple[float, float]
    unit: str = ""

    def agreement_text(self) -> str:
        """The interval ``agrees`` in words: ``≥ 0.87``, ``≤ 0.30``, ``−0.49 … +0.23``."""
        low, high = self.agrees
        if np.isinf(high):
            return f"≥ {low:.2f}{self.unit}"
        if np.isinf(low):
            return f"≤ {high:.2f}{self.unit}"
        return f"{low:+.2f} … {high:+.2f}{self.unit}"


PAPER_CLAIMS: dict[str, PaperClaim] = {
    "seeds": PaperClaim("Profiles agree across seeds", "Table 1", "0.99 (CIFAR10), 0.97 (CIFAR100), 0.99 (CelebA)",
                        0.99, "Pearson r of w−w₀ profiles, pairs differing only in seed", (0.87, np.inf)),
    "widths": PaperClaim("Profiles agree across first-layer widths", "Table 1", "0.98 (all three data sets)", 0.98,
                         "Pearson r of w−w₀ profiles, pairs differing only in first-layer width", (0.88, np.inf)),
    "trained_vs_init": PaperClaim("A trained layer is unlike its own initialization", "Table 1",
                                  "−0.13 ± 0.18 (CIFAR10), −0.04 ± 0.04 (CIFAR100), −0.18 ± 0.13 (CelebA)", -0.13,
                                  "Pearson r of raw profiles e(w_T) vs e(w₀), true labels", (-0.49, 0.23)),
    "architectures": PaperClaim("VGG and ResNet learn the same profile", "Table 1 (VGG11 vs ResNet18)",
                                "0.87 (CIFAR10), 0.80 (CIFAR100), 0.92 (CelebA)", 0.87,
                                "Pearson r of w−w₀ profiles, pairs differing only in architecture", (0.70, np.inf)),
    "random_vs_init": PaperClaim("Random labels also move the layer away from init", "Table 2",
                                 "0.03 ± 0.22 (CIFAR10), 0.14 ± 0.13 (CIFAR100), 0.08 ± 0.07 (CelebA)", 0.03,
                                 "Pearson r of raw profiles e(w_T) vs e(w₀), random labels", (-0.41, 0.47)),
    "true_vs_random": PaperClaim("True and random labels learn the same profile", "Table 2",
                                 "0.90 ± 0.02 (CIFAR10), 0.91 ± 0.01 (CIFAR100), 0.96 ± 0.03 (CelebA)", 0.90,
                                 "Pearson r of w−w₀ profiles, pairs differing only in true/random labels",
                                 (0.80, np.inf)),
    "theory_fit": PaperClaim("The linear theory fits trained layers", "Table 3",
                             "0.94 ± 0.01 (CIFAR10), 0.96 ± 0.01 (CelebA), 0.90 ± 0.01 (ImageNet)", 0.94,
                             "Pearson r of the one-parameter fit to e(w_T − w₀), true labels", (0.80, np.inf)),
    "random_init_fit": PaperClaim("…but not random initializations", "Table 3", "0.10 ± 0.15", 0.10,
                                  "Pearson r of the fit to 10 random-init banks of the same shape", (-0.20, 0.40)),
    "eta_t_grows": PaperClaim("The fitted τ = ηt grows with the step count", "Thm. 4.2 (prediction)",
                              "τ = ηt, linear in t (no measured value)", None,
                              "Spearman ρ between step and the τ fitted at each snapshot, true labels",
                              (0.5, np.inf)),
    "frozen": PaperClaim("A frozen random first layer costs almost no accuracy", "Fig. 2, App. F",
                         "“almost no change” (numbers only in figures)", None,
                         "validation accuracy, frozen minus trained (percentage points)", (-5.0, 5.0), " pp"),
    "d1_energy_labels": PaperClaim("Labels tied to patch energy break the label-independence", "App. D.1, Fig. 8a",
                                   "true-vs-random r drops to ≈ 0 for component 15", 0.0,
                                   "Pearson r of w−w₀ profiles, energy-decile labels vs random labels", (-0.3, 0.3)),
    "d2_modified_spectrum": PaperClaim("The theory follows a manipulated spectrum", "App. D.2, Fig. 8b",
                                       "still fits true and random labels (numbers only in figures)", None,
                                       "fit r on the modified spectrum (detail: on the unmodified one)",
                                       (0.80, np.inf)),
}


@dataclass(frozen=True)
class ClaimCheck(Result):
    """One claim measured on runs.

    Attributes:
        key: the claim's key in :data:`PAPER_CLAIMS`.
        ours, ours_sd: mean and sd over the pairs/runs (``None`` when no run tests it).
        n: number of pairs/runs.
        detail: the individual values, by run.
        matched, matched_sd, matched_detail: pair claims only: the same pairs compared at matched ηt (proposed).
    """

    key: str
    claim: str
    source: str
    paper: str
    paper_value: float | None
    measure: str
    ours: float | None
    ours_sd: float | None
    n: int
    detail: str
    matched: float | None = None
    matched_sd: float | None = None
    matched_detail: str = ""


@dataclass(frozen=True)
class ClaimSummary(Result):
    """The paper's claims measured on a set of runs (the Training Lab's summary table)."""

    claims: tuple[ClaimCheck, ...]
    runs: tuple[str, ...]

    _figures: ClassVar[dict[str, str]] = {"claims": "fl_core.lab.plots:claims_figure"}

    def to_frame(self) -> pd.DataFrame:
        """One row per claim: the published values, ours (with its unit), whether ours agrees with the claim
        (:attr:`PaperClaim.agrees`), the same at matched ηt for pair claims, and what was measured."""
        rows = []
        for c in self.claims:
            unit = PAPER_CLAIMS[c.key].unit
            rows.append({"claim": c.claim, "source": c.source, "paper": c.paper,
                         "ours": _format(c.ours, c.ours_sd, c.n, unit), "verdict": verdict(c.key, c.ours),
                         "agrees when": PAPER_CLAIMS[c.key].agreement_text(), "n": c.n,
                         "ours at matched ηt (proposed)": _format(c.matched, c.matched_sd, c.n, unit)
                         if c.matched_detail else "",
                         "verdict at matched ηt": verdict(c.key, c.matched) if c.matched_detail else "",
                         "measure": c.measure, "detail": c.detail, "matched detail": c.matched_detail})
        return pd.DataFrame(rows)


def verdict(key: str, value: float | None) -> str:
    """``agrees`` when ``value`` lies in the claim's :attr:`PaperClaim.agrees` interval, ``differs`` outside it,
    ``not run`` without a value."""
    if value is None or not np.isfinite(value):
        return "not run"
    low, high = PAPER_CLAIMS[key].agrees
    return "agrees" if low <= value <= high else "differs"


def _format(mean: float | None, sd: float | None, n: int, unit: str = "") -> str:
    if mean is None or not np.isfinite(mean):
        return "not run"
    return f"{mean:+.2f}" + (f" ± {sd:.2f}" if n > 1 and sd is not None else "") + unit


def _comparison_key(config: RunSettings, factor: str) -> tuple:
    """The configuration without ``factor``, the schedule, and settings that the other fields make irrelevant."""
    values = config.to_dict()
    if config.labels != "energy":
        values["label_component"] = None
    if not config.manipulated:
        values["alpha_component"] = None
    if factor == "labels":
        values["label_component"] = None
    return tuple(sorted((k, str(v)) for k, v in values.items() if k not in (factor, *SCHEDULE_FIELDS)))


def pairs_differing_in(runs: Sequence[Run], factor: str) -> list[tuple[Run, Run]]:
    """Pairs of runs whose configurations differ in ``factor`` only (the schedule aside)."""
    return [(a, b) for a, b in itertools.combinations(runs, 2)
            if setting_value(a.config, factor) != setting_value(b.config, factor)
            and _comparison_key(a.config, factor) == _comparison_key(b.config, factor)]


def _plain(run: Run, labels: str = "true") -> bool:
    """A run with the given labels, unmanipulated input and a trained first layer."""
    return run.config.labels == labels and not run.config.manipulated and not run.config.train.freeze_first


def _mean_sd(values: Sequence[tuple[str, float]]) -> tuple[float | None, float | None, int, str]:
    finite = [v for _, v in values if np.isfinite(v)]
    detail = "; ".join(f"{name}: {value:+.3f}" for name, value in values)
    if not finite:
        return None, None, 0, detail
    return float(np.mean(finite)), float(np.std(finite)), len(finite), detail


def _check(key: str, values: Sequence[tuple[str, float]],
           matched: Sequence[tuple[str, float]] | None = None) -> ClaimCheck:
    paper = PAPER_CLAIMS[key]
    ours, sd, n, detail = _mean_sd(values)
    m, m_sd, _, m_detail = _mean_sd(matched or [])
    return ClaimCheck(key=key, claim=paper.claim, source=paper.source, paper=paper.paper, paper_value=paper.value,
                      measure=paper.measure, ours=ours, ours_sd=sd, n=n, detail=detail, matched=m, matched_sd=m_sd,
                      matched_detail=m_detail)


def summarize_runs(runs: Sequence[Run], trajectories: dict[str, Trajectory] | None = None) -> ClaimSummary:
    """Measure every claim of :data:`PAPER_CLAIMS` that the runs allow (pairs found by configuration)."""
    runs = list(runs)
    traj = dict(trajectories or {})
    for run in runs:
        if run.name not in traj:
            traj[run.name] = run_trajectory(run)
    bases = common_bases(runs)
    moved = dict(zip([r.name for r in runs], final_profiles(runs, True))) if runs else {}

    def pair_values(factor: str, keep: Callable[[Run, Run], bool]) -> list[tuple[str, float]]:
        return [(f"{a.name} vs {b.name}", pearson(moved[a.name], moved[b.name]))
                for a, b in pairs_differing_in(runs, factor) if keep(a, b)]

    def matched_values(factor: str, keep: Callable[[Run, Run], bool]) -> list[tuple[str, float]]:
        return [_matched_time(a, b, traj, bases, moved) for a, b in pairs_differing_in(runs, factor) if keep(a, b)]

    def pair_check(key: str, factor: str, keep: Callable[[Run, Run], bool]) -> ClaimCheck:
        return _check(key, pair_values(factor, keep), matched_values(factor, keep))

    def per_run(keep: Callable[[Run], bool], value: Callable[[Trajectory], float]) -> list[tuple[str, float]]:
        return [(run.name, float(value(traj[run.name]))) for run in runs if keep(run)]

    labels_pair = {"true", "random"}
    checks = [
        pair_check("seeds", "seed", lambda a, b: _plain(a) and _plain(b)),
        pair_check("widths", "width", lambda a, b: _plain(a) and _plain(b)),
        _check("trained_vs_init", per_run(_plain, lambda t: t.vs_init[-1])),
        pair_check("architectures", "arch", lambda a, b: _plain(a) and _plain(b)),
        _check("random_vs_init", per_run(lambda r: _plain(r, "random"), lambda t: t.vs_init[-1])),
        pair_check("true_vs_random", "labels", lambda a, b: {a.config.labels, b.config.labels} == labels_pair
                   and not a.config.manipulated and not a.config.train.freeze_first),
        _check("theory_fit", per_run(_plain, lambda t: t.r[-1])),
        _check("random_init_fit", _random_init_fits(runs, bases)),
        _check("eta_t_grows", per_run(_plain, lambda t: t.eta_t_trend)),
        _check("frozen", [(f"{b.name} vs {a.name}: {b.history.final_val_accuracy:.1%} vs "
                           f"{a.history.final_val_accuracy:.1%}",
                           100 * (b.history.final_val_accuracy - a.history.final_val_accuracy))
                          for a, b in (sorted(p, key=lambda r: r.config.train.freeze_first)
                                       for p in pairs_differing_in(runs, "freeze_first"))]),
        pair_check("d1_energy_labels", "labels", lambda a, b: {a.config.labels, b.config.labels}
                   == {"energy", "random"} and not a.config.manipulated),
        _check("d2_modified_spectrum", [(f"{run.name} (unmodified spectrum: {traj[run.name].reference_r[-1]:+.3f})",
                                         traj[run.name].r[-1]) for run in runs if run.config.manipulated]),
    ]
    return ClaimSummary(claims=tuple(checks), runs=tuple(run.name for run in runs))


def _matched_time(a: Run, b: Run, traj: dict[str, Trajectory], bases: dict[int, PatchPCA],
                  moved: dict[str, np.ndarray]) -> tuple[str, float]:
    """Pearson r at matched ηt (proposed): the final w−w₀ profile of the pair's run with the smaller fitted ηt
    against the other run's snapshot whose fitted ηt is closest to it (in log ηt)."""
    final = {run.name: traj[run.name].eta_t[-1] for run in (a, b)}
    if not all(np.isfinite(v) and v > 0 for v in final.values()):
        return f"{a.name} vs {b.name}", float("nan")
    early, late = sorted((a, b), key=lambda run: final[run.name])
    taus = traj[late.name].eta_t
    valid = np.flatnonzero(np.isfinite(taus) & (taus > 0))
    index = valid[np.argmin(np.abs(np.log(taus[valid]) - np.log(final[early.name])))]
    step = int(traj[late.name].steps[index])
    pca = bases[data_pca(late).dim]
    profile = energy_profile(late.snapshots[step] - late.init_weights, pca)
    return f"{early.name} (end) vs {late.name} (step {step})", pearson(moved[early.name], profile)


def _random_init_fits(runs: Sequence[Run], bases: dict[int, PatchPCA]) -> list[tuple[str, float]]:
    """Theory-fit r of 10 random-init banks shaped like the first run's first layer (energy page's baseline)."""
    if not runs:
        return []
    pca = bases[data_pca(runs[0]).dim]
    banks = random_init_banks(tuple(runs[0].init_weights.shape), range(EnergySettings().seeds))
    return [(f"random bank seed {seed}", fit_linear_theory(energy_profile(bank, pca), pca.lambdas).r)
            for seed, bank in enumerate(banks)]

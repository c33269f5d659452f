"""Significance of the channel-axes statistics: task information against its noise floor, and bootstrap intervals
over images (docs/methods.md, "Significance").

* **Task information against the noise floor.** The plug-in Gaussian (or copula) estimate ``I = −½ log(1 − r²)`` of
  one channel's pooled activation with the margin is positive even when the two are independent: with N images its
  null expectation is ``E[I] = ½[ψ((N−1)/2) − ψ((N−2)/2)] ≈ 1/(2N)`` nats (``r²`` is Beta(½, (N−2)/2) under
  independence of Gaussians; :func:`mi_null_mean`). :func:`task_information` reports that bias, the corrected value
  ``I − E[I]`` and a per-channel permutation p-value (the margin's images shuffled, the same shuffles for every
  channel: exact under exchangeability, whatever the channel's distribution).
* **Bootstrap over images** (:func:`bootstrap`): any statistic of one or several independent sets of images (e.g.
  calibration and evaluation) recomputed on resampled images; percentile intervals. Resamples are drawn from the
  seed alone, so statistics of several layers measured on the same images share their resamples and can be averaged
  resample by resample (:meth:`Bootstrap.combine`).

These functions take plain arrays (pooled activations, margins, per-image values), so other analyses (the Training
Lab's axes over training, pruning AUCs) reuse them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.special import digamma

from fl_core.channelaxes.information import copula_normalize
from fl_core.results import Result

SIGNIFICANCE_LEVEL = 0.05
"""A channel's task information is measurable when its permutation p-value is below this (uncorrected: under the
null, 5 % of channels pass by chance)."""


def mi_null_mean(n: int, dimensions: int = 1) -> float:
    """Expected plug-in Gaussian MI ``−½ log(1 − r²)`` between independent Gaussian variables on ``n`` samples, in
    nats: ``½[ψ((n−1)/2) − ψ((n−2)/2)] ≈ 1/(2n)`` per dimension (``dimensions`` scalar pairs add up)."""
    if n < 3:
        return float("nan")
    return dimensions * 0.5 * float(digamma((n - 1) / 2) - digamma((n - 2) / 2))


def _standardized(values: torch.Tensor) -> torch.Tensor:
    """Columns centred and scaled to unit norm (a constant column stays 0), float64."""
    x = values.double()
    x = x - x.mean(dim=0)
    norms = x.norm(dim=0)
    return torch.where(norms > 0, x / torch.where(norms > 0, norms, 1.0), 0.0)


@dataclass(frozen=True)
class TaskInformation(Result):
    """Task information of every channel with its bias and significance.

    Attributes:
        information: ``(C,)`` plug-in I(ā_i; m) in nats (copula or Gaussian).
        null_mean: its expectation under independence on these N images (:func:`mi_null_mean`), the noise floor.
        corrected: ``information − null_mean`` (negative: below the noise floor).
        p_value: ``(C,)`` permutation p-value ``(1 + #{|r_null| ≥ |r|}) / (1 + B)``.
        permutation_mean: mean MI over all permutations and channels (checks ``null_mean``).
        n_images: N.
        n_permutations: B.
        seed: seed of the permutations.
        copula: Gaussian-copula estimate (rank-normal scores) rather than plain Gaussian.
        level: the p-value below which a channel's information counts as measurable.
    """

    information: np.ndarray
    null_mean: float
    corrected: np.ndarray
    p_value: np.ndarray
    permutation_mean: float
    n_images: int
    n_permutations: int
    seed: int
    copula: bool
    level: float = SIGNIFICANCE_LEVEL

    _private_fields = ("information", "corrected", "p_value")

    @property
    def significant_share(self) -> float:
        """Fraction of channels whose p-value is below :attr:`level`."""
        return float(np.mean(self.p_value < self.level)) if len(self.p_value) else float("nan")

    @property
    def noise_floor_share(self) -> float:
        """Fraction of channels whose task information is not measurable (p ≥ :attr:`level`)."""
        return 1.0 - self.significant_share

    def sentence(self) -> str:
        """``task information is at the noise floor for 92 % of channels on 384 images ...``."""
        return (f"task information is at the noise floor for {self.noise_floor_share:.0%} of channels on "
                f"{self.n_images} images (permutation p ≥ {self.level:g}; chance alone leaves "
                f"{1 - self.level:.0%} there); noise floor 1/(2N) ≈ {self.null_mean:.4f} nats, mean I(ā;m) "
                f"{float(np.mean(self.information)):.4f}")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "significant_share": self.significant_share,
                "noise_floor_share": self.noise_floor_share, "mean_information": float(np.mean(self.information))}


def task_information(pooled: torch.Tensor | np.ndarray, margin: torch.Tensor | np.ndarray, *, copula: bool = True,
                     n_permutations: int = 999, seed: int = 0, level: float = SIGNIFICANCE_LEVEL) -> TaskInformation:
    """Task information ``I(ā_i; m) = −½ log(1 − r_i²)`` of every channel with its noise floor and permutation p-value
    (module docstring).

    Args:
        pooled: ``(N, C)`` per-image pooled activations.
        margin: ``(N,)`` target (the true-class logit margin).
        copula: rank-normal scores first (:func:`~fl_core.channelaxes.information.copula_normalize`).
        n_permutations: shuffles of the margin (shared by all channels).
        seed: seed of the shuffles.
        level: see :attr:`TaskInformation.level`.
    """
    x, m = torch.as_tensor(pooled).double().cpu(), torch.as_tensor(margin).double().cpu()
    if copula:
        x, m = copula_normalize(x), copula_normalize(m)
    xs, ms = _standardized(x), _standardized(m[:, None])[:, 0]
    r = ms @ xs
    information = (-0.5 * torch.log1p(-r.clamp(-1, 1).square())).numpy()
    generator = torch.Generator().manual_seed(int(seed))
    exceed = torch.zeros_like(r)
    null_sum = 0.0
    for start in range(0, n_permutations, 256):
        count = min(256, n_permutations - start)
        shuffled = ms[torch.argsort(torch.rand(count, len(ms), generator=generator), dim=1)]
        r_null = shuffled @ xs
        exceed += (r_null.abs() >= r.abs() - 1e-12).sum(0)
        null_sum += float((-0.5 * torch.log1p(-r_null.clamp(-1, 1).square())).sum())
    n = x.shape[0]
    null_mean = mi_null_mean(n)
    return TaskInformation(information=information, null_mean=null_mean, corrected=information - null_mean,
                           p_value=((1 + exceed) / (1 + n_permutations)).numpy(),
                           permutation_mean=null_sum / max(n_permutations * x.shape[1], 1), n_images=int(n),
                           n_permutations=int(n_permutations), seed=int(seed), copula=copula, level=level)


# ---------------------------------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class Bootstrap(Result):
    """A statistic with its bootstrap distribution over images and the percentile interval.

    Attributes:
        estimate: the statistic on the images as they are.
        low, high: the percentile interval at :attr:`level` (NaN when fewer than half the resamples gave a value).
        values: the statistic on each resample (NaN where undefined).
        level: coverage of the interval.
        seed: seed of the resamples.
        sizes: the images of each resampled set.
    """

    estimate: float
    low: float
    high: float
    values: np.ndarray = field(repr=False)
    level: float
    seed: int
    sizes: tuple[int, ...]

    _private_fields = ("values",)

    @property
    def interval(self) -> list[float]:
        """``[low, high]``."""
        return [self.low, self.high]

    @classmethod
    def from_values(cls, estimate: float, values: np.ndarray, level: float, seed: int, sizes: Sequence[int]
                    ) -> Bootstrap:
        """The percentile interval of ``values`` around ``estimate``."""
        values = np.asarray(values, dtype=np.float64)
        finite = values[np.isfinite(values)]
        low = high = float("nan")
        if finite.size and finite.size >= values.size / 2:
            low, high = (float(v) for v in np.percentile(finite, [50 * (1 - level), 50 * (1 + level)]))
        return cls(estimate=float(estimate), low=low, high=high, values=values, level=level, seed=int(seed),
                   sizes=tuple(int(s) for s in sizes))

    @staticmethod
    def combine(parts: Sequence[Bootstrap | None], reduce: Callable[..., np.ndarray] = np.mean) -> Bootstrap | None:
        """``reduce(values, axis=0)`` over parts measured on the same resamples of the calibration images (the same
        seed, first set and count: several layers of one pass, a network and its initialization), resample by
        resample; ``None`` when a part is missing or they were not resampled alike."""
        if not parts or any(p is None for p in parts):
            return None
        first = parts[0]
        key = (first.seed, first.sizes[:1], len(first.values), first.level)
        if any((p.seed, p.sizes[:1], len(p.values), p.level) != key for p in parts):
            return None
        return Bootstrap.from_values(float(reduce(np.array([p.estimate for p in parts]), axis=0)),
                                     reduce(np.stack([p.values for p in parts]), axis=0), first.level, first.seed,
                                     first.sizes[:1])

    def minus(self, other: Bootstrap | None) -> Bootstrap | None:
        """The paired difference resample by resample (see :meth:`combine`)."""
        return Bootstrap.combine([self, other], lambda values, axis: values[0] - values[1])

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "ci": self.interval, "level": self.level, "resamples": len(self.values),
                "seed": self.seed, "images": list(self.sizes)}


def resample_weights(sizes: Sequence[int], resamples: int, seed: int) -> list[np.ndarray]:
    """How often each image is drawn in each resample: one ``(resamples, n)`` array of counts per set of ``n``
    images (each row sums to n). Set k's draws come from its own stream ``(seed, k)``, so the first set (the
    calibration images) is resampled alike whether or not other sets are resampled beside it (a trained network with
    lesions and its initialization without)."""
    weights = []
    for k, n in enumerate(sizes):
        draws = np.random.default_rng([seed, k]).integers(0, n, (resamples, n))
        counts = np.zeros((resamples, n))
        np.add.at(counts, (np.arange(resamples)[:, None], draws), 1.0)
        weights.append(counts)
    return weights


def bootstrap(statistic: Callable[..., dict[str, np.ndarray]], sizes: Sequence[int], *, resamples: int = 500,
              seed: int = 0, level: float = 0.95, chunk: int = 100) -> dict[str, Bootstrap]:
    """Percentile bootstrap intervals over images of several statistics computed together, resamples in batches.

    ``statistic(*weights)`` takes one ``(R, n_k)`` array per set of images (``sizes[k]`` images in set k, resampled
    independently): how often each image counts in each of R resamples, and returns named ``(R,)`` values. It is
    called once with all weights 1 (the images as they are: the estimates) and on the resamples ``chunk`` at a time
    (:func:`resample_weights`). A value that is not finite in a resample is left out of its interval.

    Args:
        statistic: ``(*weights) -> {name: (R,) values}``.
        sizes: images per set.
        resamples: bootstrap resamples (0: the estimates without intervals).
        seed: seed of the resamples.
        level: coverage of the intervals.
        chunk: resamples per call of ``statistic`` (bounds its memory).
    """
    estimates = statistic(*(np.ones((1, n)) for n in sizes))
    weights = resample_weights(sizes, resamples, seed)
    draws: dict[str, list[np.ndarray]] = {name: [] for name in estimates}
    for start in range(0, resamples, chunk):
        values = statistic(*(w[start: start + chunk] for w in weights))
        for name in draws:
            draws[name].append(np.asarray(values.get(name, np.full(len(weights[0][start: start + chunk]), np.nan))))
    return {name: Bootstrap.from_values(float(np.asarray(value).reshape(-1)[0]),
                                        np.concatenate(draws[name]) if draws[name] else np.zeros(0), level, seed,
                                        sizes) for name, value in estimates.items()}

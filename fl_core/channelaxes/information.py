"""Target-axis estimators of the two-axis view: Gaussian/copula MI, MMI PID, target-excess.

Section numbers (§) refer to docs/methods.md, "Channel axes".

Inputs are per-image values: pooled channel activations ``x (N, C)`` and a scalar target ``m (N,)`` such as
the true-class logit margin (:func:`logit_margin`). Every Gaussian quantity is a function of the joint
correlation matrix of ``[x, m]``, so each estimator forms that matrix once (float64, on the inputs' device)
and evaluates all channels with batched log-determinants or inverses. All values are in nats.

The task-information, target-excess and synergy-proxy definitions are the project's **proposed** ones; the MMI
PID for Gaussian sources with a scalar target follows Barrett (2015). For a copula version of any estimator,
pass :func:`copula_normalize`-d inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fl_core.channelaxes.moments import ChannelMoments
from fl_core.compute.device import statistics_dtype
from fl_core.results import Result


def _as_columns(values: torch.Tensor) -> torch.Tensor:
    """``(N,)`` → ``(N, 1)``; ``(N, p)`` unchanged."""
    return values[:, None] if values.ndim == 1 else values


def _joint_correlation(x: torch.Tensor, m: torch.Tensor, shrinkage: float) -> torch.Tensor:
    """Shrunk correlation ``(1−α)R + αI`` of the columns of ``[x, m]`` (a scalar target is the last one)."""
    dtype = statistics_dtype(x.device)
    joint = torch.cat([_as_columns(x).to(dtype), _as_columns(m).to(x.device, dtype)], dim=1)
    corr = ChannelMoments.from_batches([joint]).correlation()
    return (1.0 - shrinkage) * corr + shrinkage * torch.eye(corr.shape[0], dtype=dtype, device=corr.device)


def _logdet(corr: torch.Tensor, index_sets: torch.Tensor) -> torch.Tensor:
    """``log|R_SS|`` for every row S of ``index_sets (..., s)``, as one batched call."""
    sub = corr[index_sets[..., :, None], index_sets[..., None, :]]
    return torch.linalg.slogdet(sub).logabsdet


def _target_mi(corr: torch.Tensor, index_sets: torch.Tensor) -> torch.Tensor:
    """``I(S; m) = ½[log|R_SS| − log|R_{S∪m}|]`` for every set S, with m the last variable of ``corr``."""
    target = torch.full_like(index_sets[..., :1], corr.shape[0] - 1)
    return 0.5 * (_logdet(corr, index_sets) - _logdet(corr, torch.cat([index_sets, target], dim=-1)))


def _scalar_target_mi(corr: torch.Tensor) -> torch.Tensor:
    """``I(x_i; m) = −½ log(1 − ρ²_im)`` for every channel i of a joint correlation with m last."""
    return -0.5 * torch.log1p(-corr[:-1, -1].square())


def gaussian_mi(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Gaussian MI of each channel with a scalar: ``I(x_i; y) = −½ log(1 − ρ²(x_i, y))`` nats (§3.1).

    Args:
        x: ``(N, C)`` (or ``(N,)``) values.
        y: ``(N,)`` target.

    Returns:
        ``(C,)`` MI per channel (0 for a constant channel), float64 on x's device.
    """
    dtype = statistics_dtype(x.device)
    xc = _as_columns(x).to(dtype)
    xc = xc - xc.mean(dim=0)
    yc = y.to(x.device, dtype)
    yc = yc - yc.mean()
    norms = xc.square().sum(dim=0) * yc.square().sum()
    covariance = (xc * yc[:, None]).sum(dim=0)
    rho = torch.where(norms > 0, covariance / norms.clamp_min(torch.finfo(dtype).tiny).sqrt(), 0)
    return -0.5 * torch.log1p(-rho.clamp(-1.0, 1.0).square())


def gaussian_mi_sets(s: torch.Tensor, t: torch.Tensor, shrinkage: float = 0.0) -> torch.Tensor:
    """Gaussian MI between two sets: ``I(S; T) = ½[log|Σ_S| + log|Σ_T| − log|Σ_{S∪T}|]`` nats (§3.2).

    Computed on the shrunk correlation ``(1−α)R + αI`` of ``[S, T]`` (α = ``shrinkage``; use α > 0 when |S| is
    large compared with N). The plug-in bias is about |S|·|T|/(2N) nats.

    Args:
        s: ``(N, p)`` or ``(N,)``.
        t: ``(N, q)`` or ``(N,)``.
    """
    p = _as_columns(s).shape[1]
    corr = _joint_correlation(s, t, shrinkage)
    everything = torch.arange(corr.shape[0], device=corr.device)
    return 0.5 * (
        _logdet(corr, everything[:p]) + _logdet(corr, everything[p:]) - _logdet(corr, everything)
    )


def _average_ranks(x: torch.Tensor) -> torch.Tensor:
    """1-based ranks of each column of ``x (N, C)`` along N, ties given their average rank."""
    n, n_columns = x.shape
    values, order = x.sort(dim=0)
    starts_group = torch.ones_like(values, dtype=torch.bool)
    starts_group[1:] = values[1:] != values[:-1]
    groups = starts_group.long().cumsum(dim=0) - 1 + n * torch.arange(n_columns, device=x.device)
    positions = torch.arange(1, n + 1, dtype=statistics_dtype(x.device), device=x.device)[:, None]
    positions = positions.expand(n, n_columns)
    rank_sums = torch.zeros(n * n_columns, dtype=positions.dtype, device=x.device)
    rank_sums.scatter_add_(0, groups.flatten(), positions.flatten())
    group_sizes = torch.zeros_like(rank_sums).scatter_add_(0, groups.flatten(), torch.ones_like(rank_sums))
    sorted_ranks = (rank_sums / group_sizes.clamp_min(1))[groups]
    return torch.empty_like(sorted_ranks).scatter_(0, order, sorted_ranks)


def copula_normalize(x: torch.Tensor) -> torch.Tensor:
    """Gaussian-copula transform along samples: ``Φ⁻¹(rank / (N + 1))``, ties given their average rank (§3.1).

    Args:
        x: ``(N,)`` or ``(N, C)``; each column is transformed separately.

    Returns:
        Same shape, float64 standard-normal scores on x's device.
    """
    ranks = _average_ranks(_as_columns(x))
    scores = torch.special.ndtri(ranks / (x.shape[0] + 1))
    return scores.reshape(x.shape)


def gaussian_copula_mi(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Gaussian-copula MI (a lower bound on the MI): :func:`gaussian_mi` of copula-normalized x, y (§3.1)."""
    return gaussian_mi(copula_normalize(x), copula_normalize(y))


@dataclass(frozen=True)
class MMIPID(Result):
    """Minimum-mutual-information PID of two sources about a scalar target, in nats (§3.3, Barrett 2015).

    ``redundancy + unique_1 + unique_2 + synergy == joint_information`` = I(S₁, S₂; Y).
    """

    redundancy: float
    unique_1: float
    unique_2: float
    synergy: float
    joint_information: float


def mmi_pid(s1: torch.Tensor, s2: torch.Tensor, target: torch.Tensor, shrinkage: float = 0.0) -> MMIPID:
    """MMI PID (§3.3): Red = min(I₁, I₂), Unq_k = I_k − Red, Syn = I(S₁,S₂;Y) − I₁ − I₂ + Red.

    Args:
        s1: first source ``(N,)`` or ``(N, p1)``.
        s2: second source ``(N,)`` or ``(N, p2)``.
        target: scalar target ``(N,)``.
        shrinkage: correlation shrinkage α passed to :func:`gaussian_mi_sets`.
    """
    info_1 = float(gaussian_mi_sets(s1, target, shrinkage))
    info_2 = float(gaussian_mi_sets(s2, target, shrinkage))
    both = torch.cat([_as_columns(s1), _as_columns(s2).to(s1.dtype)], dim=1)
    joint = float(gaussian_mi_sets(both, target, shrinkage))
    redundancy = min(info_1, info_2)
    return MMIPID(
        redundancy=redundancy,
        unique_1=info_1 - redundancy,
        unique_2=info_2 - redundancy,
        synergy=joint - info_1 - info_2 + redundancy,
        joint_information=joint,
    )


def _partial_correlation_with_target(corr: torch.Tensor, peer_sets: torch.Tensor | None) -> torch.Tensor:
    """``ρ_{im·P(i)}`` for every channel i from the joint correlation (m last) via batched precisions."""
    n_channels = corr.shape[0] - 1
    if peer_sets is None:
        precision = torch.linalg.inv(corr)
        return -precision[:-1, -1] / (precision.diagonal()[:-1] * precision[-1, -1]).sqrt()
    channels = torch.arange(n_channels, device=corr.device)[:, None]
    sets = torch.cat([channels, torch.full_like(channels, n_channels), peer_sets.to(corr.device)], dim=1)
    precision = torch.linalg.inv(corr[sets[:, :, None], sets[:, None, :]])
    return -precision[:, 0, 1] / (precision[:, 0, 0] * precision[:, 1, 1]).sqrt()


def target_excess(
    x: torch.Tensor, m: torch.Tensor, peer_sets: torch.Tensor | None = None, shrinkage: float = 0.0
) -> torch.Tensor:
    """Proposed target-excess ``TE(i) = I(x_i, x_P; m) − I(x_P; m) = −½ log(1 − ρ²_{im·P})`` (§3.4).

    Args:
        x: pooled activations ``(N, C)``.
        m: target ``(N,)``.
        peer_sets: ``(C, k)`` peers P(i) of each channel (e.g. :func:`fl_core.channelaxes.moments.top_peers`);
            ``None`` means all other channels (then use ``shrinkage`` > 0 unless N ≫ C).
        shrinkage: α of the shrunk joint correlation ``(1−α)R + αI``.

    Returns:
        ``(C,)`` nats, float64 on x's device.
    """
    rho = _partial_correlation_with_target(_joint_correlation(x, m, shrinkage), peer_sets)
    return -0.5 * torch.log1p(-rho.clamp(-1.0, 1.0).square())


@dataclass(frozen=True)
class PairwiseInformation(Result):
    """Pairwise MMI proxies of each channel with its peers, averaged over the peers (proposed, §3.5), in nats.

    Attributes:
        redundancy: mean over j ∈ P(i) of Red_ij = min(I(i;m), I(j;m)).
        synergy: mean of Syn_ij = I(i,j;m) − I(i;m) − I(j;m) + Red_ij.
        net_synergy: mean of I(i,j;m) − I(i;m) − I(j;m) (negative co-information).
        k: peers per channel.
    """

    redundancy: torch.Tensor
    synergy: torch.Tensor
    net_synergy: torch.Tensor
    k: int


def pairwise_information(
    x: torch.Tensor, m: torch.Tensor, peer_sets: torch.Tensor, shrinkage: float = 0.0
) -> PairwiseInformation:
    """Proposed pairwise redundancy / synergy / net-synergy proxies over each channel's peers (§3.3, §3.5).

    Args:
        x: pooled activations ``(N, C)``.
        m: target ``(N,)``.
        peer_sets: ``(C, k)`` peers of each channel (e.g. the top-k |ρ| peers).
        shrinkage: α of the shrunk joint correlation.
    """
    corr = _joint_correlation(x, m, shrinkage)
    peer_sets = peer_sets.to(corr.device)
    single = _scalar_target_mi(corr)
    own = torch.arange(peer_sets.shape[0], device=corr.device)[:, None].expand_as(peer_sets)
    info_i, info_j = single[own], single[peer_sets]
    info_ij = _target_mi(corr, torch.stack([own, peer_sets], dim=-1))
    redundancy = torch.minimum(info_i, info_j)
    net_synergy = info_ij - info_i - info_j
    return PairwiseInformation(
        redundancy=redundancy.mean(dim=1),
        synergy=(net_synergy + redundancy).mean(dim=1),
        net_synergy=net_synergy.mean(dim=1),
        k=peer_sets.shape[1],
    )


@dataclass(frozen=True)
class TripletSynergy(Result):
    """Proposed triplet synergy per channel (§3.5), in nats.

    Attributes:
        synergy: mean over sampled peer pairs (j, l) of I(i,j,l;m) − max of the three pair informations.
        n_triplets: triplets per channel actually used (all peer pairs when fewer than requested).
        seed: seed of the pair sampling.
    """

    synergy: torch.Tensor
    n_triplets: int
    seed: int


def triplet_synergy(
    x: torch.Tensor,
    m: torch.Tensor,
    peer_sets: torch.Tensor,
    n_triplets: int = 64,
    seed: int = 0,
    shrinkage: float = 0.0,
) -> TripletSynergy:
    """Proposed ``Syn3(i,j,l) = I(i,j,l;m) − max(I(i,j;m), I(i,l;m), I(j,l;m))`` averaged per channel (§3.5).

    The pairs (j, l), j ≠ l, are drawn without replacement from channel i's peers (seeded); when the peers
    have no more than ``n_triplets`` pairs, all of them are used.

    Args:
        x: pooled activations ``(N, C)``.
        m: target ``(N,)``.
        peer_sets: ``(C, k)`` peers of each channel, k ≥ 2.
        n_triplets: pairs sampled per channel.
        seed: seed of the sampling (recorded in the result).
        shrinkage: α of the shrunk joint correlation.
    """
    corr = _joint_correlation(x, m, shrinkage)
    peer_sets = peer_sets.to(corr.device)
    n_channels, k = peer_sets.shape
    pair_positions = torch.triu_indices(k, k, offset=1, device=corr.device)
    n_pairs = pair_positions.shape[1]
    if n_pairs == 0:
        raise ValueError("triplet synergy needs at least 2 peers per channel")
    if n_triplets < n_pairs:
        generator = torch.Generator().manual_seed(seed)
        chosen = torch.rand(n_channels, n_pairs, generator=generator).argsort(dim=1)[:, :n_triplets]
        chosen = chosen.to(corr.device)
    else:
        chosen = torch.arange(n_pairs, device=corr.device).expand(n_channels, n_pairs)
    own = torch.arange(n_channels, device=corr.device)[:, None].expand_as(chosen)
    first = peer_sets.gather(1, pair_positions[0][chosen])
    second = peer_sets.gather(1, pair_positions[1][chosen])
    pairs = [torch.stack(pair, dim=-1) for pair in ((own, first), (own, second), (first, second))]
    pair_info = _target_mi(corr, torch.stack(pairs))
    triple_info = _target_mi(corr, torch.stack([own, first, second], dim=-1))
    synergy = triple_info - pair_info.amax(dim=0)
    return TripletSynergy(synergy=synergy.mean(dim=1), n_triplets=chosen.shape[1], seed=int(seed))


def logit_margin(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """True-class logit margin ``m(n) = z_{y_n} − max_{k≠y_n} z_k`` (docs/methods.md, "Where a channel lives").

    Args:
        logits: ``(N, K)``, K ≥ 2.
        targets: ``(N,)`` class indices.
    """
    true_logit = logits.gather(1, targets[:, None]).squeeze(1)
    others = logits.scatter(1, targets[:, None], -torch.inf)
    return true_logit - others.amax(dim=1)

"""Per-channel statistics of a layer for the local axis of the two-axis view.

Section numbers (§1, §2, §4) refer to docs/methods.md, "Channel axes".

Everything here is pure tensor maths: activations come in as tensors, numbers go out as tensors (float64 where
the device supports it) on the device the inputs live on. Hooks and model loading live elsewhere.

The definitions are the project's **proposed** ones (the paper's method section is not public); the
closed-form identities they rely on are checked numerically in ``tests/channelaxes/test_moments.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from fl_core.compute.device import statistics_dtype
from fl_core.errors import AnalysisError
from fl_core.results import Result


class ChannelMoments:
    """Streaming count, per-channel sum and centred C×C sum of outer products of channel activations.

    Each batch is reduced with one GEMM around its own mean (a per-batch shift) and folded in with the
    pairwise merge of Chan, Golub & LeVeque: ``M = M_a + M_b + δδᵀ·n_a·n_b/n`` with ``δ = μ_b − μ_a``. This
    keeps float64 exact to rounding even when the mean is large compared with the spread, where
    ``E[xxᵀ] − μμᵀ`` is not.
    Memory is O(C²), independent of the number of samples.

    A batch is either per-position activations ``(N, C, *spatial)`` (every image and position is one sample,
    as for the per-position correlations of §2) or pooled activations ``(N, C)`` (one sample per image).
    """

    def __init__(self, n_channels: int, device: str | torch.device = "cpu", dtype: torch.dtype | None = None):
        """Empty accumulator for ``n_channels`` channels on ``device`` (float64 where the device has it)."""
        self.device = torch.device(device)
        self.dtype = dtype if dtype is not None else statistics_dtype(self.device)
        self.n_channels = int(n_channels)
        self.count = 0
        self.sum = torch.zeros(self.n_channels, dtype=self.dtype, device=self.device)
        self.comoment = torch.zeros(self.n_channels, self.n_channels, dtype=self.dtype, device=self.device)

    @classmethod
    def from_batches(
        cls, batches: Iterable[torch.Tensor], device: str | torch.device | None = None
    ) -> ChannelMoments:
        """Accumulate an iterable of batches; channels and device (unless given) come from the first batch."""
        moments: ChannelMoments | None = None
        for batch in batches:
            if moments is None:
                moments = cls(batch.shape[1], device=batch.device if device is None else device)
            moments.update(batch)
        if moments is None:
            raise AnalysisError("No activations were collected: give at least one batch of images.")
        return moments

    def update(self, activations: torch.Tensor, chunk_size: int | None = None) -> ChannelMoments:
        """Add a batch ``(N, C, *spatial)`` or ``(N, C)``; returns ``self``.

        Args:
            activations: the batch, on any device (moved to the accumulator's device and dtype).
            chunk_size: if given, feed the batch ``chunk_size`` images at a time, bounding the float64 copy.
        """
        if activations.ndim < 2 or activations.shape[1] != self.n_channels:
            raise ValueError(
                f"expected activations of shape (N, {self.n_channels}, ...), got {tuple(activations.shape)}"
            )
        chunks = [activations] if chunk_size is None else torch.split(activations, chunk_size, dim=0)
        for chunk in chunks:
            rows = chunk.detach().to(self.device, self.dtype).transpose(0, 1).reshape(self.n_channels, -1)
            n = rows.shape[1]
            if n == 0:
                continue
            batch_sum = rows.sum(dim=1)
            centred = rows - (batch_sum / n)[:, None]
            self._absorb(n, batch_sum, centred @ centred.T)
        return self

    def merge(self, other: ChannelMoments) -> ChannelMoments:
        """Fold another accumulator (e.g. from another process) into this one; returns ``self``."""
        if other.n_channels != self.n_channels:
            raise ValueError(f"cannot merge moments of {other.n_channels} channels into {self.n_channels}")
        if other.count:
            self._absorb(
                other.count,
                other.sum.to(self.device, self.dtype),
                other.comoment.to(self.device, self.dtype),
            )
        return self

    def _absorb(self, count: int, total: torch.Tensor, comoment: torch.Tensor) -> None:
        """Pairwise merge of (count, sum, centred comoment) into the running state."""
        if self.count == 0:
            self.count, self.sum, self.comoment = count, total.clone(), comoment.clone()
            return
        merged = self.count + count
        delta = total / count - self.sum / self.count
        self.comoment = self.comoment + comoment + torch.outer(delta, delta) * (self.count * count / merged)
        self.sum = self.sum + total
        self.count = merged

    def mean(self) -> torch.Tensor:
        """Per-channel mean ``(C,)``."""
        self._require(1)
        return self.sum / self.count

    def covariance(self, ddof: int = 1) -> torch.Tensor:
        """Channel covariance ``(C, C)`` = comoment / (n − ddof)."""
        self._require(ddof + 1)
        return self.comoment / (self.count - ddof)

    def variance(self, ddof: int = 1) -> torch.Tensor:
        """Per-channel variance ``(C,)``."""
        return self.covariance(ddof).diagonal().clone()

    def correlation(self) -> torch.Tensor:
        """Pearson correlation ``(C, C)``; a constant (dead) channel gets 1 on the diagonal, 0 elsewhere."""
        cov = self.covariance(ddof=0)
        std = cov.diagonal().sqrt()
        live = std > 0
        inv_std = torch.where(live, 1.0 / torch.where(live, std, 1.0), 0.0)
        corr = cov * inv_std[:, None] * inv_std[None, :]
        corr.diagonal().fill_(1.0)
        return corr.clamp_(-1.0, 1.0)

    def _require(self, n: int) -> None:
        if self.count < n:
            raise AnalysisError(
                f"Channel statistics need at least {n} samples, got {self.count}: use more images."
            )


class FeatureVariance:
    """Streaming per-feature variance of batches given by their sums: the diagonal of :class:`ChannelMoments` in
    O(D) memory.

    Batches are merged pairwise (Chan, Golub & LeVeque), so a mean that drifts between batches costs no precision.
    Used for ``tr Σ_X`` of im2col patches, whose dimension D = C_in·k·k is too large for a D×D comoment.
    """

    def __init__(self, n_features: int, device: str | torch.device = "cpu", dtype: torch.dtype | None = None):
        self.device = torch.device(device)
        self.dtype = dtype if dtype is not None else statistics_dtype(self.device)
        self.count = 0
        self.sum = torch.zeros(n_features, dtype=self.dtype, device=self.device)
        self.squares = torch.zeros(n_features, dtype=self.dtype, device=self.device)

    def add(self, n: int, total: torch.Tensor, squares: torch.Tensor) -> FeatureVariance:
        """Add ``n`` samples given by their per-feature sums Σx and Σx² (centred within the batch as Σx² − (Σx)²/n,
        exact for features whose mean is not many orders above their spread); returns ``self``."""
        if n == 0:
            return self
        total, squares = total.to(self.device, self.dtype), squares.to(self.device, self.dtype)
        return self._absorb(n, total, (squares - total.square() / n).clamp_min(0))

    def _absorb(self, n: int, total: torch.Tensor, centred: torch.Tensor) -> FeatureVariance:
        """Pairwise merge of (n, Σx, Σ(x − x̄)²) into the running state."""
        if self.count == 0:
            self.count, self.sum, self.squares = n, total, centred
            return self
        merged = self.count + n
        delta = total / n - self.sum / self.count
        self.squares = self.squares + centred + delta.square() * (self.count * n / merged)
        self.sum = self.sum + total
        self.count = merged
        return self

    def variance(self, ddof: int = 0) -> torch.Tensor:
        """Per-feature variance ``(D,)`` = centred sum of squares / (n − ddof)."""
        if self.count <= ddof:
            raise AnalysisError(f"Variances need more than {ddof} samples, got {self.count}: use more images.")
        return self.squares / (self.count - ddof)


def _as_moments(activations: torch.Tensor | ChannelMoments) -> ChannelMoments:
    if isinstance(activations, ChannelMoments):
        return activations
    return ChannelMoments.from_batches([activations])


# ----------------------------------------------------------------------------------------------------
# §1 Input capture


@dataclass(frozen=True)
class InputCapture(Result):
    """Input capture I_X per output channel (proposed definition, docs/methods.md §1).

    Attributes:
        raw: ``w_iᵀ Σ_X w_i`` = variance of the pre-bias conv output.
        rayleigh: ``w_iᵀ Σ_X w_i / ‖w_i‖²`` (0 for an all-zero filter, which captures nothing).
        normalized: ``rayleigh / (tr Σ_X / D)`` with the layer's average trace (the mean over groups of a grouped or
            depthwise conv): 1 for an isotropic direction, > 1 for high-variance ones; a layer constant, so it ranks
            the channels as ``rayleigh`` does.
        group_normalized: ``rayleigh / (tr Σ_X^(g) / D)`` with the trace of the channel's own group (equal to
            ``normalized`` for a groups-1 conv): how well a depthwise filter aligns with its own input channel's
            high-variance directions, whatever that channel's variance.
    """

    raw: torch.Tensor
    rayleigh: torch.Tensor
    normalized: torch.Tensor
    group_normalized: torch.Tensor


def rayleigh_quotient(output_variance: torch.Tensor, squared_norms: torch.Tensor) -> torch.Tensor:
    """``w_iᵀ Σ_X w_i / ‖w_i‖²`` from the output variances and the filters' squared norms; 0 for an all-zero filter."""
    return torch.where(squared_norms > 0, output_variance / torch.where(squared_norms > 0, squared_norms, 1.0), 0.0)


def input_capture(
    weight: torch.Tensor, output_variance: torch.Tensor, input_trace: float | torch.Tensor
) -> InputCapture:
    """Proposed input capture I_X (docs/methods.md §1) from the conv weight and its output variance.

    Uses the identity ``w_iᵀ Σ_X w_i = Var_{n,p}[u_i(n,p)]`` (u = conv output before bias, Σ_X = covariance of
    the zero-padded im2col patches), so Σ_X itself is never formed.

    Args:
        weight: conv weight ``(C, C_in/groups, k, k)`` or Linear weight ``(C, D)``; D = its per-filter size.
        output_variance: ``(C,)`` variance of the pre-bias output over images and positions.
        input_trace: ``tr Σ_X``; for grouped/depthwise convs a ``(groups,)`` tensor with one trace per group.

    Returns:
        Raw, Rayleigh-quotient, layer-normalized and group-normalized I_X, float64 on the weight's device.
    """
    dtype = statistics_dtype(weight.device)
    w = weight.detach().to(dtype).flatten(1)
    n_channels, dim = w.shape
    raw = output_variance.detach().to(weight.device, dtype)
    rayleigh = rayleigh_quotient(raw, w.square().sum(dim=1))
    trace = torch.as_tensor(input_trace, dtype=dtype, device=weight.device).reshape(-1)
    if n_channels % trace.numel():
        raise ValueError(f"{trace.numel()} group traces do not divide {n_channels} output channels")
    per_channel_trace = trace.repeat_interleave(n_channels // trace.numel())
    return InputCapture(raw=raw, rayleigh=rayleigh, normalized=rayleigh * dim / trace.mean(),
                        group_normalized=rayleigh * dim / per_channel_trace)


# ----------------------------------------------------------------------------------------------------
# §2 Peer overlap


def top_peers(corr: torch.Tensor, k: int = 8) -> torch.Tensor:
    """Indices ``(C, k)`` of each channel's k peers with the largest |ρ_ij|, j ≠ i, strongest first.

    k is clipped to C − 1.
    """
    n_channels = corr.shape[0]
    if n_channels < 2:
        raise AnalysisError("Peer statistics need a layer with at least 2 channels.")
    strength = corr.abs().clone()
    strength.fill_diagonal_(-torch.inf)
    return strength.topk(min(k, n_channels - 1), dim=1).indices


@dataclass(frozen=True)
class PeerOverlap(Result):
    """Peer overlap R_X per channel (proposed, docs/methods.md §2), diagonal excluded.

    Attributes:
        mean_abs: ``R̄_X(i) = Σ_{j≠i} |ρ_ij| / (C − 1)`` (primary).
        max_abs: ``max_{j≠i} |ρ_ij|``.
        topk_mean: mean of the k largest ``|ρ_ij|``, j ≠ i.
        k: the k used (clipped to C − 1).
    """

    mean_abs: torch.Tensor
    max_abs: torch.Tensor
    topk_mean: torch.Tensor
    k: int


def peer_overlap(corr: torch.Tensor, k: int = 8) -> PeerOverlap:
    """Proposed peer overlap (docs/methods.md §2) from a ``(C, C)`` correlation matrix."""
    n_channels = corr.shape[0]
    peers = top_peers(corr, k)
    strength = corr.abs()
    off_diagonal_sum = strength.sum(dim=1) - strength.diagonal()
    top = strength.gather(1, peers)
    return PeerOverlap(
        mean_abs=off_diagonal_sum / (n_channels - 1),
        max_abs=top[:, 0],
        topk_mean=top.mean(dim=1),
        k=peers.shape[1],
    )


# ----------------------------------------------------------------------------------------------------
# §4 Peer reconstruction


def peer_r2_all(corr: torch.Tensor, shrinkage: float = 1e-3) -> torch.Tensor:
    """Proposed all-peer reconstruction ``R²(i) = 1 − 1/[Ĉ⁻¹]_ii`` with ``Ĉ = (1−α)C + αI`` (§4).

    With α = 0 this is the in-sample OLS R² of channel i on all other channels (an identity); α > 0 acts like
    ridge and is needed when channels are exactly collinear. One inverse gives all C values.
    """
    dtype = statistics_dtype(corr.device)
    c = corr.to(dtype)
    eye = torch.eye(c.shape[0], dtype=dtype, device=c.device)
    shrunk = (1.0 - shrinkage) * c + shrinkage * eye
    return 1.0 - 1.0 / torch.linalg.inv(shrunk).diagonal()


def ridge_peer_coefficients(
    cov: torch.Tensor, means: torch.Tensor, index_sets: torch.Tensor, ridge: float = 1e-3
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ridge regression of every channel on its own peer set, all C systems in one batched solve (§4, §5).

    ``a_i ≈ b₀_i + Σ_j β_ij a_{P_ij}`` with ``β_i = (Σ_PP + λI)⁻¹ Σ_Pi`` and ``b₀_i = μ_i − β_iᵀ μ_P``, where
    ``λ = ridge · tr Σ / C`` (the reference's fixed choice). Used for peer replacement (folded into the next
    conv).

    Args:
        cov: channel covariance ``(C, C)``.
        means: channel means ``(C,)``.
        index_sets: ``(C, k)`` peer indices of each channel (never the channel itself).
        ridge: relative ridge strength.

    Returns:
        ``(beta (C, k), intercept (C,))``.
    """
    n_channels = cov.shape[0]
    index_sets = index_sets.to(cov.device)
    own = torch.arange(n_channels, device=cov.device)[:, None]
    if (index_sets == own).any():
        raise ValueError("a channel's peer set must not contain the channel itself")
    penalty = ridge * cov.trace() / n_channels
    peer_cov = cov[index_sets[:, :, None], index_sets[:, None, :]]
    peer_cov = peer_cov + penalty * torch.eye(index_sets.shape[1], dtype=cov.dtype, device=cov.device)
    beta = torch.linalg.solve(peer_cov, cov[index_sets, own].unsqueeze(-1)).squeeze(-1)
    intercept = means - (beta * means[index_sets]).sum(dim=1)
    return beta, intercept


@dataclass(frozen=True)
class PeerReconstruction(Result):
    """Held-out top-k peer reconstruction (proposed, docs/methods.md §4).

    Attributes:
        r2: held-out R² per channel, ``1 − SSE/(n·Var)`` with the test half's variance (the variance over both halves
            for a channel constant on the test half); a channel constant on every image (dead) is reconstructed
            exactly by its intercept: 1.
        peers: ``(C, k)`` top-|ρ| peers chosen on the fit half.
        coefficients: ``(C, k)`` ridge β on those peers.
        intercepts: ``(C,)`` b₀.
        k: peers per channel.
        ridge: relative ridge strength (λ = ridge · tr Σ / C).
    """

    r2: torch.Tensor
    peers: torch.Tensor
    coefficients: torch.Tensor
    intercepts: torch.Tensor
    k: int
    ridge: float


def peer_r2_topk_heldout(
    fit: torch.Tensor | ChannelMoments,
    test: torch.Tensor | ChannelMoments,
    k: int = 8,
    ridge: float = 1e-3,
) -> PeerReconstruction:
    """Proposed top-k peer R² (§4): ridge on each channel's top-k |ρ| peers fit on one half, R² on the other.

    The test error is computed exactly from the test half's moments,
    ``SSE_i/n = Var(a_i − βᵀa_P) + (mean(a_i) − b₀ − βᵀ mean(a_P))²`` and ``R² = 1 − SSE_i / (n·Var(a_i))``,
    so either half may be a streamed :class:`ChannelMoments` (e.g. per-position activations).

    Args:
        fit: fit-half activations ``(N, C)`` / ``(N, C, H, W)`` or their moments.
        test: test-half activations or moments, same channels.
        k: peers per channel (clipped to C − 1).
        ridge: relative ridge strength, see :func:`ridge_peer_coefficients`.
    """
    fit_moments, test_moments = _as_moments(fit), _as_moments(test)
    peers = top_peers(fit_moments.correlation(), k)
    beta, intercept = ridge_peer_coefficients(
        fit_moments.covariance(ddof=0), fit_moments.mean(), peers, ridge
    )

    cov = test_moments.covariance(ddof=0).to(beta.device)
    mean = test_moments.mean().to(beta.device)
    peers_test = peers.to(beta.device)
    own = torch.arange(cov.shape[0], device=cov.device)[:, None]
    variance = cov.diagonal()
    residual_variance = (
        variance
        - 2.0 * (beta * cov[peers_test, own]).sum(dim=1)
        + torch.einsum("ck,ckl,cl->c", beta, cov[peers_test[:, :, None], peers_test[:, None, :]], beta)
    )
    residual_mean = mean - intercept - (beta * mean[peers_test]).sum(dim=1)
    error = (residual_variance + residual_mean.square()).clamp_min(0)
    both = ChannelMoments(fit_moments.n_channels, fit_moments.device, fit_moments.dtype).merge(fit_moments)
    reference = torch.where(variance > 0, variance, both.merge(test_moments).variance(ddof=0).to(variance.device))
    exact = error <= 1e-12 * (1.0 + mean.square())
    r2 = torch.where(reference > 0, 1.0 - error / torch.where(reference > 0, reference, 1.0),
                     torch.where(exact, 1.0, 0.0))
    return PeerReconstruction(
        r2=r2, peers=peers, coefficients=beta, intercepts=intercept, k=peers.shape[1], ridge=float(ridge)
    )

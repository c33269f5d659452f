"""A layer's per-channel statistics recomputed on resampled images: what the bootstrap intervals resample
(docs/methods.md, "Significance").

A resample is given by weights: how often each image is drawn (:func:`~fl_core.channelaxes.significance.bootstrap`).
Everything that comes from whole images is recomputed as weighted moments, all resamples at once:

* input capture from the per-image sums of the conv output (``w_iᵀΣ_X w_i = Var(u_i)``; the normalisation by the
  layer's average trace is a layer constant, so the Rayleigh quotient ranks and clusters the channels alike);
* task information and target-excess from the Gaussian-copula scores of the pooled activations and the margin,
  taken once on all images (a resample draws their rows rather than ranking again), as weighted correlations: the
  target-excess from each channel's (k + 2)-variable correlation of itself, the margin and its peers;
* the lesion Δloss from the per-image losses of the evaluation images drawn (resampled independently of the
  calibration images).

Peer overlap and peer R² come from per-position moments over all calibration images and are held at their
full-sample values (a C × C moment per image would not fit in memory).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from fl_core.channelaxes.information import copula_normalize
from fl_core.channelaxes.interventions import ChannelInterventions
from fl_core.channelaxes.layerstats import LayerStatistics, LocalAxis

PAIR_CHUNK = 4096
"""Variable pairs whose per-image products are formed at once."""
RESAMPLE_VALUES = 1 << 22
"""Values of the largest array of one batch of resamples (resamples × channels × (k + 2)²): 32 MB of float64."""


@dataclass(frozen=True)
class LayerSamples:
    """A layer's per-image values (calibration and evaluation images) and its per-position statistics.

    Attributes:
        scores: ``(N, C + 1)`` Gaussian-copula scores of the pooled activations ā and, last, of the margin m.
        capture_sums, capture_squares: ``(N, C)`` per-image sums of the shifted conv output and of its square.
        pre_positions: positions of the conv output per image.
        squared_norms: ``(C,)`` ‖w_i‖².
        peers: ``(C, k)`` each channel's top-|ρ| peers (target-excess).
        shrinkage: α of the joint correlation (target-excess).
        peer_overlap, peer_r2: ``(C,)`` held fixed (module docstring).
        lesion: ``(C, N_eval)`` per-image Δloss of mean-ablating each channel (``None``: no lesions, or not kept).
    """

    scores: np.ndarray
    capture_sums: np.ndarray
    capture_squares: np.ndarray
    pre_positions: int
    squared_norms: np.ndarray
    peers: np.ndarray
    shrinkage: float
    peer_overlap: np.ndarray
    peer_r2: np.ndarray
    lesion: np.ndarray | None = None

    @classmethod
    def of(cls, stats: LayerStatistics, local: LocalAxis, shrinkage: float,
           interventions: ChannelInterventions | None = None) -> LayerSamples:
        """The samples of one layer's statistics pass (and its lesions, when run)."""

        def numpy(t: torch.Tensor) -> np.ndarray:
            return t.detach().double().cpu().numpy()

        scores = torch.cat([copula_normalize(stats.pooled.double().cpu()),
                            copula_normalize(stats.margin.double().cpu())[:, None]], dim=1)
        lesion = None if interventions is None else interventions.image_dloss.get("mean")
        return cls(scores=numpy(scores), capture_sums=numpy(stats.capture_sums),
                   capture_squares=numpy(stats.capture_squares), pre_positions=stats.pre_positions,
                   squared_norms=numpy(stats.weight.flatten(1).square().sum(1)), peers=local.peers.cpu().numpy(),
                   shrinkage=shrinkage, peer_overlap=numpy(local.overlap.mean_abs),
                   peer_r2=numpy(local.reconstruction.r2), lesion=None if lesion is None else lesion.astype(np.float64))

    @property
    def n_channels(self) -> int:
        return self.scores.shape[1] - 1

    @property
    def sizes(self) -> tuple[int, ...]:
        """Images of each resampled set: the calibration images, and the evaluation images when lesions were kept."""
        n = self.scores.shape[0]
        return (n,) if self.lesion is None else (n, self.lesion.shape[1])

    @property
    def chunk(self) -> int:
        """Resamples per batch (:data:`RESAMPLE_VALUES`)."""
        return int(np.clip(RESAMPLE_VALUES // (self.n_channels * (self.peers.shape[1] + 2) ** 2), 1, 100))

    def input_capture(self, weights: np.ndarray) -> np.ndarray:
        """``(R, C)`` Rayleigh quotients ``Var(u_i) / ‖w_i‖²`` over the positions of the images as weighted (0 for an
        all-zero filter)."""
        total = weights.sum(1, keepdims=True) * self.pre_positions
        mean = weights @ self.capture_sums / total
        variance = np.clip(weights @ self.capture_squares / total - mean ** 2, 0, None)
        norms = self.squared_norms
        return np.where(norms > 0, variance / np.where(norms > 0, norms, 1.0), 0.0)

    @functools.cached_property
    def _pairs(self) -> tuple[np.ndarray, ...]:
        """The variable pairs each channel's (k + 2)-variable correlation needs (itself, the margin, its peers):
        ``(upper-triangle rows, columns, each channel's pair index (C, P), per-image products (N, Q), the pairs
        (Q, 2))``, formed once for every batch of resamples."""
        n_channels, k = self.n_channels, self.peers.shape[1]
        channels = np.arange(n_channels)[:, None]
        sets = np.concatenate([channels, np.full_like(channels, n_channels), self.peers], axis=1)  # (C, k + 2)
        first, second = np.triu_indices(k + 2)
        pairs = np.sort(np.stack([sets[:, first], sets[:, second]], -1).reshape(-1, 2), axis=1)
        unique, where = np.unique(pairs, axis=0, return_inverse=True)
        products = np.empty((self.scores.shape[0], len(unique)))
        for start in range(0, len(unique), PAIR_CHUNK):
            a, b = unique[start: start + PAIR_CHUNK].T
            products[:, start: start + PAIR_CHUNK] = self.scores[:, a] * self.scores[:, b]
        return first, second, where.reshape(n_channels, -1), products, unique

    def task_information(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(task information (R, C), target-excess (R, C))`` on the images as weighted, in nats: from each
        channel's shrunk correlation of itself (0), the margin (1) and its peers, the partial correlation of 0 and 1
        given the peers from the Schur complement ``S = R_{01,01} − R_{01,P} R_PP⁻¹ R_{P,01}``."""
        first, second, where, products, unique = self._pairs
        k = self.peers.shape[1]
        w = weights / weights.sum(1, keepdims=True)
        means = w @ self.scores
        covariance = w @ products - means[:, unique[:, 0]] * means[:, unique[:, 1]]
        blocks = np.zeros((len(w), self.n_channels, k + 2, k + 2))
        blocks[:, :, first, second] = covariance[:, where]
        blocks[:, :, second, first] = blocks[:, :, first, second]
        std = np.sqrt(np.clip(np.diagonal(blocks, axis1=2, axis2=3), 0, None))
        inv_std = np.where(std > 0, 1.0 / np.where(std > 0, std, 1.0), 0.0)
        corr = np.clip(blocks * inv_std[..., :, None] * inv_std[..., None, :], -1, 1)
        diagonal = np.arange(k + 2)
        corr[..., diagonal, diagonal] = 1.0
        information = -0.5 * np.log1p(-corr[..., 0, 1] ** 2)
        shrunk = (1 - self.shrinkage) * corr + self.shrinkage * np.eye(k + 2)
        schur = shrunk[..., :2, :2] - shrunk[..., :2, 2:] @ np.linalg.solve(shrunk[..., 2:, 2:], shrunk[..., 2:, :2])
        partial = schur[..., 0, 1] / np.sqrt(schur[..., 0, 0] * schur[..., 1, 1])
        return information, -0.5 * np.log1p(-np.clip(partial, -1, 1) ** 2)

    def table(self, weights: np.ndarray, evaluation: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The per-channel columns the axes are compared on, ``(R, C)`` each, for R resamples of the calibration
        images (``weights (R, N)``) and of the evaluation images (``evaluation (R, N_eval)``, for the lesion Δloss):
        ``input_capture`` (the Rayleigh quotient), ``peer_overlap``, ``peer_r2``, ``task_info``, ``target_excess``,
        ``lesion_dloss``."""
        information, excess = self.task_information(weights)
        shape = information.shape
        lesion = np.full(shape, np.nan)
        if self.lesion is not None and evaluation is not None:
            lesion = evaluation @ self.lesion.T / evaluation.sum(1, keepdims=True)
        return {"input_capture": self.input_capture(weights), "peer_overlap": np.broadcast_to(self.peer_overlap, shape),
                "peer_r2": np.broadcast_to(self.peer_r2, shape), "task_info": information, "target_excess": excess,
                "lesion_dloss": lesion}

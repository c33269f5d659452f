"""Streaming statistics of image patches and their PCA (Chowers & Weiss, Def. 2.1 and 4.1).

Every overlapping k×k patch (stride 1, no padding) of every image is a sample p ∈ R^D, D = C·kh·kw, flattened
in (channel, row, column) order — the order of ``conv.weight.flatten(1)``. The covariance is accumulated in
bands with one GEMM per band in float64 on the chosen device, around a fixed per-channel shift for accuracy, so
memory does not grow with the number of patches. A band holds as many whole images of a batch as fit the chunk (on a
GPU several, so launches do not dominate), or the patch rows of one image that fit. Its patches are copied kernel row
by kernel row from strided views of the images into a reused (D + 1) × L matrix whose last row is ones, so the one
product ``[P; 1][P; 1]ᵀ`` holds the outer products, the patch sums and the count (no im2col, no transposed copy).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from fl_core.compute.device import DeviceLike, product_dtype, resolve_device, statistics_dtype
from fl_core.compute.progress import ProgressLike, progress_callback, report
from fl_core.errors import AnalysisError
from fl_core.results import Result

CHUNK_ELEMENTS = {"cpu": 2**21}
"""Largest band of patches (patches × D) held at once, by device type: on the CPU 2**21 (16 MiB in float64), which
stays in cache while it is copied and multiplied (docs/results.md, "Measurements behind design choices"); elsewhere
:data:`DEFAULT_CHUNK_ELEMENTS`."""
DEFAULT_CHUNK_ELEMENTS = 2**25
"""Largest band on accelerators (256 MiB in float64, about five 224² images of 7×7×3 patches): fewer, larger GEMMs
where kernel launches dominate (docs/results.md, "Measurements behind design choices")."""


@dataclass(frozen=True)
class PatchPCA(Result):
    """PCA of image patches, components ordered by decreasing variance.

    Attributes:
        components: (D, D) array, row i = u_i (unit norm), in (channel, row, column) order.
        lambdas: (D,) patch standard deviation along u_i: λ_i = sqrt(Var(pᵀu_i)) (Def. 4.1), decreasing.
        mean: (D,) mean patch.
        kernel: (C, kh, kw) patch shape.
        n_patches: number of patches accumulated.
    """

    components: np.ndarray
    lambdas: np.ndarray
    mean: np.ndarray
    kernel: tuple[int, int, int]
    n_patches: int

    _private_fields = ("components", "mean")

    @property
    def dim(self) -> int:
        return int(self.lambdas.shape[0])

    def component_images(self) -> np.ndarray:
        """The components reshaped to filters: (D, C, kh, kw)."""
        return self.components.reshape(self.dim, *self.kernel)

    def with_scaled_component(self, index: int, alpha: float) -> PatchPCA:
        """The PCA of patches mapped to α⟨p,u_t⟩u_t + Σ_{j≠t}⟨p,u_j⟩u_j (App. D.2): λ_t -> αλ_t, re-sorted."""
        lambdas = self.lambdas.copy()
        lambdas[index] *= alpha
        order = np.argsort(-lambdas, kind="stable")
        return PatchPCA(self.components[order], lambdas[order], self.mean, self.kernel, self.n_patches)


class PatchStatistics:
    """Streaming mean and covariance of all k×k patches of a stream of images.

    Args:
        kernel_size: (kh, kw) patch size.
        device: where the GEMMs run (``None``: automatic, see :mod:`fl_core.compute.device`).
        dtype: accumulation dtype (float64 unless the device has none).
        products: dtype of each band's Gram product (:func:`fl_core.compute.device.product_dtype` by default: float64 on
            the CPU and on GPUs with fast float64, float32 elsewhere), accumulated in ``dtype``.
        chunk_elements: bound on patches × D held at once (default: :data:`CHUNK_ELEMENTS` of the device).
        groups: pool the statistics of this many channel groups.
        stride: patch stride (1 = every overlapping patch; k = the non-overlapping tiles a stride-k layer sees).

    ``update(x)`` takes (N, C, H, W) batches; for grouped convolutions pass ``groups`` to pool the statistics
    of each group's input slice (a depthwise layer's patches are k×k patches of single channels).
    """

    def __init__(self, kernel_size: tuple[int, int], device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, chunk_elements: int | None = None,
                 groups: int = 1, stride: int = 1, products: torch.dtype | None = None) -> None:
        self.kernel_size = (int(kernel_size[0]), int(kernel_size[1]))
        self.stride = int(stride)
        self.device = resolve_device(device)
        self.dtype = dtype or statistics_dtype(self.device)
        self.products = products or product_dtype(self.device)
        self.chunk_elements = chunk_elements or CHUNK_ELEMENTS.get(self.device.type, DEFAULT_CHUNK_ELEMENTS)
        self.groups = groups
        self.count = 0
        self._shift: torch.Tensor | None = None  # (C,) per-channel shift, the first batch's channel means
        self._outer: torch.Tensor | None = None  # (D + 1, D + 1): Σ [p−s; 1][p−s; 1]ᵀ
        self._scratch: torch.Tensor | None = None
        self._channels: int | None = None

    def update(self, x: torch.Tensor) -> None:
        """Add every patch of a (N, C, H, W) batch."""
        if x.dim() != 4:
            raise AnalysisError(f"patch statistics need (N, C, H, W) images, got shape {tuple(x.shape)}")
        n, c, h, w = x.shape
        if self.groups > 1:
            x = x.reshape(n * self.groups, c // self.groups, h, w)
            c //= self.groups
        kh, kw = self.kernel_size
        if h < kh or w < kw:
            return
        if self._channels is None:
            self._channels = c
        elif c != self._channels:
            raise AnalysisError(f"images with {c} channels after {self._channels}: one statistic per input space")
        x = x.to(self.device, self.dtype)
        if self._shift is None:
            self._shift = x.mean(dim=(0, 2, 3))
            dim = c * kh * kw
            self._outer = torch.zeros(dim + 1, dim + 1, device=self.device, dtype=self.dtype)
        x = x - self._shift.view(1, c, 1, 1)
        s = self.stride
        out_h, out_w = (h - kh) // s + 1, (w - kw) // s + 1
        for first, count, top, rows in self._bands(len(x), out_h, out_w):
            self._accumulate(self._band_patches(x[first: first + count], top, rows, out_w))

    def _bands(self, n: int, out_h: int, out_w: int) -> Iterator[tuple[int, int, int, int]]:
        """``(first image, images, first patch row, patch rows)`` of each band: whole images together when one image's
        patches fit the chunk (fewer, larger GEMMs), else bands of patch rows of one image."""
        per_image = self._dim * out_h * out_w
        if per_image <= self.chunk_elements:
            images = self.chunk_elements // per_image
            yield from ((first, min(images, n - first), 0, out_h) for first in range(0, n, images))
            return
        rows = max(1, self.chunk_elements // (self._dim * out_w))
        yield from ((image, 1, top, min(rows, out_h - top)) for image in range(n) for top in range(0, out_h, rows))

    def _band_patches(self, x: torch.Tensor, top: int, rows: int, out_w: int) -> torch.Tensor:
        """The patches of patch rows ``top`` … ``top + rows − 1`` of every image of ``x`` (N, C, H, W) as the columns
        of a (D + 1) × (N·rows·out_w) view of the reused buffer, whose last row is ones; copied by kernel row from
        strided views of the images (no im2col; one copy per kernel row for all the images)."""
        n, c = x.shape[:2]
        (kh, kw), s = self.kernel_size, self.stride
        band = self._buffer(n * rows * out_w)
        blocks = band[:-1].view(c, kh, kw, n, rows, out_w)
        for dy in range(kh):
            first = top * s + dy
            lines = x[:, :, first: first + (rows - 1) * s + 1: s]  # (N, C, rows, W): row dy of each patch
            blocks[:, dy].copy_(lines.unfold(3, kw, s).permute(1, 4, 0, 2, 3))  # (C, kw, N, rows, out_w)
        return band

    @property
    def _dim(self) -> int:
        return self._channels * self.kernel_size[0] * self.kernel_size[1]

    def _buffer(self, columns: int) -> torch.Tensor:
        """The first ``columns`` columns of a reused (D + 1) × capacity array whose last row is ones (its Gram matrix
        holds Σ p pᵀ, Σ p and n), grown when a band needs more."""
        if self._scratch is None or self._scratch.shape[1] < columns:
            self._scratch = torch.empty(self._dim + 1, columns, device=self.device, dtype=self.products)
            self._scratch[-1] = 1
        return self._scratch[:, :columns]

    def _accumulate(self, patches: torch.Tensor) -> None:
        """Σ [p−s; 1][p−s; 1]ᵀ over the columns of ``patches``: one GEMM gives the outer products, the sums and the
        count (s the per-channel shift)."""
        if patches.dtype == self.dtype:
            self._outer.addmm_(patches, patches.T)
        else:
            self._outer += torch.mm(patches, patches.T).to(self.dtype)
        self.count += patches.shape[1]

    @property
    def _sum(self) -> torch.Tensor:
        """Σ (p − s) over the patches so far."""
        return self._outer[-1, :-1]

    def _patch_shift(self) -> torch.Tensor:
        """The shift s in patch space: each channel's shift at each of its kernel positions."""
        kh, kw = self.kernel_size
        return self._shift.repeat_interleave(kh * kw)

    def mean(self) -> torch.Tensor:
        """Mean patch (D,)."""
        self._require_data()
        return self._patch_shift() + self._sum / self.count

    def covariance(self) -> torch.Tensor:
        """Unbiased patch covariance (D, D): (Σ (p−s)(p−s)ᵀ − n·(m−s)(m−s)ᵀ) / (n − 1), s the shift."""
        self._require_data()
        delta = self._sum / self.count
        cov = (self._outer[:-1, :-1] - self.count * torch.outer(delta, delta)) / max(self.count - 1, 1)
        return (cov + cov.T) / 2

    def pca(self) -> PatchPCA:
        """Eigen-decomposition of the covariance, ordered by decreasing variance; λ_i = sqrt(eigenvalue)."""
        eigvals, eigvecs = torch.linalg.eigh(self.covariance().double().cpu())
        order = torch.argsort(eigvals, descending=True)
        eigvals, eigvecs = eigvals[order].clamp_min(0), eigvecs[:, order]
        if not eigvals[0] > 0:
            raise AnalysisError("The patches do not vary (the images are flat colour): pick images with texture.")
        components = _fix_signs(eigvecs.T)
        kernel = (self._channels, *self.kernel_size)
        return PatchPCA(components=components.numpy(), lambdas=eigvals.sqrt().numpy(),
                        mean=self.mean().double().cpu().numpy(), kernel=kernel, n_patches=self.count)

    def _require_data(self) -> None:
        if self._shift is None or self.count < 2:
            raise AnalysisError("No patches were accumulated: the images are smaller than the filter.")


def _fix_signs(components: torch.Tensor) -> torch.Tensor:
    """Deterministic component signs: the entry of largest magnitude is positive."""
    idx = components.abs().argmax(dim=1)
    signs = torch.sign(components[torch.arange(components.shape[0]), idx])
    return components * signs.unsqueeze(1)


def patch_pca(batches: Iterable[torch.Tensor], kernel_size: tuple[int, int], *, device: DeviceLike = None,
              groups: int = 1, stride: int = 1, total: int | None = None, progress: ProgressLike = None
              ) -> PatchPCA:
    """Stream image batches through :class:`PatchStatistics` and return the PCA.

    Args:
        batches: iterable of (N, C, H, W) tensors in the model's input space.
        kernel_size: patch size (the filter size of the layer analysed).
        device: where to accumulate.
        groups: pool statistics over this many channel groups (grouped/depthwise layers).
        stride: patch stride (1: all overlapping patches, the paper's setting).
        total: number of batches, for progress.
        progress: ``progress(fraction, message)``.
    """
    progress = progress_callback(progress)
    stats = PatchStatistics(kernel_size, device=device, groups=groups, stride=stride)
    for i, batch in enumerate(batches, start=1):
        stats.update(batch)
        report(progress, i / total if total else 0.0, f"patch statistics: {stats.count:,} patches")
    return stats.pca()

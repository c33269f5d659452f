"""Benchmark: streaming patch statistics vs the pure matrix product of the same FLOPs and vs the authors' approach.

    python bench/bench_patches.py [--kernel 7] [--images 4 16 64] [--size 224] [--device cpu]

For each image count it prints, measured in one run:

* ``stream``: :class:`fl_core.patches.PatchStatistics` (unfold in bands + one float64 GEMM per chunk) + eigh;
* ``gemm``: the bare product Pᵀ P of an (n_patches × D) float64 matrix already in memory — the same FLOPs with no
  patch extraction (target: stream ≤ 2× gemm);
* ``authors``: materialise every patch as one float64 matrix and call ``torch.pca_lowrank(q=D)`` (the approach of
  Chowers & Weiss' code; target: stream ≥ 5× faster);

and the peak resident memory each adds (streaming memory must not grow with the number of patches).
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fl_core.images import bundled_images, scaled_input
from fl_core.models import InputConfig
from fl_core.patches import PatchStatistics


def reset_peak_rss() -> int:
    """Reset the kernel's peak-RSS counter (Linux) and return the current RSS in bytes."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kb("VmRSS") * 1024


def peak_rss_since(start: int) -> int:
    return max(0, _status_kb("VmHWM") * 1024 - start)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise RuntimeError(field)


def image_stack(n: int, size: int) -> torch.Tensor:
    """``n`` size×size crops of the bundled photos in ImageNet input space (cycled, each at its own offset)."""
    photos = bundled_images()
    cfg = InputConfig(input_size=size)
    tiles = []
    for i in range(n):
        full = scaled_input(photos.image(i % len(photos)), cfg)
        top = (i // len(photos)) * 7 % max(1, full.shape[1] - size)
        tiles.append(full[:, top: top + size, :size])
    return torch.stack(tiles)


def timed(fn, *args) -> tuple[float, int, object]:
    """Wall time, peak added RSS and result of ``fn(*args)``."""
    start_rss = reset_peak_rss()
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, peak_rss_since(start_rss), out


def stream(images: torch.Tensor, kernel: int, device: str):
    stats = PatchStatistics((kernel, kernel), device=device)
    for batch in images.split(4):
        stats.update(batch)
    return stats.pca()


def bare_gemm(n_patches: int, dim: int, device: str):
    matrix = torch.randn(n_patches, dim, dtype=torch.float64, device=device)
    start = time.perf_counter()
    product = matrix.T @ matrix
    return time.perf_counter() - start, product


def authors(images: torch.Tensor, kernel: int):
    patches = F.unfold(images.double(), kernel).transpose(1, 2).reshape(-1, images.shape[1] * kernel * kernel)
    return torch.pca_lowrank(patches, q=patches.shape[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", type=int, default=7)
    parser.add_argument("--images", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip-authors-above", type=int, default=64, help="skip the materialising run beyond this")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
          f"kernel {args.kernel}×{args.kernel}×3 (D = {3 * args.kernel**2}), images {args.size}²")
    print(f"{'images':>7} {'patches':>11} {'stream s':>9} {'gemm s':>8} {'authors s':>10} {'stream/gemm':>12} "
          f"{'authors/stream':>15} {'stream MiB':>11} {'authors MiB':>12}")
    for n in args.images:
        images = image_stack(n, args.size)
        stream_s, stream_mem, pca = timed(stream, images, args.kernel, args.device)
        gemm_s, _ = bare_gemm(pca.n_patches, pca.dim, args.device)
        if n <= args.skip_authors_above:
            authors_s, authors_mem, _ = timed(authors, images, args.kernel)
            ratio, mem = f"{authors_s / stream_s:15.1f}", f"{authors_mem / 2**20:12.0f}"
            authors_txt = f"{authors_s:10.2f}"
        else:
            authors_txt, ratio, mem = f"{'-':>10}", f"{'-':>15}", f"{'-':>12}"
        print(f"{n:7d} {pca.n_patches:11,d} {stream_s:9.2f} {gemm_s:8.2f} {authors_txt} {stream_s / gemm_s:12.2f} "
              f"{ratio} {stream_mem / 2**20:11.0f} {mem}")


if __name__ == "__main__":
    main()

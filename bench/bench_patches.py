"""Benchmark: how streaming patch statistics grow with the number of patches, against the pure matrix product of the
same FLOPs and against the authors' approach.

    python bench/bench_patches.py [--kernel 7] [--images 1 4 16 64] [--size 224] [--repeats 3] [--device cpu]

One table row per image count, measured in one run:

* ``stream``: :class:`fl_core.firstlayer.patches.PatchStatistics` (strided band copies + one float64 GEMM per band) +
  its PCA (``pca``: the covariance's eigh, a fixed cost; ``stats/gemm`` leaves it out);
* ``gemm``: the bare product Pᵀ P of an (n_patches × D) float64 matrix already in memory (in row blocks of at most
  512 MiB, so memory stays bounded) — the same FLOPs with no patch extraction (target: stream ≤ 1.5× gemm);
* ``authors``: materialise every patch as one float64 matrix and call ``torch.pca_lowrank(q=D)`` (the approach of
  Chowers & Weiss' code; target: stream ≥ 5× faster; timed once, it is slow; skipped above
  ``--skip-authors-above`` images, its memory grows with the patches);

the seconds per 10⁶ patches, the peak memory each adds (resident memory; CUDA allocations for ``stream`` on a GPU;
streaming memory must not grow with the patches), and, as the last row, the growth exponent of each cost against the
work (1 = linear in the patches; 0 = flat memory).
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import torch
import torch.nn.functional as F
from _scaling import Column, best_time, scaling_note, scaling_table

from fl_core.firstlayer.patches import PatchStatistics
from fl_core.io.images import bundled_images, scaled_input
from fl_core.io.preprocessing import InputConfig


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


def measured(fn, repeats: int, device: str) -> tuple[float, int, object]:
    """(least wall time of ``repeats`` calls, peak memory any of them added — CUDA allocations on a GPU, else resident
    memory — and the result) of ``fn()``."""
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        seconds, out = best_time(fn, repeats, device)
        return seconds, torch.cuda.max_memory_allocated() - before, out
    start_rss = reset_peak_rss()
    seconds, out = best_time(fn, repeats, device)
    return seconds, peak_rss_since(start_rss), out


def accumulate(images: torch.Tensor, kernel: int, device: str) -> PatchStatistics:
    stats = PatchStatistics((kernel, kernel), device=device)
    for batch in images.split(4):
        stats.update(batch)
    return stats


GEMM_BLOCK_ELEMENTS = 2**26
"""Largest block of the bare product's matrix: 512 MiB in float64."""


def bare_gemm(n_patches: int, dim: int, repeats: int, device: str) -> float:
    """Least seconds of Pᵀ P for an (n_patches × dim) float64 P, summed over row blocks of one random block (at most
    :data:`GEMM_BLOCK_ELEMENTS`) reused: the FLOPs of the streaming statistics without the patch extraction."""
    rows = min(n_patches, GEMM_BLOCK_ELEMENTS // dim)
    block = torch.randn(rows, dim, dtype=torch.float64, device=device)
    sizes = [rows] * (n_patches // rows) + ([n_patches % rows] if n_patches % rows else [])
    product = torch.zeros(dim, dim, dtype=torch.float64, device=device)

    def blocks() -> None:
        product.zero_()
        for size in sizes:
            product.addmm_(block[:size].T, block[:size])

    return best_time(blocks, repeats, device)[0]


def authors(images: torch.Tensor, kernel: int):
    patches = F.unfold(images.double(), kernel).transpose(1, 2).reshape(-1, images.shape[1] * kernel * kernel)
    return torch.pca_lowrank(patches, q=patches.shape[1])


COLUMNS = (Column("images", "d"), Column("patches", ",d"), Column("stream s", ".3f", cost=True),
           Column("pca s", ".3f", cost=True), Column("gemm s", ".3f", cost=True), Column("stream/gemm", ".2f"),
           Column("stats/gemm", ".2f"),
           Column("s/10⁶ patches", ".3f"), Column("stream MiB", ".0f", cost=True),
           Column("authors s", ".2f", cost=True), Column("authors/stream", ".1f"),
           Column("authors MiB", ".0f", cost=True))


def row(n: int, args: argparse.Namespace) -> list:
    """One table row: the costs of ``n`` images' patches."""
    images = image_stack(n, args.size)
    stats_s, stream_mem, stats = measured(lambda: accumulate(images, args.kernel, args.device), args.repeats,
                                          args.device)
    pca_s, pca = best_time(stats.pca, args.repeats)
    stream_s = stats_s + pca_s
    gemm_s = bare_gemm(pca.n_patches, pca.dim, args.repeats, args.device)
    authors_s = authors_mem = ratio = None
    if n <= args.skip_authors_above:
        authors_s, authors_mem, _ = measured(lambda: authors(images, args.kernel), 1, "cpu")
        ratio, authors_mem = authors_s / stream_s, authors_mem / 2**20
    return [n, pca.n_patches, stream_s, pca_s, gemm_s, stream_s / gemm_s, stats_s / gemm_s,
            stream_s / pca.n_patches * 1e6, stream_mem / 2**20, authors_s, ratio, authors_mem]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", type=int, default=7)
    parser.add_argument("--images", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="time each point this many times, keep the least")
    parser.add_argument("--skip-authors-above", type=int, default=16, help="skip the materialising run beyond this")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
          f"kernel {args.kernel}×{args.kernel}×3 (D = {3 * args.kernel**2}), images {args.size}²")
    print(scaling_table(COLUMNS, [row(n, args) for n in args.images]))
    print(scaling_note(args.repeats, "images"))
    print("targets: stream/gemm ≤ 1.5 at 10⁵-10⁶ patches (docs/results.md: ≤ 2), authors/stream ≥ 5, stream MiB flat "
          "(exponent ≈ 0)")


if __name__ == "__main__":
    main()

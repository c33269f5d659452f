"""Clustering time against the number of depthwise filters: sign-invariant k-means++ with restarts, on the device.

Filters are drawn around the 8 published master keys with random sign, scale, offset and noise (so the clusters are
real). Prints seconds, filters/s and Lloyd iterations per size, and the growth exponent of time with N (1 = linear).

    python bench/bench_clustering.py --sizes 1000 4000 16000 64000 --device cuda
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from fl_core.backend import resolve_device
from fl_core.masterkeys import cluster_filters
from fl_core.scalespace import load_published_filters


def planted(n: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    keys = load_published_filters()
    shapes = keys[rng.integers(0, 8, n)] + 0.05 * rng.standard_normal((n, 7, 7))
    scale = rng.choice([-1, 1], (n, 1, 1)) * 10 ** rng.uniform(-1, 1, (n, 1, 1))
    return torch.tensor(shapes * scale + rng.normal(0, 0.3, (n, 1, 1)), dtype=torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 16000, 64000])
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--restarts", type=int, default=8)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(f"k = {args.k}, {args.restarts} restarts, device {device}, {torch.get_num_threads()} threads")
    cluster_filters(planted(500), args.k, restarts=1, device=device)  # warm-up
    seconds = []
    for n in args.sizes:
        filters = planted(n)
        start = time.perf_counter()
        result = cluster_filters(filters, args.k, restarts=args.restarts, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        print(f"N = {n:>8,}: {seconds[-1]:7.2f} s  {n / seconds[-1]:>10,.0f} filters/s  "
              f"{result.iterations:3d} iterations  mean |cos| {result.objective:.3f}")
    if len(args.sizes) > 1:
        slope = np.polyfit(np.log(args.sizes), np.log(seconds), 1)[0]
        print(f"ratio time({args.sizes[-1]:,}) / time({args.sizes[0]:,}) = {seconds[-1] / seconds[0]:.1f} for "
              f"{args.sizes[-1] / args.sizes[0]:.0f}× the filters; growth exponent {slope:.2f} (1 = linear)")


if __name__ == "__main__":
    main()

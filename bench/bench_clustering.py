"""Clustering time against the number of depthwise filters: sign-invariant k-means++ with restarts, on the device.

Filters are drawn around the 8 published master keys with random sign, scale, offset and noise (so the clusters are
real). Prints one table row per size — seconds (the least of ``--repeats`` runs), filters/s, Lloyd iterations, the
objective — and as the last row the growth exponent of time with N (1 = linear).

    python bench/bench_clustering.py --sizes 1000 4000 16000 64000 --device cuda
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _scaling import Column, best_time, scaling_note, scaling_table

from fl_core.compute.device import resolve_device
from fl_core.masterkeys.kmeans import cluster_filters
from fl_core.masterkeys.scalespace import load_published_filters


def planted(n: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    keys = load_published_filters()
    shapes = keys[rng.integers(0, 8, n)] + 0.05 * rng.standard_normal((n, 7, 7))
    scale = rng.choice([-1, 1], (n, 1, 1)) * 10 ** rng.uniform(-1, 1, (n, 1, 1))
    return torch.tensor(shapes * scale + rng.normal(0, 0.3, (n, 1, 1)), dtype=torch.float32)


COLUMNS = (Column("filters N", ",d"), Column("seconds", ".2f", cost=True), Column("filters/s", ",.0f"),
           Column("iterations", "d"), Column("mean |cos|", ".3f"))


def row(n: int, args: argparse.Namespace, device: torch.device) -> list:
    filters = planted(n)
    seconds, result = best_time(lambda: cluster_filters(filters, args.k, restarts=args.restarts, device=device),
                                args.repeats, device)
    return [n, seconds, n / seconds, result.iterations, result.objective]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 16000, 64000])
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--restarts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="time each size this many times, keep the least")
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(f"k = {args.k}, {args.restarts} restarts, device {device}, {torch.get_num_threads()} threads")
    cluster_filters(planted(500), args.k, restarts=1, device=device)  # warm-up
    print(scaling_table(COLUMNS, [row(n, args, device) for n in args.sizes]))
    print(scaling_note(args.repeats, "filters N"))


if __name__ == "__main__":
    main()

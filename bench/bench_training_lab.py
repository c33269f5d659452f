"""Benchmark of the Training Lab's hot paths, printed as ratios measured in one run.

    python bench/bench_training_lab.py [--steps 400] [--device cpu]

* ``trainer``: :func:`fl_core.lab.train.train_classifier` with the lab's snapshots, progress reports and evaluations vs
  a bare SGD loop over the same model, data and batches (target: ≤ 1.15×);
* ``theory fit``: :func:`fl_core.firstlayer.energy.fit_linear_theory` (grid scored in one matrix product) vs scoring the
  same grid τ by τ;
* ``claims``: loading and analysing every shipped run (what the page does on first open), in seconds.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from fl_core.compute.device import resolve_device
from fl_core.firstlayer.energy import fit_linear_theory, pearson, theory_profile
from fl_core.lab.claims import run_trajectory, summarize_runs
from fl_core.lab.experiments import load_runs
from fl_core.lab.runs import SHIPPED_RUNS_DIR, RunSettings, build_run_model
from fl_core.lab.train import TrainSettings, train_classifier
from fl_core.lab.trainsets import crop_dataset


def timed(func, repeat: int = 1) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def bench_trainer(steps: int, device: torch.device) -> tuple[float, float]:
    config = RunSettings(train=TrainSettings(steps=steps))
    data = crop_dataset()
    train = config.train

    def lab() -> None:
        model, first, _ = build_run_model(config, len(data.classes))
        train_classifier(model, data.train_x, data.train_y, data.val_x, data.val_y, data.normalize,
                         model.get_submodule(first), train, device=device, progress=lambda f, m: None)

    def bare() -> None:
        model, _, _ = build_run_model(config, len(data.classes))
        model.to(device).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=train.lr)
        order = torch.randperm(len(data.train_x), generator=torch.Generator().manual_seed(0))
        for step in range(steps):
            index = order[(step * train.batch_size) % len(order):][: train.batch_size]
            x, y = data.normalize(data.train_x[index].to(device)), data.train_y[index].to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return timed(lab), timed(bare)


def bench_fit() -> tuple[float, float]:
    lam = np.geomspace(4.5, 0.05, 27)
    profile = theory_profile(lam, 0.3) * (1 + 0.1 * np.random.default_rng(0).random(27))
    grid = np.exp(np.linspace(math.log(1e-3 / lam[0] ** 2), math.log(1e5 / lam[0] ** 2), 241))
    fast = timed(lambda: [fit_linear_theory(profile, lam) for _ in range(20)], 3) / 20
    loop = timed(lambda: [[pearson(profile, theory_profile(lam, t)) for t in grid] for _ in range(5)], 3) / 5
    return fast, loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=TrainSettings().steps)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = resolve_device(args.device)
    crop_dataset()  # cut the crops once, outside the timings
    lab, bare = bench_trainer(args.steps, device)
    print(f"trainer     lab {lab:7.2f} s   bare loop {bare:7.2f} s   ratio {lab / bare:5.2f}  (target ≤ 1.15; "
          f"{args.steps} steps of the default run on {device})")
    fast, loop = bench_fit()
    print(f"theory fit  {fast * 1e3:7.2f} ms   grid scored τ by τ {loop * 1e3:7.2f} ms (grid only)   "
          f"speed-up {loop / fast:5.1f}×")
    start = time.perf_counter()
    runs = load_runs(SHIPPED_RUNS_DIR)
    summarize_runs(runs, {run.name: run_trajectory(run) for run in runs})
    print(f"claims      {len(runs)} shipped runs loaded and analysed in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()

"""Benchmark: a survey spread over 1 and over 2 local workers.

    python bench/bench_survey.py [--family energy] [--workers 1 2] [--models bench/survey_models.txt]

Runs ``python -m fl_core survey`` once per worker count on the same models (by default 20 timm architectures at
random init, bench/survey_models.txt) with an embedded cluster of that many worker processes (the cores shared among
them: torch threads = cores / workers), and prints each run's wall-clock seconds (the command's own, start-up of the
cluster included, and the survey's, first row submitted to last row back), the rows per worker, and the speed-up
over the first worker count. Every row must succeed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def survey(models: Path, family: str, workers: int) -> tuple[float, dict]:
    """One run of the command: (its wall-clock seconds, its JSON)."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fl_core", "survey", "--family", family, "--models-file", str(models),
                           "--workers", str(workers), "--json", "-", "--quiet"], cwd=HERE, capture_output=True,
                          text=True, timeout=7200, env={**os.environ, "PYTHONPATH": str(HERE)})
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return time.perf_counter() - began, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="energy")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", type=Path, default=HERE / "bench" / "survey_models.txt")
    args = parser.parse_args()
    print(f"{args.family} survey of {args.models.name}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}:")
    baseline = None
    for workers in args.workers:
        wall, result = survey(args.models, args.family, workers)
        failed = [row["spec"] for row in result["rows"] if row["error"]]
        if failed:
            raise RuntimeError(f"rows failed: {failed}")
        per_worker = collections.Counter(row["worker"] for row in result["rows"])
        baseline = baseline or result["seconds"]
        print(f"  {workers} worker(s): survey {result['seconds']:.1f} s (command {wall:.1f} s), "
              f"speed-up {baseline / result['seconds']:.2f}x, rows per worker {sorted(per_worker.values())}, "
              f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Build the Training Lab's shipped runs in fl_core/assets/runs (run from the repository root).

    python scripts/make_shipped_runs.py [--suite paper] [--out fl_core/assets/runs] [--steps-scale 1.0] [--no-register]

Trains every run of the suite (fl_core.lab.experiments.SUITES) on crops of the bundled photos, skipping runs whose
folder already holds the same configuration, registers the runs marked ``demo`` as ``demo:lab_*`` entries of
fl_core/assets/demo/manifest.json (never touching the other entries), and prints the summary next to the paper's values.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fl_core.lab.claims import summarize_runs
from fl_core.lab.experiments import SUITES, run_suite, suite_runs
from fl_core.lab.runs import SHIPPED_RUNS_DIR, register_demo_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="paper", choices=list(SUITES))
    parser.add_argument("--out", type=Path, default=SHIPPED_RUNS_DIR)
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiply every run's steps")
    parser.add_argument("--no-register", action="store_true", help="do not add demo: entries to the manifest")
    args = parser.parse_args()
    started = time.perf_counter()
    items = suite_runs(args.suite, steps_scale=args.steps_scale)
    runs = run_suite(items, args.out, log=lambda line: print(line, flush=True))
    if not args.no_register:
        demos = [run for run, item in zip(runs, items) if item.demo]
        print("registered demo models:", ", ".join(register_demo_runs(demos)))
    print(summarize_runs(runs).to_frame().to_string(index=False))
    print(f"{len(runs)} runs in {time.perf_counter() - started:.0f} s (runs loaded from disk take no time)")


if __name__ == "__main__":
    main()

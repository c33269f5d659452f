"""Print what FilterLens runs on: the versions of FilterLens, Python, torch, torchvision, timm and Dask, the devices,
and two checks: torch and torchvision are a pair (the same release, both CPU or both CUDA builds), and torchvision's
compiled operators load. Exit status 1 when a check fails: paste the output into a bug report.

Example:
    filterlens env
"""

from __future__ import annotations

import argparse
import sys

STANDALONE = True
"""Not an analysis: no result to write; ``run`` returns the exit status."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace, progress: object) -> int:
    from fl_core.compute.environment import environment_report

    versions, checks = environment_report()
    width = max(len(name) for name, _ in versions)
    for name, version in versions:
        print(f"{name:<{width}}  {version}")
    for passed, what in checks:
        print(f"{'ok' if passed else 'FAIL':<4}  {what}")
    if not all(passed for passed, _ in checks):
        print("torch and torchvision do not work together: every analysis and the dashboard fail until they do.",
              file=sys.stderr)
        return 1
    return 0

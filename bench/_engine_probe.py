"""Jobs of ``bench_engine.py``, importable by worker processes (the bench folder is on their ``PYTHONPATH``)."""

from __future__ import annotations

import importlib
import os
import time


def ready(seconds: float, progress=None) -> tuple[int, float]:
    """A first job: import the dashboard's jobs (what a real first job needs), wait ``seconds`` so that each of
    several probes lands on its own worker, and return ``(process id, wall-clock time it started)``."""
    importlib.import_module("fl_ui.jobs")
    started = time.time()
    time.sleep(seconds)
    return os.getpid(), started

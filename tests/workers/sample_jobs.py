"""Jobs for the engine tests: top-level functions the workers import by name (and nothing heavier than the job
runner needs)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fl_core.compute.progress import report
from fl_core.errors import DataError
from fl_ui.worker import publish, stop_requested


def counting(steps: int, progress=None) -> int:
    """``steps`` progress reports 50 ms apart; returns the worker's process id."""
    for step in range(steps):
        report(progress, step / steps, f"step {step}")
        time.sleep(0.05)
    return os.getpid()


def timed(seconds: float, progress=None) -> tuple[float, float, int]:
    """Hold a worker for ``seconds``; returns (start, end) wall-clock times and the process id."""
    began = time.time()
    report(progress, 0.0, "holding the worker")
    time.sleep(seconds)
    return began, time.time(), os.getpid()


def graceful(limit: int, progress=None) -> str:
    """Runs until asked to stop (or ``limit`` steps), then returns what it did."""
    steps = 0
    while not stop_requested() and steps < limit:
        steps += 1
        report(progress, 0.5, "working")
        time.sleep(0.01)
    return f"stopped after {steps} steps"


def publishing(count: int, progress=None) -> int:
    """Publishes ``count`` growing snapshots, then holds the worker for a second."""
    for step in range(count):
        publish("snapshots", {i: [i] * 2 for i in range(step + 1)})
    time.sleep(1.0)
    return count


def failing(kind: str, progress=None) -> None:
    if kind == "user":
        raise DataError("The folder holds no images. Pick another folder.")
    raise ValueError("an internal bug")


def silent(seconds: float, progress=None) -> str:
    """Publishes its process id, then computes for ``seconds`` without a progress report (a long C call)."""
    publish("pid", os.getpid())
    report(progress, 0.1, "one long step")
    time.sleep(seconds)
    return "finished"


def reporting_pid(seconds: float, progress=None) -> int:
    """Publishes its process id, then reports progress for ``seconds``."""
    publish("pid", os.getpid())
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        report(progress, 0.5, "working")
        time.sleep(0.01)
    return os.getpid()


def freed_block_kept(mib: int, progress=None) -> dict:
    """The worker's malloc settings (:data:`fl_core.compute.allocator.ENVIRONMENT`) and the MiB of resident memory a
    freed ``mib``-MiB tensor leaves behind."""
    import torch

    from fl_core.compute import allocator

    def rss_mib() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20

    before = rss_mib()
    block = torch.ones(mib * 2**18)
    del block
    return {"environment": {key: os.environ.get(key) for key in allocator.ENVIRONMENT}, "kept": rss_mib() - before}


def survey_row(request, progress=None):
    """A survey row of ``request.spec`` after 0.3 s, without a model."""
    from fl_core.survey.analysis import SurveyRow

    time.sleep(0.3)
    return SurveyRow(request.spec, request.spec, "sample")

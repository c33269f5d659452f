"""Benchmark: what the heavy-job engine costs idle, how fast it starts, and how fast a running job cancels.

    python bench/bench_engine.py [--workers 2] [--cancels 3] [--repo PATH]

In a fresh process that has already imported the dashboard's jobs (as the server has after its preload), starts the
engine with ``--workers`` worker processes and times until every worker has started a first job (start-up). After
5 s idle it measures the memory of that process (growth since before the start) and of every process the engine
started (RSS, and PSS: pages shared between processes split among them). Then, on an engine of one worker, it starts
a long Channel Axes analysis ``--cancels`` times (demo:tiny_vgg, 256 + 128 crops, a 400-step recovery fine-tune
after each pruning step), cancels each 1 s after its first progress report, and times until its status says
cancelled and until the next job starts on that worker. ``--repo`` measures another checkout (a ``git worktree`` of
an older commit: the process pool the engine replaced) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
IDLE_S = 5.0
PROBE_S = 1.0
"""Each start-up probe holds its worker this long, so that every worker gets one."""


def start_engine(workers: int):
    """The checkout's heavy-job engine: the Dask engine, or the process pool of older checkouts (told by the
    checkout's files: an editable install of a newer one would otherwise lend it ``fl_ui.engine``)."""
    import fl_ui

    if not (Path(fl_ui.__file__).parent / "engine.py").exists():
        from fl_ui.pool import WorkerPool

        return WorkerPool(workers=workers)
    from fl_ui.engine import Engine

    return Engine(workers=workers)


def stop_engine(engine) -> None:
    (getattr(engine, "close", None) or engine.shutdown)()


def submit_channel_axes(engine):
    """The long Channel Axes job, in the checkout's job signature."""
    from fl_core.channelaxes.analysis import ChannelSettings
    from fl_core.channelaxes.pruning import PruningSettings
    from fl_ui import jobs

    settings = ChannelSettings(layer="features.11", pruning=PruningSettings(finetune_steps=400))
    args = ("demo:tiny_vgg", (), "crops", 256, 128, settings, False, "cpu")
    if hasattr(jobs, "ChannelAxesRequest"):
        return engine.submit(jobs.channel_axes_job, jobs.ChannelAxesRequest(*args))
    return engine.submit(jobs.channel_axes_job, *args)


def memory_mib(process) -> tuple[float, float]:
    """(RSS, PSS) of a process in MiB."""
    info = process.memory_full_info()
    return info.rss / 2**20, info.pss / 2**20


def measure_start_and_idle(workers: int) -> dict:
    import _engine_probe
    import psutil

    import fl_ui.jobs  # noqa: F401  (the server has imported it before the engine starts)

    me = psutil.Process()
    before = memory_mib(me)
    began = time.time()
    engine = start_engine(workers)
    probes = [engine.submit(_engine_probe.ready, PROBE_S) for _ in range(workers)]
    started = [probe.result(timeout=600) for probe in probes]
    startup = max(at for _, at in started) - began
    time.sleep(IDLE_S)
    after = memory_mib(me)
    children = [memory_mib(child) for child in me.children(recursive=True)]
    stop_engine(engine)
    return {"workers": workers, "distinct_workers": len({pid for pid, _ in started}), "startup_s": startup,
            "server_rss_growth_mib": after[0] - before[0], "server_pss_growth_mib": after[1] - before[1],
            "processes": len(children), "children_rss_mib": sum(r for r, _ in children),
            "children_pss_mib": sum(p for _, p in children)}


def measure_cancel(runs: int) -> dict:
    import _engine_probe

    engine = start_engine(1)
    engine.submit(_engine_probe.ready, 0.0).result(timeout=600)
    cancelled, freed = [], []
    for _ in range(runs):
        job = submit_channel_axes(engine)
        deadline = time.monotonic() + 600
        while not (job.status().state == "running" and job.status().fraction > 0):
            assert time.monotonic() < deadline and not job.status().finished, job.status()
            time.sleep(0.05)
        time.sleep(1.0)
        began = time.time()
        job.cancel()
        while not job.status().finished:
            time.sleep(0.01)
        cancelled.append(time.time() - began)
        assert job.status().state == "cancelled", job.status()
        _, at = engine.submit(_engine_probe.ready, 0.0).result(timeout=600)
        freed.append(at - began)
    stop_engine(engine)
    return {"cancelled_s": cancelled, "next_job_started_s": freed}


def child(workers: int, cancels: int) -> None:
    result = measure_start_and_idle(workers)
    if cancels:
        result |= measure_cancel(cancels)
    print("RESULT " + json.dumps(result), flush=True)


def run(repo: Path, workers: int, cancels: int) -> dict:
    """Measure ``repo``'s engine in a fresh process (its packages first on the path, this folder's probe next)."""
    path = os.pathsep.join([str(repo), str(HERE / "bench"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "FL_HEAVY_JOBS": str(workers)}
    done = subprocess.run([sys.executable, __file__, "--child", "--workers", str(workers), "--cancels", str(cancels)],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=3600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"the measurement failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def summary(result: dict) -> str:
    text = (f"start-up {result['startup_s']:.1f} s to {result['distinct_workers']} of {result['workers']} workers "
            f"running a first job; idle: {result['processes']} processes, RSS {result['children_rss_mib']:.0f} MiB, "
            f"PSS {result['children_pss_mib']:.0f} MiB; the server process grew by "
            f"{result['server_rss_growth_mib']:.0f} MiB RSS ({result['server_pss_growth_mib']:.0f} MiB PSS)")
    if "cancelled_s" in result:
        text += (f"\ncancel of a running Channel Axes job: cancelled after "
                 f"{', '.join(f'{s:.2f}' for s in result['cancelled_s'])} s (median "
                 f"{statistics.median(result['cancelled_s']):.2f}); next job started on its worker after "
                 f"{', '.join(f'{s:.2f}' for s in result['next_job_started_s'])} s (median "
                 f"{statistics.median(result['next_job_started_s']):.2f})")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cancels", type=int, default=3, help="cancelled Channel Axes jobs (0: none)")
    parser.add_argument("--repo", type=Path, default=HERE, help="checkout whose engine to measure")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.workers, args.cancels)
        return
    print(f"{args.workers} workers, repo {args.repo}, load average {os.getloadavg()[0]:.2f}:")
    print(summary(run(args.repo.resolve(), args.workers, args.cancels)))


if __name__ == "__main__":
    main()

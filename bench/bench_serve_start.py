"""Benchmark: how soon the image's server answers its first health check, when it is ready, and what it holds in memory.

    python bench/bench_serve_start.py [--repo PATH] [--settle 900]

Starts ``python -m fl_ui.serve`` (the Docker image's command) of ``--repo`` on a free loopback port with a fresh upload
folder, and times from its launch until ``/_stcore/health`` answers, then until the app's own ``/api/health`` answers
"ok" (warmed up, its engine's workers up; an older checkout without it: "—"), both polled every 0.5 s. It then sums
the memory of the server and every process it started (its heavy-job workers, and the embedded engine's scheduler),
RSS and PSS (pages shared between processes split among them): at its first health answer, and once the tree is idle
again (the heavy pages' default views, which start computing when it is warm, done: under 15 % of a core over 5 s,
at most ``--settle`` seconds). ``--repo`` measures another checkout (a ``git worktree`` of an older commit: the
process pool that the Dask engine replaced) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from tests.streamlit_server import free_port, health, ready, running_server, server_env  # noqa: E402

IDLE_CORES = 0.15
"""Below this many cores (summed over the tree) it is idle: the Dask engine's scheduler, nanny and worker heartbeats
take ~0.06 of a core on their own."""
IDLE_WINDOW_S = 5.0


def tree(root: psutil.Process) -> list[psutil.Process]:
    return [root, *root.children(recursive=True)]


def memory_mib(processes: list[psutil.Process]) -> tuple[float, float]:
    """Summed (RSS, PSS) of ``processes`` in MiB (those that have exited meanwhile left out)."""
    rss = pss = 0.0
    for process in processes:
        try:
            info = process.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        rss, pss = rss + info.rss / 2**20, pss + info.pss / 2**20
    return rss, pss


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def wait_idle(root: psutil.Process, limit_s: float) -> float:
    """Seconds until the tree used under :data:`IDLE_CORES` over :data:`IDLE_WINDOW_S` (``limit_s`` at most)."""
    began = time.monotonic()
    while time.monotonic() - began < limit_s:
        processes = tree(root)
        before = cpu_seconds(processes)
        time.sleep(IDLE_WINDOW_S)
        if cpu_seconds(processes) - before < IDLE_CORES * IDLE_WINDOW_S:
            return time.monotonic() - began
    return limit_s


def measure(repo: Path, settle_s: float) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        env = server_env(port, FL_UPLOAD_DIR=f"{scratch}/uploads", FL_RUNS_DIR=f"{scratch}/runs", HOME=scratch,
                         PYTHONPATH=str(repo))
        command = [sys.executable, "-m", "fl_ui.serve", "--server.address=127.0.0.1", "--server.headless=true"]
        began = time.monotonic()
        with running_server(command, port, env, Path(scratch) / "server.log", timeout=900, cwd=repo,
                            until=health) as server:
            health_s = time.monotonic() - began
            root = psutil.Process(server.pid)
            at_health = tree(root)
            first = memory_mib(at_health)
            has_ready = "HEALTH_PATH" in (repo / "fl_ui" / "serve.py").read_text()  # older checkouts: none
            ready_s = wait_ready(port, began, 900) if has_ready else None
            settled_s = wait_idle(root, settle_s)
            idle = tree(root)
            return {"health_s": health_s, "ready_s": ready_s, "processes_at_health": len(at_health),
                    "at_health_mib": first, "idle_after_s": settled_s, "processes_idle": len(idle),
                    "idle_mib": memory_mib(idle)}


def wait_ready(port: int, began: float, limit_s: float) -> float | None:
    """Seconds from ``began`` until ``/api/health`` answers "ok" (``None``: a server without it, or not in time)."""
    while time.monotonic() - began < limit_s:
        if ready(port) == "ok":
            return time.monotonic() - began
        time.sleep(0.5)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=HERE, help="checkout whose server to measure")
    parser.add_argument("--settle", type=float, default=900.0, help="longest wait for the server to be idle (s)")
    args = parser.parse_args()
    print(f"repo {args.repo}, load average {os.getloadavg()[0]:.2f}:")
    result = measure(args.repo.resolve(), args.settle)
    (rss, pss), (idle_rss, idle_pss) = result["at_health_mib"], result["idle_mib"]
    ready_s = "—" if result["ready_s"] is None else f"{result['ready_s']:.1f} s"
    print(f"first health answer {result['health_s']:.1f} s after launch, ready (/api/health) {ready_s} "
          f"({result['processes_at_health']} processes at the first answer: "
          f"RSS {rss:.0f} MiB, PSS {pss:.0f} MiB); idle {result['idle_after_s']:.0f} s later "
          f"({result['processes_idle']} processes: RSS {idle_rss:.0f} MiB, PSS {idle_pss:.0f} MiB); "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

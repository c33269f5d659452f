"""Benchmark: a newcomer's place in the queue and its wait while other visitors have queued jobs (issue 39).

    python bench/bench_fair_share.py [--visitors 5] [--jobs 4] [--seconds 2] [--one-browser]

Starts the engine as a server does (the embedded cluster, ``--workers`` worker processes: one, as ``FL_HEAVY_JOBS``
in the image) and stands in for browser sessions with threads, as ``tests/workers`` does: ``--visitors`` visitors
(each its own browser; ``--one-browser``: tabs of one browser) ask for ``--jobs`` jobs of ``--seconds`` each, the
first visitor's first job starts, then a newcomer asks for one job. It prints the newcomer's place in the queue right
after it asked, the seconds from the end of the job that was running until the newcomer's started (the target,
docs/results.md: at most 2nd, within 5 s), how many of the others' jobs started before it, and the order in which the
visitors' jobs started. ``cd /tmp && PYTHONPATH=OTHER_CHECKOUT python PATH/bench/bench_fair_share.py`` measures
another checkout's engine the same way (one without visitors counts each session as one; from outside both checkouts,
as the engine's helper process, ``python -m fl_ui.cluster``, imports from its working directory first).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.append(str(HERE))  # after PYTHONPATH: it may name the checkout whose engine to measure

from fl_ui import engine as engine_module  # noqa: E402
from fl_ui import sessions  # noqa: E402
from tests.workers import sample_jobs  # noqa: E402

TAB = threading.local()


def as_tab(session: str, browser: str | None, function, *args):
    """``function(*args)`` run as the script of ``session`` in ``browser``."""
    TAB.session, TAB.browser = session, browser
    try:
        return function(*args)
    finally:
        TAB.session = TAB.browser = None


def stand_in_for_sessions() -> None:
    """Sessions are threads here: :mod:`fl_ui.sessions` answers from :data:`TAB` (every tab stays open)."""
    sessions.current_session = lambda: getattr(TAB, "session", None)
    sessions.browser_secret = lambda: getattr(TAB, "browser", None)
    sessions.session_is_open = lambda session: True


def measure(visitors: int, jobs: int, seconds: float, one_browser: bool, workers: int) -> None:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(HERE)]))
    stand_in_for_sessions()
    began = time.monotonic()
    engine = engine_module.Engine(workers=workers)
    engine.wait_for_workers()
    print(f"engine: {workers} worker process(es) ready after {time.monotonic() - began:.1f} s "
          f"({engine.address.split('://')[0]})")
    asked = {}
    for visitor in range(visitors):
        browser = "script" if one_browser else f"browser-{visitor}"
        for job in range(jobs):
            with contextlib.suppress(engine_module.TooManyJobs):  # refused over the browser's limit
                asked[visitor, job] = as_tab(f"tab-{visitor}", browser, engine.submit, sample_jobs.timed, seconds)
    first = asked[0, 0]
    while first.status().state != "running":
        time.sleep(0.05)
    newcomer = as_tab("newcomer", "newcomer", engine.submit, sample_jobs.timed, seconds)
    position = newcomer.status().position
    _, first_ended, _ = first.result(timeout=3600)
    newcomer_began, _, _ = newcomer.result(timeout=3600)
    ahead = sorted((job.result()[0], key) for key, job in asked.items()
                   if key != (0, 0) and job.status().state == "done" and job.result()[0] < newcomer_began)
    for job in asked.values():
        job.cancel()
    for job in asked.values():
        job.join(timeout=120)
    engine.close()
    kind = "tabs of one browser" if one_browser else "visitors, a browser each"
    limit = getattr(engine_module, "browser_job_limit", None)
    print(f"{visitors} {kind} asked for {jobs} jobs of {seconds:g} s each ({len(asked)} accepted: "
          f"{f'at most {limit()} per browser' if limit else 'no limit per browser'}), one running; then a newcomer "
          "asked for one:")
    print(f"  the newcomer was {position}{_suffix(position)} in the queue (target: at most 2nd)")
    print(f"  it started {newcomer_began - first_ended:.2f} s after the running job ended (target: within 5 s); "
          f"{len(ahead)} of the others' jobs started between them")
    print(f"  those jobs, in order (visitor#job): {' '.join(f'v{v}#{j}' for _, (v, j) in ahead) or 'none'}")
    print(f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


def _suffix(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visitors", type=int, default=5, help="visitors who queue jobs before the newcomer")
    parser.add_argument("--jobs", type=int, default=4, help="jobs each of them asks for")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds each job holds its worker")
    parser.add_argument("--one-browser", action="store_true", help="the visitors are tabs of one browser")
    parser.add_argument("--workers", type=int, default=1, help="worker processes of the engine")
    args = parser.parse_args()
    print(f"engine from {Path(engine_module.__file__).parent.parent}")
    measure(args.visitors, args.jobs, args.seconds, args.one_browser, args.workers)


if __name__ == "__main__":
    main()

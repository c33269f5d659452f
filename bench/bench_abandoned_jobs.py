"""Benchmark: a new visitor's wait while abandoned long runs exist, and the workers' memory after (issue 33).

    python bench/bench_abandoned_jobs.py [--runs 3] [--steps 20000] [--repo PATH]

Starts ``python -m fl_ui.serve`` on a free loopback port with ``FL_WARM_WORKER_VIEWS=0`` (so the default Channel Axes
result is not computed before the visitor asks for it) and the default engine (``FL_HEAVY_JOBS``: one worker per two
cores). ``--runs`` browser sessions (Debian's Chromium via Playwright, a context each) open the Training Lab, start a
``--steps``-step run and close their tab once their run shows its progress. Then a new visitor opens Channel Axes
(its default request: MobileNetV2's default layer) and the script polls its progress bar every 0.1 s: it prints the
seconds from the visitor's request (its progress bar's first appearance) until the job starts (the bar names a stage
past "waiting for a worker"), and from opening the page; the target (docs/results.md) is 5 s. It prints the resident
memory of the engine's worker processes when the server listens (idle), while the runs train, and 5 s after the
visitor's result is shown, and how many jobs the server cancelled because every session watching them had closed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import psutil
from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from tests.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.streamlit_server import free_port, running_server, server_env  # noqa: E402

PROGRESS_JS = """() => Array.from(document.querySelectorAll('[data-testid="stProgress"]')).map(p => p.innerText)"""
QUEUED = re.compile(r"waiting for|starting the engine")
"""A progress text of a job that has not started."""
RESULT_TIMEOUT_S = 1800
SETTLE_S = 5.0
"""Seconds between the visitor's result and the last memory reading (the job's end, its memory returned)."""
CANCELLED = re.compile(r"cancelling job (\S+): every session that watched it closed")


def worker_mib(server: psutil.Process) -> float:
    """Summed RSS of the engine's worker processes (spawned by the embedded cluster's nannies), in MiB."""
    total = 0.0
    for process in server.children(recursive=True):
        try:
            if "spawn_main" in " ".join(process.cmdline()):
                total += process.memory_info().rss / 2**20
        except psutil.NoSuchProcess:
            continue
    return total


def start_long_run(browser, url: str, steps: int):
    """A browser session that starts a Training Lab run and waits until it shows its progress; returns its
    context."""
    context = browser.new_context(viewport={"width": 1440, "height": 1800})
    context.set_default_timeout(RESULT_TIMEOUT_S * 1000)
    page = context.new_page()
    page.goto(f"{url}/training-lab?lab=train&lab_steps={steps}")
    page.get_by_role("button", name="Start training").click()
    page.locator('[data-testid="stProgress"]').first.wait_for()
    return context


def visitor_wait(browser, url: str) -> dict:
    """A new visitor opens Channel Axes: seconds from opening the page and from the request (its progress bar) until
    the job starts, and until the result is drawn."""
    context = browser.new_context(viewport={"width": 1440, "height": 1800})
    page = context.new_page()
    opened = time.monotonic()
    page.goto(f"{url}/channel-axes", timeout=RESULT_TIMEOUT_S * 1000)
    asked = started = None
    texts: list[str] = []
    while time.monotonic() - opened < RESULT_TIMEOUT_S:
        bars = [text for text in page.evaluate(PROGRESS_JS) if "Channel axes" in text]
        if bars and asked is None:
            asked = time.monotonic()
        if bars and bars[0] not in texts:
            texts.append(bars[0])
        if bars and started is None and not QUEUED.search(bars[0]):
            started = time.monotonic()
        if page.evaluate("() => document.querySelectorAll('.js-plotly-plot').length >= 3"):
            break
        page.wait_for_timeout(100)
    shown = time.monotonic()
    context.close()
    asked, started = asked or shown, started or shown
    return {"from_request_s": started - asked, "from_opening_s": started - opened, "result_s": shown - opened,
            "progress": texts}


def measure(runs: int, steps: int, repo: Path) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        env = server_env(port, FL_UPLOAD_DIR=f"{scratch}/uploads", FL_RUNS_DIR=f"{scratch}/runs", HOME=scratch,
                         PYTHONPATH=str(repo), FL_WARM_WORKER_VIEWS="0")
        log = Path(scratch) / "server.log"
        command = [sys.executable, "-m", "fl_ui.serve", "--server.address=127.0.0.1", "--server.headless=true"]
        with running_server(command, port, env, log, timeout=900, cwd=repo) as server, sync_playwright() as play:
            root, url = psutil.Process(server.pid), f"http://127.0.0.1:{port}"
            idle = worker_mib(root)
            browser = play.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            contexts = [start_long_run(browser, url, steps) for _ in range(runs)]
            training = worker_mib(root)
            for context in contexts:
                context.close()
            wait = visitor_wait(browser, url)
            browser.close()
            time.sleep(SETTLE_S)
            after = worker_mib(root)
            cancelled = len(set(CANCELLED.findall(log.read_text())))
    print(f"{runs} abandoned {steps:,}-step Training Lab runs, then a visitor opens Channel Axes:")
    print(f"  the visitor's job started {wait['from_request_s']:.1f} s after its request "
          f"({wait['from_opening_s']:.1f} s after opening the page; target 5 s); result shown after "
          f"{wait['result_s']:.0f} s (1,800 at most)")
    print(f"  progress seen: {' | '.join(wait['progress'])}")
    print(f"  jobs cancelled as abandoned: {cancelled}")
    print(f"  worker RSS: {idle:.0f} MiB idle, {training:.0f} MiB while the runs trained, {after:.0f} MiB 5 s after "
          f"the visitor's result; load average {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="abandoned Training Lab runs")
    parser.add_argument("--steps", type=int, default=20_000, help="steps of each run")
    parser.add_argument("--repo", type=Path, default=HERE, help="checkout whose server to measure")
    args = parser.parse_args()
    print(f"repo {args.repo}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    measure(args.runs, args.steps, args.repo.resolve())


if __name__ == "__main__":
    main()

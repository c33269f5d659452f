"""The shared server keeps answering its health check while sessions open pages and a long job runs.

A bounded version of ``bench/bench_server_load.py`` (which runs the full 8 sessions + 2 long jobs and prints the
numbers): real ``streamlit run app.py`` on loopback, Chromium sessions, a health poller in its own process.
"""

from __future__ import annotations

import pytest

from bench.bench_server_load import measure

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_health_answers_within_budget_under_load(chromium) -> None:
    report = measure(sessions=4, long_jobs=1, seconds=45, heavy_jobs=1)
    print(report.summary())
    assert report.visits >= 4, report.summary()  # the sessions really opened pages
    assert report.failures == 0 and len(report.latencies) >= 100, report.summary()
    assert report.quantile(0.99) < 1.0 and report.worst < 2.0, report.summary()

"""Fair share with real worker processes: a newcomer's first job starts next however many jobs others queued, the
others take turns one job each, and the tabs of one browser share one turn and one limit."""

from __future__ import annotations

import pytest

from fl_ui import engine as engine_module
from fl_ui.engine import TooManyJobs

from . import sample_jobs as jobs
from .conftest import finish, wait_until


@pytest.mark.slow
def test_a_newcomers_job_starts_next_however_many_jobs_five_visitors_queued(engine, browser_sessions) -> None:
    """The red team's case, as served (one worker): five visitors with four jobs each put a newcomer 20th in a FIFO
    queue; here it is 1st, starts within 5 s of the running job's end, and the others then take turns."""
    with browser_sessions.tab("first", browser="first"):
        running = engine.submit(jobs.timed, 3.0)
    wait_until(lambda: running.status().state == "running")
    queued = {}
    for visitor in range(5):
        with browser_sessions.tab(f"script-{visitor}", browser=f"script-{visitor}"):
            queued[visitor] = [engine.submit(jobs.timed, 0.05) for _ in range(4)]
    with browser_sessions.tab("newcomer", browser="newcomer"):
        mine = engine.submit(jobs.timed, 0.05)
    state = mine.status()
    assert (state.state, state.position) == ("queued", 1) and "1st in this server's queue" in state.message
    _, running_ended, _ = running.result(timeout=120)
    began, _, _ = mine.result(timeout=120)
    assert 0 <= began - running_ended < 5.0
    starts = {(visitor, n): job.result(timeout=300)[0] for visitor, asked in queued.items()
              for n, job in enumerate(asked)}
    assert began < min(starts.values())
    for n in range(3):  # every visitor's n-th job starts before anyone's (n+1)-th
        assert max(starts[visitor, n] for visitor in queued) < min(starts[visitor, n + 1] for visitor in queued)


@pytest.mark.slow
def test_the_tabs_of_one_browser_share_one_turn_and_one_limit(engine, browser_sessions, monkeypatch) -> None:
    monkeypatch.setenv(engine_module.BROWSER_JOBS_ENV, "6")
    started, refused = [], []
    for tab in range(5):  # five tabs of one browser, four jobs each (FL_SESSION_JOBS)
        with browser_sessions.tab(f"tab-{tab}", browser="script"):
            for _ in range(4):
                try:
                    started.append(engine.submit(jobs.counting, 400))
                except TooManyJobs as refusal:
                    refused.append(str(refusal))
    assert len(started) == 6 and len(refused) == 14
    assert "This browser has 6 jobs running or waiting" in refused[0] and "FL_BROWSER_JOBS=6" in refused[0]
    wait_until(lambda: started[0].status().state == "running")
    with browser_sessions.tab("newcomer", browser="newcomer"):
        mine = engine.submit(jobs.counting, 1)
    assert mine.status().position == 1
    with browser_sessions.tab("other-tab", browser="script"), pytest.raises(TooManyJobs):
        engine.submit(jobs.counting, 1)  # a sixth tab of the same browser is not a new visitor
    finish(*started)
    assert mine.join(timeout=120).state == "done"

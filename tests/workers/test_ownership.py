"""Jobs belong to the browser sessions that watch them: a job whose every session closed is cancelled (at once when
superseded, after a grace period when its tabs closed, sooner when others wait), the server's warm-up never is, a
session may own a limited number of jobs, and a visitor's view goes ahead of the warm-up and of long runs, and never
waits behind a running warm-up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from fl_core.survey.analysis import SurveySettings
from fl_ui import engine as engine_module
from fl_ui import memo as memo_module
from fl_ui import survey as survey_module
from fl_ui.engine import Lane, TooManyJobs
from fl_ui.memo import pooled

from . import sample_jobs as jobs
from .conftest import finish, wait_until


class PageRerun(Exception):
    """Stands in for Streamlit stopping a page's run: raised from the progress callback of the wait."""


def interrupted_once_running(fraction: float, message: str) -> None:
    if message.startswith("step"):
        raise PageRerun


@pytest.fixture
def shared(engine, monkeypatch):
    """A page's cached job (:func:`fl_ui.memo.pooled`) on the test engine."""
    monkeypatch.setattr(memo_module, "heavy_engine", lambda: engine)
    return pooled(jobs.counting, max_entries=4)


@pytest.mark.slow
def test_a_job_is_cancelled_a_grace_period_after_every_session_watching_it_closed(engine, shared, browser_sessions,
                                                                                  monkeypatch) -> None:
    monkeypatch.setattr(engine_module, "ABANDONED_AFTER_S", 3.0)
    with browser_sessions.tab("a"), pytest.raises(PageRerun):
        shared(2000, progress=interrupted_once_running)  # 100 s; its user went to another page
    with browser_sessions.tab("b"):
        job = shared.start(2000)  # another session asks for the same request: one job, two owners
    assert job.owners == {"a", "b"}
    browser_sessions.close("a")
    time.sleep(4.5)
    assert job.status().state == "running"  # "b" is still open
    browser_sessions.close("b")
    closed = time.monotonic()
    assert job.join(timeout=60).state == "cancelled"
    assert 3.0 <= time.monotonic() - closed < 10.0
    assert not shared.cached(2000)


@pytest.mark.slow
def test_an_open_session_keeps_its_job_and_the_servers_warm_up_is_never_abandoned(engine, shared, browser_sessions,
                                                                                  monkeypatch) -> None:
    monkeypatch.setattr(engine_module, "ABANDONED_AFTER_S", 0.5)
    with browser_sessions.tab("a"), pytest.raises(PageRerun):
        shared(40, progress=interrupted_once_running)  # 2 s; "a" stays open on another page
    wait_until(lambda: shared.cached(40), timeout=60)
    warm_up = shared.start(60)  # outside any session: the server's, kept for everyone
    assert warm_up.shared and warm_up.lane == Lane.WARM_UP
    with browser_sessions.tab("visitor"):
        assert shared.start(60) is warm_up
        shared.abandon(60)  # the visitor picked something else
    browser_sessions.close("visitor")
    assert warm_up.join(timeout=60).state == "done" and shared.cached(60)


@pytest.mark.slow
def test_a_superseded_request_is_cancelled_at_once_unless_another_session_watches_it(engine, shared,
                                                                                     browser_sessions) -> None:
    with browser_sessions.tab("a"), pytest.raises(PageRerun):
        shared(2000, progress=interrupted_once_running)  # a page asked for 100 s of work, then a setting changed
    done = {}

    def other_session() -> None:
        with browser_sessions.tab("b"):
            done.update(pid=shared(60))

    follower = threading.Thread(target=other_session, daemon=True)
    follower.start()  # "b" waits for a 3 s job, queued behind it (one worker)
    wait_until(lambda: "b" in browser_sessions.open)
    time.sleep(1.0)
    with browser_sessions.tab("a"):
        shared.abandon(60)  # not "a"'s: kept
        start = time.perf_counter()
        shared.abandon(2000)  # "a" was its only owner: cancelled now
    follower.join(timeout=60)
    assert "pid" in done and time.perf_counter() - start < 30  # nothing queued behind the superseded job
    assert shared.cached(60) and not shared.cached(2000)


@pytest.mark.slow
def test_a_visitors_job_starts_within_seconds_while_three_abandoned_long_runs_exist(engine, browser_sessions) -> None:
    runs = []
    for session in ("a", "b", "c"):
        with browser_sessions.tab(session):
            runs.append(engine.submit(jobs.graceful, 10**9, graceful=True, lane=Lane.LONG))
    wait_until(lambda: runs[0].status().state == "running")
    for session in ("a", "b", "c"):
        browser_sessions.close(session)
    with browser_sessions.tab("visitor"):
        asked = time.time()
        began, _, _ = engine.submit(jobs.timed, 0.1).result(timeout=120)
    assert began - asked < 5.0  # ABANDONED_WHILE_OTHERS_WAIT_S, then the run's stop at its next step
    assert all(run.join(timeout=60).finished for run in runs)
    assert runs[0].result().startswith("stopped after")  # a graceful run keeps what it did


@pytest.mark.slow
def test_a_visitors_view_goes_ahead_of_the_warm_up_and_of_long_runs(engine, browser_sessions) -> None:
    blocker = engine.submit(jobs.timed, 3.0)
    wait_until(lambda: blocker.status().state == "running")
    with browser_sessions.tab("trainer"):
        long_run = engine.submit(jobs.timed, 0.1, lane=Lane.LONG)
    warm_up = engine.submit(jobs.timed, 0.1)  # outside any session
    with browser_sessions.tab("visitor"):
        view = engine.submit(jobs.timed, 0.1)
    assert [job.status().position for job in (view, warm_up, long_run)] == [1, 2, 3]
    assert "1st in this server's queue" in view.status().message
    began = [job.result(timeout=120)[0] for job in (view, warm_up, long_run)]
    assert began == sorted(began)



@pytest.mark.slow
def test_a_visitors_own_job_never_waits_behind_a_running_warm_up(engine, browser_sessions) -> None:
    """The server's warm-up of a heavy page (a job nobody but the server wants) yields the worker a visitor's job
    waits for; a warm-up a visitor watches (the same request) runs on."""
    warm_up = engine.submit(jobs.counting, 100_000)  # outside any session: the server's warm-up lane
    wait_until(lambda: warm_up.status().state == "running")
    with browser_sessions.tab("visitor"):
        asked = time.time()
        began, _, _ = engine.submit(jobs.timed, 0.1).result(timeout=120)
    assert began - asked < 5.0  # REAP_INTERVAL_S, then the warm-up's stop at its next progress report
    assert warm_up.join(timeout=60).state == "cancelled"
    watched = engine.submit(jobs.counting, 100)
    watched.watch("watcher")
    browser_sessions.open.add("watcher")
    wait_until(lambda: watched.status().state == "running")
    with browser_sessions.tab("visitor"):
        later = engine.submit(jobs.timed, 0.1)
        time.sleep(2 * engine_module.REAP_INTERVAL_S + 1)
        assert not watched.cancelling and later.status().state == "queued"
    assert watched.result(timeout=120) and later.result(timeout=120)


def held_for_a_dispatch_under_way(engine, monkeypatch) -> Callable[[], None]:
    """Hold the engine's next jobs as :meth:`~fl_ui.engine.Engine.dispatch` does while it hands them over (its round
    trips under way, or failed once); returns what lets it hand them over again."""
    dispatch = engine.dispatch
    monkeypatch.setattr(engine, "dispatch", lambda: [])
    return lambda: monkeypatch.setattr(engine, "dispatch", dispatch)


@pytest.mark.slow
def test_a_warm_up_runs_on_while_the_visitors_job_has_a_free_worker(pair, browser_sessions, monkeypatch) -> None:
    """A visitor's job the engine holds while a worker is free for it does not wait for the warm-up's: the warm-up on
    the other worker runs on (the merge of fair share and warm-up yielding cancelled it whenever its check ran during
    the visitor's dispatch)."""
    warm_up = pair.submit(jobs.counting, 100_000)  # outside any session: the server's warm-up lane
    wait_until(lambda: warm_up.status().state == "running")
    release = held_for_a_dispatch_under_way(pair, monkeypatch)
    with browser_sessions.tab("visitor"):
        view = pair.submit(jobs.timed, 0.1)
    assert not view.dispatched and pair.waiting_for_workers([view]) == set()
    assert pair.yield_warm_ups() == []
    time.sleep(4 * engine_module.REAP_INTERVAL_S)  # the engine's own passes
    assert not warm_up.cancelling
    release()
    view.result(timeout=120)
    assert warm_up.status().state == "running"
    finish(warm_up)


def test_free_workers_are_counted_from_the_scheduler_not_the_clients_periodic_cache(pair) -> None:
    """The client's periodic refresh leaves ``scheduler_info()`` listing no worker; the engine must not read that
    (CI saw a running warm-up cancelled for a visitor's job that had a free worker)."""
    pair.client._scheduler_identity = type(pair.client._scheduler_identity)({"workers": {}, "n_workers": 2})
    pair.client.scheduler_info = lambda *args, **kwargs: pair.client._scheduler_identity
    try:
        assert pair.free_workers() == (2, 0)
    finally:
        del pair.client.scheduler_info


@pytest.mark.slow
def test_an_abandoned_job_keeps_its_grace_while_the_visitors_job_has_a_free_worker(pair, browser_sessions,
                                                                                   monkeypatch) -> None:
    """Nobody waits while a worker is free for a held job: an abandoned job goes on for its whole grace period, not
    :data:`~fl_ui.engine.ABANDONED_WHILE_OTHERS_WAIT_S`."""
    with browser_sessions.tab("gone"):
        run = pair.submit(jobs.counting, 100_000)
    wait_until(lambda: run.status().state == "running")
    release = held_for_a_dispatch_under_way(pair, monkeypatch)
    with browser_sessions.tab("visitor"):
        view = pair.submit(jobs.timed, 0.1)
    browser_sessions.close("gone")
    time.sleep(engine_module.ABANDONED_WHILE_OTHERS_WAIT_S + 4 * engine_module.REAP_INTERVAL_S)
    assert not view.dispatched and pair.cancel_abandoned() == [] and not run.cancelling
    release()
    view.result(timeout=120)
    assert run.status().state == "running"
    finish(run)


def test_a_session_may_own_a_limited_number_of_unfinished_jobs(engine, browser_sessions, monkeypatch) -> None:
    monkeypatch.setenv(engine_module.SESSION_JOBS_ENV, "2")
    with browser_sessions.tab("a"):
        first, second = engine.submit(jobs.counting, 400), engine.submit(jobs.counting, 400)
        with pytest.raises(TooManyJobs, match=r"You have 2 jobs running or waiting .*FL_SESSION_JOBS=2.*Cancel"):
            engine.submit(jobs.counting, 1)
    with browser_sessions.tab("b"):
        other = engine.submit(jobs.counting, 1)  # another session's limit is its own
    second.cancel()
    second.join(timeout=60)
    with browser_sessions.tab("a"):
        third = engine.submit(jobs.counting, 1)
    finish(first, other, third)


@pytest.mark.slow
def test_a_survey_feeds_its_rows_through_the_sessions_job_limit(engine, browser_sessions, monkeypatch) -> None:
    monkeypatch.setenv(engine_module.SESSION_JOBS_ENV, "2")
    monkeypatch.setattr(survey_module, "heavy_engine", lambda: engine)
    monkeypatch.setattr(memo_module, "heavy_engine", lambda: engine)
    rows = pooled(jobs.survey_row, max_entries=8, lane=Lane.LONG)
    monkeypatch.setattr(survey_module, "survey_row_result", rows)
    owned = []
    start = rows.start

    def counting_start(request):
        job = start(request)
        owned.append(len(engine.session_jobs("a")))
        return job

    monkeypatch.setattr(rows, "start", counting_start)
    with browser_sessions.tab("a"):
        result = survey_module.run_survey([f"demo:row{i}" for i in range(5)], SurveySettings(), "cpu")
    assert [row.spec for row in result.rows] == [f"demo:row{i}" for i in range(5)]
    assert len(owned) == 5 and max(owned) == 2

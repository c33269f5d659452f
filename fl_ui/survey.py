"""Surveys for the Survey page: one engine job per model in the long lane (a visitor's page view goes first), run side
by side on the workers as the session's job limit allows, each row kept (a model surveyed before with the same
settings is not computed again)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from fl_core.compute.progress import Progress, report
from fl_core.errors import FilterLensError
from fl_core.survey.analysis import SurveyResult, SurveyRow, model_family
from fl_core.survey.settings import SurveySettings
from fl_ui import jobs, sessions
from fl_ui.engine import Job, Lane, heavy_engine
from fl_ui.memo import WAIT_POLL_S, pooled

survey_row_result = pooled(jobs.survey_row_job, max_entries=512, lane=Lane.LONG)
"""One model's row (:func:`fl_ui.jobs.survey_row_job`), keyed by its :class:`~fl_ui.jobs.SurveyRowRequest`."""


def survey_requests(specs: Sequence[str], settings: SurveySettings, device: str) -> list[jobs.SurveyRowRequest]:
    return [jobs.SurveyRowRequest(spec, settings, device) for spec in specs]


def run_survey(specs: Sequence[str], settings: SurveySettings, device: str,
               progress: Progress | None = None) -> SurveyResult:
    """Every model's row: the rows not kept yet are submitted as the session's job limit allows
    (:meth:`~fl_ui.engine.Engine.free_job_slots`; at least one at a time) and computed side by side on the engine's
    workers; ``seconds`` is this call's wall-clock time."""
    began = time.perf_counter()
    requests = survey_requests(specs, settings, device)
    engine, session = heavy_engine(), sessions.current_session()
    started: list[Job | None] = []
    while len(started) < len(requests) or not all(job is None or job.done for job in started):
        while len(started) < len(requests) and (engine.free_job_slots(session) > 0 or
                                                all(job is None or job.done for job in started)):
            started.append(survey_row_result.start(requests[len(started)]))
        done = sum(job is None or job.done for job in started)
        report(progress, done / len(requests), f"{done} of {len(requests)} models computed")
        time.sleep(WAIT_POLL_S)
    return SurveyResult(settings, tuple(map(_row, requests, started)), time.perf_counter() - began)


def survey_pending(specs: Sequence[str], settings: SurveySettings, device: str) -> bool:
    """Some row of the survey is not computed yet (it waits or runs, or starts when asked): what Cancel would stop."""
    return not all(survey_row_result.cached(request) for request in survey_requests(specs, settings, device))


def cancel_survey(specs: Sequence[str], settings: SurveySettings, device: str) -> None:
    """Cancel every row of a survey still waiting or running (those another session also waits for go on)."""
    for request in survey_requests(specs, settings, device):
        survey_row_result.abandon(request)


def _row(request: jobs.SurveyRowRequest, job: Job | None) -> SurveyRow:
    """A finished row: its job's result, or the kept one (``job`` is ``None``)."""
    try:
        return survey_row_result(request) if job is None else job.result()
    except FilterLensError as err:  # the job itself failed (its worker died) or was cancelled
        return SurveyRow(request.spec, request.spec, model_family(request.spec), error=str(err))

"""Cached wrappers of the Training Lab page: run folders, trajectories and claims, keyed by the folders' stamps, and
where this browser session's runs go.

A run folder is re-read when its ``run.json`` changes (a finished or resumed run); results are shared read-only.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import streamlit as st

from fl_core.errors import DataError
from fl_core.io.models import demo_manifest
from fl_core.lab.claims import (
    ClaimSummary,
    RunCorrelations,
    Trajectory,
    run_correlations,
    run_trajectory,
    summarize_runs,
)
from fl_core.lab.runs import SESSION_TOKEN, Run, list_runs, load_run, session_runs_dir
from fl_ui.cache import memoize

RUNS_TOKEN = "lab_runs"
"""Session state and URL key of this browser session's runs token (:func:`fl_core.lab.runs.session_runs_dir`)."""


def session_token() -> str:
    """This browser session's runs token: kept in the session, taken from the URL when the link carries a valid one
    (a reload or a bookmark finds the runs again), else new."""
    if RUNS_TOKEN not in st.session_state:
        linked = st.query_params.get(RUNS_TOKEN, "")
        st.session_state[RUNS_TOKEN] = linked if SESSION_TOKEN.fullmatch(linked) else uuid.uuid4().hex
    return st.session_state[RUNS_TOKEN]


def my_runs_dir() -> Path:
    """Where this browser session's Training Lab runs are saved and listed ("Your runs"): its own folder under
    ``FL_RUNS_DIR``, so users of a shared server never see each other's runs."""
    return session_runs_dir(session_token())


def run_stamp(folder: str | Path) -> str:
    """Modification time and size of a run's ``run.json`` (cache key)."""
    stat = (Path(folder) / "run.json").stat()
    return f"{stat.st_mtime_ns}:{stat.st_size}"


@memoize(max_entries=128)
def _run(folder: str, stamp: str) -> Run:
    return load_run(folder)


def get_run(folder: str | Path) -> Run:
    """The run saved in ``folder`` (shared, read-only)."""
    return _run(str(folder), run_stamp(folder))


def runs_in(root: str | Path) -> list[Run]:
    """Every readable run folder under ``root`` (unreadable ones are skipped)."""
    runs = []
    for folder in list_runs(root):
        try:
            runs.append(get_run(folder))
        except (DataError, OSError):
            continue
    return runs


@memoize(max_entries=128)
def _trajectory(folder: str, stamp: str) -> Trajectory:
    return run_trajectory(get_run(folder))


def get_trajectory(run: Run) -> Trajectory:
    """The profile trajectory of a saved run."""
    return _trajectory(run.path, run_stamp(run.path))


def _keys(runs: list[Run]) -> tuple[tuple[str, str], ...]:
    return tuple((run.path, run_stamp(run.path)) for run in runs)


@memoize(max_entries=16)
def _claims(keys: tuple[tuple[str, str], ...]) -> ClaimSummary:
    runs = [get_run(path) for path, _ in keys]
    return summarize_runs(runs, {run.name: get_trajectory(run) for run in runs})


def get_claims(runs: list[Run]) -> ClaimSummary:
    """The paper's claims measured on ``runs``."""
    return _claims(_keys(runs))


@memoize(max_entries=16)
def _correlations(keys: tuple[tuple[str, str], ...]) -> RunCorrelations:
    return run_correlations([get_run(path) for path, _ in keys])


def get_correlations(runs: list[Run]) -> RunCorrelations:
    """The consistency matrix of ``runs``."""
    return _correlations(_keys(runs))


def demo_name_of(run: Run) -> str | None:
    """The ``demo:`` name under which a shipped run's checkpoint is registered, if any."""
    return next((name for name, entry in demo_manifest().items()
                 if entry.provenance.get("run") == run.name and entry.init), None)

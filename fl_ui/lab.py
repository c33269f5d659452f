"""Cached wrappers of the Training Lab page: run folders, trajectories and claims, keyed by the folders' stamps, and
where this browser's runs go.

A run folder is re-read when its ``run.json`` changes (a finished or resumed run); results are shared read-only.

**Runs belong to a browser, never to a link.** A browser's runs folder is named by a one-way digest of its secret
(:func:`fl_ui.sessions.browser_secret`, an HttpOnly cookie), so its tabs and reloads find its runs and nothing in a
URL makes anyone else their owner. A link names a run by its folder's name and the run's (``lab_runs`` and ``run``):
opened in another browser, it shows that one run read-only (:func:`linked_run`); runs are trained into, and listed
from, the visitor's own folder only.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import streamlit as st

from fl_core.errors import DataError
from fl_core.io.demos import demo_manifest
from fl_core.lab.claims import (
    ClaimSummary,
    RunCorrelations,
    Trajectory,
    run_correlations,
    run_trajectory,
    summarize_runs,
)
from fl_core.lab.runs import SESSION_TOKEN, Run, list_runs, load_run, session_runs_dir
from fl_ui import sessions
from fl_ui.memo import memoize

RUNS_TOKEN = "lab_runs"
"""Session state key of this browser's runs token (:func:`session_token`), and URL key of the runs folder a link
shows a run of (:func:`linked_run`)."""
RUN_PARAM = "run"
"""URL key of the run a link shows."""


def runs_token(secret: str) -> str:
    """The runs token of the browser holding ``secret``: the first 32 hex digits of SHA-256 of it (one-way: the
    folder's name, which links show, tells nobody the secret)."""
    return hashlib.sha256(f"filterlens-runs:{secret}".encode()).hexdigest()[:32]


def session_token() -> str:
    """This browser's runs token (:func:`fl_core.lab.runs.session_runs_dir`): :func:`runs_token` of its secret, or a
    random one kept for this session where the browser has none (a client that keeps no cookies, an AppTest). Never
    taken from a URL."""
    if RUNS_TOKEN not in st.session_state:
        secret = sessions.browser_secret()
        st.session_state[RUNS_TOKEN] = uuid.uuid4().hex if secret is None else runs_token(secret)
    return st.session_state[RUNS_TOKEN]


def my_runs_dir() -> Path:
    """Where this browser's Training Lab runs are saved and listed ("Your runs"): its own folder under
    ``FL_RUNS_DIR``, so users of a shared server never see each other's runs, except one a link shows."""
    return session_runs_dir(session_token())


def linked_run() -> Run | None:
    """The run a link shows read-only: ``lab_runs`` names another browser's runs folder and ``run`` one of its runs
    (the page lists no other run of that folder); ``None`` when the link names this browser's own folder, or no run
    there."""
    token, name = st.query_params.get(RUNS_TOKEN, ""), st.query_params.get(RUN_PARAM, "")
    if not SESSION_TOKEN.fullmatch(token) or token == session_token():
        return None
    return next((run for run in runs_in(session_runs_dir(token)) if run.name == name), None)


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

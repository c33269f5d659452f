"""Survey rows on a Dask cluster: an embedded one on this machine, or a running scheduler's workers.

Importing this module imports neither Dask nor torch: the command imports Dask when it runs (``fl_core`` itself
never needs the engine), and a row travels to its worker as a pickled payload, so that the scheduler (which
unpickles task graphs) never imports the analyses; only the workers do. A worker that dies computing a row fails
that row only (the embedded cluster does not retry it elsewhere).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sys
import time
import types
import uuid
from collections.abc import Iterator, Sequence

from fl_core.compute import allocator
from fl_core.extras import require_extra

SCHEDULER_ENV = "FL_SCHEDULER"
"""The scheduler a survey uses when ``--scheduler`` is not given (the dashboard reads the same variable)."""
MAX_WORKERS = 64
WORKER_PROCESS_CONFIG = {"distributed.nanny.pre-spawn-environ": {
    "OMP_NUM_THREADS": None, "MKL_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": None} | allocator.ENVIRONMENT}
"""The Dask setting of the processes that start workers (nannies): glibc's malloc set for torch
(:mod:`fl_core.compute.allocator`) instead of Dask's default environment for the worker processes. Dask's
``MALLOC_TRIM_THRESHOLD_`` of 64 KiB turns off glibc's dynamic mmap threshold, so every large tensor is mapped and
zero-filled anew (torch runs markedly slower in a worker: docs/results.md, "Measurements behind design choices");
its one-thread OpenMP and BLAS settings would override the threads each worker is given."""


def default_workers() -> int:
    """Worker processes of an embedded cluster: one per core, at most 8 (each holds torch and a model)."""
    return max(1, min(8, os.cpu_count() or 1))


def row_task(payload: bytes):
    """On a worker: the :class:`~fl_core.survey.analysis.SurveyRow` of a pickled ``(spec, settings, device)``, with
    the worker's address and the seconds it took."""
    import dataclasses

    from distributed import get_worker

    from fl_core.survey.analysis import survey_row

    spec, settings, device = pickle.loads(payload)
    return dataclasses.replace(survey_row(spec, settings, device=device), worker=get_worker().address)


def _use_cores(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


@contextlib.contextmanager
def survey_client(scheduler: str | None, workers: int) -> Iterator:
    """A Dask client of ``scheduler``, or of an embedded cluster of ``workers`` processes (the cores shared among
    them, no dashboard, mutual TLS with credentials made for it: another user of the machine cannot connect) that
    closes afterwards; Dask logs only warnings and errors (the command prints its rows)."""
    require_extra("cluster", "The survey's engine")
    import dask
    from distributed import Client, LocalCluster
    from distributed.security import Security

    logging.getLogger("distributed").setLevel(logging.WARNING)
    if scheduler:
        with Client(scheduler, timeout=60) as client:
            yield client
        return
    with dask.config.set({"distributed.scheduler.allowed-failures": 0} | WORKER_PROCESS_CONFIG), _environment_kept():
        with _bare_main():
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                                   scheduler_kwargs={"dashboard": False}, memory_limit=0,
                                   security=Security.temporary(), silence_logs=logging.ERROR)
        with cluster, Client(cluster) as client:
            client.run(_use_cores, max(1, (os.cpu_count() or 1) // workers))
            yield client


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """This process's environment as it was, once the cluster has closed: Dask's nannies write their workers'
    environment (:data:`WORKER_PROCESS_CONFIG`: glibc's malloc settings) into the parent's ``os.environ`` and leave
    it, so every process started afterwards would inherit them."""
    before = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


@contextlib.contextmanager
def _bare_main() -> Iterator[None]:
    """A ``__main__`` without a script while worker processes are spawned: a spawned child re-runs its parent's
    main script, and the caller's may be one that cannot run again (a Streamlit page, whose runner leaves it as
    ``__main__``); the workers need only :func:`row_task`'s module."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def map_survey(client, specs: Sequence[str], settings, *, device=None, progress=None):
    """Every row of a survey computed on ``client``'s workers; the rows in the order of ``specs``."""
    from distributed import as_completed

    from fl_core.compute.progress import progress_callback, report
    from fl_core.survey.analysis import SurveyResult, SurveyRow, error_text, model_family

    progress = progress_callback(progress)
    began = time.perf_counter()
    batch = uuid.uuid4().hex[:8]
    futures = {client.submit(row_task, pickle.dumps((spec, settings, device)), key=f"survey-{batch}-{index}",
                             pure=False): index for index, spec in enumerate(specs)}
    rows: list[SurveyRow | None] = [None] * len(specs)
    report(progress, 0.0, f"0/{len(specs)} models")
    for done, future in enumerate(as_completed(futures), start=1):
        index = futures[future]
        try:
            rows[index] = future.result()
        except Exception as err:  # the worker died computing it: only this row fails
            rows[index] = SurveyRow(specs[index], specs[index], model_family(specs[index]),
                                    error=f"the worker computing it stopped ({error_text(err)})")
        report(progress, done / len(specs), f"{done}/{len(specs)} models ({rows[index].label})")
    return SurveyResult(settings, tuple(rows), time.perf_counter() - began)

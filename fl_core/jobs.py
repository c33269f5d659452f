"""A Training Lab run in a background thread, for the dashboard: live progress and snapshots, cancel, and a limit
on how many runs train at once in one server process (``FL_TRAINING_SLOTS``, default 1: training is CPU-bound).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fl_core.errors import FilterLensError
from fl_core.patches import PatchPCA
from fl_core.runs import Run, RunConfig, resolve_config, run_inputs, train_run

log = logging.getLogger("filterlens")
_SLOTS = threading.BoundedSemaphore(max(1, int(os.environ.get("FL_TRAINING_SLOTS", "1"))))


@dataclass(frozen=True)
class JobStatus:
    """A consistent copy of a job's state for display.

    Attributes:
        fraction, message: progress.
        snapshots: step -> first-layer weights taken so far (step 0 = init).
        pca: the patch PCA of the run's inputs, once known (for live profiles).
        reference_pca: App. D.2: the unmodified PCA.
        state: ``queued``, ``running``, ``done``, ``cancelled`` or ``failed``.
        run: the saved run when done (or cancelled after it started).
        error: the message for the user when failed.
    """

    fraction: float
    message: str
    snapshots: dict[int, np.ndarray] = field(default_factory=dict)
    pca: PatchPCA | None = None
    reference_pca: PatchPCA | None = None
    state: str = "queued"
    run: Run | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("done", "cancelled", "failed")


class TrainingJob:
    """Train ``config`` into ``folder`` on a daemon thread; poll :meth:`status`, stop with :meth:`cancel`."""

    def __init__(self, config: RunConfig, folder: str | Path, device=None) -> None:
        self.config, self.folder, self.device = config, Path(folder), device
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._status = JobStatus(0.0, "waiting for a free training slot")
        self._snapshots: dict[int, np.ndarray] = {}
        self._thread = threading.Thread(target=self._work, name=f"filterlens-train-{self.folder.name}", daemon=True)

    def start(self) -> TrainingJob:
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Ask the run to stop after the current step (what it has done so far is saved)."""
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> JobStatus:
        self._thread.join(timeout)
        return self.status()

    def status(self) -> JobStatus:
        with self._lock:
            return JobStatus(**{**self._status.__dict__, "snapshots": dict(self._snapshots)})

    def _update(self, **changes) -> None:
        with self._lock:
            self._status = JobStatus(**{**self._status.__dict__, **changes})

    def _progress(self, fraction: float, message: str) -> None:
        self._update(fraction=fraction, message=message)

    def _snapshot(self, step: int, weights: np.ndarray) -> None:
        with self._lock:
            self._snapshots[step] = weights

    def _work(self) -> None:
        while not _SLOTS.acquire(timeout=0.5):
            if self._cancel.is_set():
                self._update(state="cancelled", message="cancelled before it started")
                return
        try:
            self._update(state="running", message="cutting crops and computing the patch PCA")
            inputs = run_inputs(resolve_config(self.config))  # cached: train_run below reuses it
            self._update(pca=inputs.pca, reference_pca=inputs.reference_pca)
            run = train_run(self.config, self.folder, device=self.device, progress=self._progress,
                            should_stop=self._cancel.is_set, on_snapshot=self._snapshot)
            self._update(state="cancelled" if run.history.stopped_early else "done", run=run, fraction=1.0,
                         message=f"saved to {run.path}")
        except FilterLensError as err:
            self._update(state="failed", error=str(err))
        except Exception as err:  # the server must keep serving; details go to the log
            log.exception("training run failed")
            self._update(state="failed", error=f"The run failed ({type(err).__name__}: {err}). Details are in the "
                                               "server log.")
        finally:
            _SLOTS.release()

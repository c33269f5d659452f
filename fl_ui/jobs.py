"""The dashboard's heavy jobs, run in worker processes (:mod:`fl_ui.pool`).

Each ``*_job`` function is what one worker runs: it loads its models through
:func:`~fl_ui.pool.worker_model` (specs and settings cross the process boundary, not models) and returns a
frozen result. The light ones also run in the server's own threads, given the app's model cache as ``load``.
:class:`TrainingJob` follows a Training Lab run with its live snapshots and a graceful cancel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fl_core.backend import Progress
from fl_core.channelaxes.analysis import ChannelAxesResult, ChannelSettings, analyze_channels
from fl_core.channelaxes.calibration import channel_data
from fl_core.firstlayer.energy import EnergyResult, EnergySettings, analyze_energy
from fl_core.firstlayer.patches import PatchPCA
from fl_core.firstlayer.whitening import WhiteningResult, WhiteningSettings, analyze_whitening
from fl_core.io.images import open_images
from fl_core.io.models import LoadedModel
from fl_core.lab.runs import Run, RunSettings, resolve_config, run_inputs, train_run
from fl_core.masterkeys.layersweep import LayerSweepResult, LayerSweepSettings, sweep_layers
from fl_core.masterkeys.recovery import RecoverySettings
from fl_core.masterkeys.rescore import RescoreResult, RescoreSettings, rescore
from fl_core.report.build import Report, ReportSettings, build_report
from fl_core.report.series import load_series
from fl_ui.pool import Job, heavy_pool, publish, stop_requested, worker_model

ModelKeys = tuple[tuple[str, tuple], ...]
"""``(spec, overrides)`` pairs: the models of a job, as the sidebar selects them."""
ModelLoader = Callable[..., LoadedModel]
"""``load(spec, overrides=())``: :func:`~fl_ui.pool.worker_model` in a worker, the app's shared cache
in-thread."""


def energy_job(models: ModelKeys, images: str, settings: EnergySettings, subtract_init: bool, device: str,
               progress: Progress | None = None, load: ModelLoader = worker_model) -> EnergyResult:
    """:func:`fl_core.firstlayer.energy.analyze_energy` of ``(spec, overrides)`` pairs (``subtract_init``: each model's
    own initialization checkpoint, which demo models know)."""
    loaded = [load(spec, overrides) for spec, overrides in models]
    inits = {m.spec: load(m.init_spec) for m in loaded if subtract_init and m.init_spec}
    return analyze_energy(loaded, open_images(images), settings, inits=inits, device=device, progress=progress)


def whitening_job(models: ModelKeys, images: str, settings: WhiteningSettings, device: str,
                  progress: Progress | None = None, load: ModelLoader = worker_model) -> WhiteningResult:
    """:func:`fl_core.firstlayer.whitening.analyze_whitening` of ``(spec, overrides)`` pairs."""
    loaded = [load(spec, overrides) for spec, overrides in models]
    return analyze_whitening(loaded, open_images(images), settings, device=device, progress=progress)


def channel_axes_job(spec: str, overrides: tuple, source: str, n_calibration: int, n_evaluation: int,
                     settings: ChannelSettings, compare_init: bool, device: str,
                     progress: Progress | None = None) -> ChannelAxesResult:
    """:func:`fl_core.channelaxes.analysis.analyze_channels` on ``n_calibration`` / ``n_evaluation`` images of
    ``source``, split with the settings' seed (``compare_init``: against the model's initialization checkpoint)."""
    loaded = worker_model(spec, overrides)
    init = worker_model(loaded.init_spec) if compare_init and loaded.init_spec else None
    data = channel_data(loaded, source, n_calibration, n_evaluation, seed=settings.axes.seed)
    return analyze_channels(loaded, data, settings, init=init, device=device, progress=progress)


def rescore_job(spec: str, overrides: tuple, images: str, max_images: int, replacements: Sequence[str],
                stages: tuple[int, ...] | None, k: int, seed: int, batch_size: int, device: str,
                recovery: RecoverySettings | None = None, progress: Progress | None = None) -> RescoreResult:
    """:func:`fl_core.masterkeys.rescore.rescore` of the original and each swap of its depthwise filters (each recovered
    on a calibration split first, with ``recovery``)."""
    settings = RescoreSettings(replacements=tuple(replacements), stages=stages, k=k, seed=seed,
                               batch_size=batch_size, recovery=recovery)
    return rescore(worker_model(spec, overrides), open_images(images, max_images), settings, device=device,
                   progress=progress)


def layer_sweep_job(spec: str, overrides: tuple, images: str, max_images: int, replacement: str,
                    stages: tuple[int, ...] | None, k: int, seed: int, batch_size: int, device: str,
                    recovery: RecoverySettings | None = None, progress: Progress | None = None) -> LayerSweepResult:
    """:func:`fl_core.masterkeys.layersweep.sweep_layers`: each depthwise layer of the chosen stages swapped alone and
    zeroed alone."""
    settings = LayerSweepSettings(replacement=replacement, stages=stages, k=k, seed=seed, batch_size=batch_size,
                                  recovery=recovery)
    return sweep_layers(worker_model(spec, overrides), open_images(images, max_images), settings, device=device,
                        progress=progress)


def report_job(models: ModelKeys, stamps: tuple[str, ...], settings: ReportSettings, device: str,
               progress: Progress | None = None) -> Report:
    """:func:`fl_core.report.build.build_report` of the checkpoints that ``(spec, overrides)`` pairs name, in order
    (folders and Training Lab runs expand into theirs: :func:`fl_core.report.series.load_series`).

    ``stamps`` (:func:`fl_core.report.series.series_stamp` of each spec) only key the page's cache: an edited checkpoint
    or a checkpoint added to a folder gives a new report.
    """
    loaded = [m for spec, overrides in models for m in load_series([spec], overrides, load=worker_model)]
    return build_report(loaded, settings=settings, device=device, progress=progress)


def training_job(config: RunSettings, folder: str, device, progress: Progress | None = None) -> Run:
    """Train one run into ``folder``, publishing its patch PCAs and every snapshot as it is taken."""
    inputs = run_inputs(resolve_config(config))  # cached: train_run below reuses it
    publish("pca", (inputs.pca, inputs.reference_pca))
    snapshots: dict[int, np.ndarray] = {}

    def on_snapshot(step: int, weights: np.ndarray) -> None:
        snapshots[step] = weights
        publish("snapshots", snapshots)

    return train_run(config, folder, device=device, progress=progress, should_stop=stop_requested,
                     on_snapshot=on_snapshot)


@dataclass(frozen=True)
class JobStatus:
    """A consistent copy of a training job's state for display.

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
    """Train ``config`` into ``folder`` in a heavy-job worker; poll :meth:`status`, stop with :meth:`cancel`
    (the run stops at its next logging interval, within a second, and keeps what it trained)."""

    def __init__(self, config: RunSettings, folder: str | Path, device=None) -> None:
        self.config, self.folder, self.device = config, Path(folder), device
        self._job: Job | None = None
        self._run: Run | None = None

    def start(self) -> TrainingJob:
        self._job = heavy_pool().submit(training_job, self.config, str(self.folder), self.device, graceful=True)
        return self

    def cancel(self) -> None:
        self._job.cancel()

    def wait(self, timeout: float | None = None) -> JobStatus:
        self._job.join(timeout)
        return self.status()

    def status(self) -> JobStatus:
        state = self._job.status()
        if state.state == "queued":
            return JobStatus(0.0, state.message + (f" ({state.position} in the queue)" if state.position else ""))
        if state.state != "done":
            pca, reference = self._job.published("pca", (None, None))
            return JobStatus(state.fraction, state.message, self._job.published("snapshots", {}), pca, reference,
                             state.state if state.finished else "running", error=state.error)
        if self._run is None:
            self._run = self._job.result()
        run = self._run
        return JobStatus(1.0, f"saved to {run.path}", dict(run.snapshots), run.pca, run.reference_pca,
                         state="cancelled" if run.history.stopped_early else "done", run=run)

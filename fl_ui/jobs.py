"""The dashboard's heavy jobs, run on the engine's workers (:mod:`fl_ui.engine`).

Each ``*_job`` function is what one worker runs, given one frozen **request** (a ``*Request`` dataclass: the models
as ``(spec, overrides)`` pairs, the data, the family's settings object and the device; it is also the page's cache
key). It loads its models through :func:`~fl_ui.worker.worker_model` (specs and settings cross to the worker, not
models), says which stage runs from its first second (:data:`LOADING`, then the analysis's own reports) and returns a
frozen result. The light ones also run in the server's own threads, given the app's model cache
as ``load``. :class:`TrainingJob` follows a Training Lab run with its live snapshots and a graceful cancel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fl_core.channelaxes.analysis import ChannelAxesResult, analyze_channels
from fl_core.channelaxes.calibration import ChannelData, channel_data
from fl_core.channelaxes.pruning import NetworkPruningResult
from fl_core.channelaxes.settings import ChannelSettings
from fl_core.channelaxes.sweep import prune_layers
from fl_core.channelaxes.training import AxesTrajectory
from fl_core.compute.progress import Progress, report
from fl_core.firstlayer.energy import EnergyResult, analyze_energy
from fl_core.firstlayer.patches import PatchPCA
from fl_core.firstlayer.settings import EnergySettings, WhiteningSettings
from fl_core.firstlayer.whitening import WhiteningResult, analyze_whitening
from fl_core.io.images import open_images
from fl_core.io.models import LoadedModel
from fl_core.lab.runs import Run, check_run_budget, resolve_config, run_inputs, train_run
from fl_core.lab.settings import RunSettings
from fl_core.masterkeys.layersweep import LayerSweepResult, sweep_layers
from fl_core.masterkeys.rescore import RescoreResult, analyze_rescore
from fl_core.masterkeys.settings import LayerSweepSettings, RescoreSettings
from fl_core.report.build import Report, build_report
from fl_core.report.series import load_series
from fl_core.report.settings import ReportSettings
from fl_core.survey.analysis import SurveyRow, survey_row
from fl_core.survey.settings import SurveySettings
from fl_ui.engine import Job, Lane, heavy_engine
from fl_ui.worker import current_worker, publish, stop_requested, worker_model

ModelKeys = tuple[tuple[str, tuple], ...]
"""``(spec, overrides)`` pairs: the models of a job, as the sidebar selects them."""
ModelLoader = Callable[..., LoadedModel]
"""``load(spec, overrides=())``: :func:`~fl_ui.worker.worker_model` in a worker, the app's shared cache
in-thread."""
LOADING = "loading the model and the images"
"""A job's first stage, before its analysis reports."""


@dataclass(frozen=True)
class EnergyRequest:
    """Energy profiles of ``models`` on ``images`` (``subtract_init``: each model's own initialization checkpoint,
    which demo models know)."""

    models: ModelKeys
    images: str
    settings: EnergySettings
    subtract_init: bool
    device: str


@dataclass(frozen=True)
class WhiteningRequest:
    """Whitening curves of ``models`` on ``images``."""

    models: ModelKeys
    images: str
    settings: WhiteningSettings
    device: str


@dataclass(frozen=True)
class ChannelAxesRequest:
    """One layer's channel analysis on ``n_calibration`` / ``n_evaluation`` images of ``source`` (``compare_init``:
    against the model's initialization checkpoint)."""

    spec: str
    overrides: tuple
    source: str
    n_calibration: int
    n_evaluation: int
    settings: ChannelSettings
    compare_init: bool
    device: str


@dataclass(frozen=True)
class NetworkPruningRequest:
    """``layers`` of ``spec`` pruned together to the FLOPs targets of ``settings.pruning``, each ranked by its two axes
    measured on ``n_calibration`` images of ``source`` and scored on ``n_evaluation`` held-out ones."""

    spec: str
    overrides: tuple
    source: str
    n_calibration: int
    n_evaluation: int
    layers: tuple[str, ...]
    settings: ChannelSettings
    device: str


@dataclass(frozen=True)
class ScoringRequest:
    """The depthwise filters of ``spec`` swapped and scored on at most ``max_images`` of ``images``, as ``settings``
    say: a :class:`~fl_core.masterkeys.rescore.RescoreSettings` (every chosen layer at once, one variant per
    replacement) or a :class:`~fl_core.masterkeys.layersweep.LayerSweepSettings` (each layer alone)."""

    spec: str
    overrides: tuple
    images: str
    max_images: int
    settings: RescoreSettings | LayerSweepSettings
    device: str


@dataclass(frozen=True)
class ReportRequest:
    """The report of the checkpoints that ``models`` name, in order (folders and Training Lab runs expand into
    theirs: :func:`fl_core.report.series.load_series`). ``stamps``
    (:func:`fl_core.report.series.series_stamp` of each spec) only key the page's cache: an edited checkpoint or a
    checkpoint added to a folder gives a new report."""

    models: ModelKeys
    stamps: tuple[str, ...]
    settings: ReportSettings
    device: str


@dataclass(frozen=True)
class TrainingRequest:
    """One Training Lab run of ``config`` saved into ``folder``."""

    config: RunSettings
    folder: str
    device: str | None


@dataclass(frozen=True)
class SurveyRowRequest:
    """One model's row of a survey."""

    spec: str
    settings: SurveySettings
    device: str


def energy_job(request: EnergyRequest, progress: Progress | None = None,
               load: ModelLoader = worker_model) -> EnergyResult:
    """:func:`fl_core.firstlayer.energy.analyze_energy` of the request's models."""
    report(progress, 0.0, LOADING)
    loaded = [load(spec, overrides) for spec, overrides in request.models]
    inits = {m.spec: load(m.init_spec) for m in loaded if request.subtract_init and m.init_spec}
    return analyze_energy(loaded, open_images(request.images), request.settings, inits=inits, device=request.device,
                          progress=progress)


def whitening_job(request: WhiteningRequest, progress: Progress | None = None,
                  load: ModelLoader = worker_model) -> WhiteningResult:
    """:func:`fl_core.firstlayer.whitening.analyze_whitening` of the request's models."""
    report(progress, 0.0, LOADING)
    loaded = [load(spec, overrides) for spec, overrides in request.models]
    return analyze_whitening(loaded, open_images(request.images), request.settings, device=request.device,
                             progress=progress)


def channel_inputs(request: ChannelAxesRequest | NetworkPruningRequest, progress: Progress | None
                   ) -> tuple[LoadedModel, ChannelData]:
    """The request's model (this worker's copy) and its images split into calibration and evaluation sets with the
    settings' seed."""
    report(progress, 0.0, LOADING)
    loaded = worker_model(request.spec, request.overrides)
    return loaded, channel_data(loaded, request.source, request.n_calibration, request.n_evaluation,
                                seed=request.settings.axes.seed)


def channel_axes_job(request: ChannelAxesRequest, progress: Progress | None = None) -> ChannelAxesResult:
    """:func:`fl_core.channelaxes.analysis.analyze_channels` of :func:`channel_inputs`."""
    loaded, data = channel_inputs(request, progress)
    init = worker_model(loaded.init_spec) if request.compare_init and loaded.init_spec else None
    return analyze_channels(loaded, data, request.settings, init=init, device=request.device, progress=progress)


def network_pruning_job(request: NetworkPruningRequest, progress: Progress | None = None) -> NetworkPruningResult:
    """:func:`fl_core.channelaxes.sweep.prune_layers` of the request's layers on :func:`channel_inputs`."""
    loaded, data = channel_inputs(request, progress)
    return prune_layers(loaded, data, request.settings, layers=request.layers, device=request.device,
                        progress=progress)


def rescore_job(request: ScoringRequest, progress: Progress | None = None) -> RescoreResult:
    """:func:`fl_core.masterkeys.rescore.rescore` of the original and each swap of its depthwise filters (each recovered
    on a calibration split first, when the settings ask)."""
    report(progress, 0.0, LOADING)
    return analyze_rescore(worker_model(request.spec, request.overrides),
                           open_images(request.images, request.max_images), request.settings, device=request.device,
                           progress=progress)


def layer_sweep_job(request: ScoringRequest, progress: Progress | None = None) -> LayerSweepResult:
    """:func:`fl_core.masterkeys.layersweep.sweep_layers`: each depthwise layer swapped alone and zeroed alone."""
    report(progress, 0.0, LOADING)
    return sweep_layers(worker_model(request.spec, request.overrides),
                        open_images(request.images, request.max_images), request.settings, device=request.device,
                        progress=progress)


def report_job(request: ReportRequest, progress: Progress | None = None) -> Report:
    """:func:`fl_core.report.build.build_report` of the request's checkpoints."""
    report(progress, 0.0, LOADING)
    loaded = [m for spec, overrides in request.models for m in load_series([spec], overrides, load=worker_model)]
    return build_report(loaded, settings=request.settings, device=request.device, progress=progress)


def survey_row_job(request: SurveyRowRequest, progress: Progress | None = None) -> SurveyRow:
    """:func:`fl_core.survey.analysis.survey_row` of one model, with the worker that computed it."""
    report(progress, 0.0, LOADING)
    row = survey_row(request.spec, request.settings, device=request.device, load=worker_model)
    return replace(row, worker=current_worker())


def training_job(request: TrainingRequest, progress: Progress | None = None) -> Run:
    """Train one run into its folder, publishing its patch PCAs, every snapshot as it is taken and, when the run
    follows a layer's channel axes, the axes measured so far."""
    report(progress, 0.0, "cutting crops and computing the patch PCA")
    inputs = run_inputs(resolve_config(request.config))  # cached: train_run below reuses it
    publish("pca", (inputs.pca, inputs.reference_pca))
    snapshots: dict[int, np.ndarray] = {}

    def on_snapshot(step: int, weights: np.ndarray) -> None:
        snapshots[step] = weights
        publish("snapshots", snapshots)

    def on_axes(trajectory: AxesTrajectory) -> None:
        publish("axes", trajectory)

    return train_run(request.config, request.folder, device=request.device, progress=progress,
                     should_stop=stop_requested, on_snapshot=on_snapshot, on_axes=on_axes)


@dataclass(frozen=True)
class JobStatus:
    """A consistent copy of a training job's state for display.

    Attributes:
        fraction, message: progress.
        snapshots: step -> first-layer weights taken so far (step 0 = init).
        pca: the patch PCA of the run's inputs, once known (for live profiles).
        reference_pca: App. D.2: the unmodified PCA.
        axes: the followed layer's channel axes at the snapshots measured so far (``None``: none yet, or not followed).
        state: ``queued``, ``running``, ``done``, ``cancelled`` or ``failed``.
        run: the saved run when done (or cancelled after it started).
        error: the message for the user when failed.
    """

    fraction: float
    message: str
    snapshots: dict[int, np.ndarray] = field(default_factory=dict)
    pca: PatchPCA | None = None
    reference_pca: PatchPCA | None = None
    axes: AxesTrajectory | None = None
    state: str = "queued"
    run: Run | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("done", "cancelled", "failed")


class TrainingJob:
    """Train ``config`` into ``folder`` on an engine worker, in the long lane; poll :meth:`status`, stop with
    :meth:`cancel` (the run stops at its next logging interval, within a second, and keeps what it trained)."""

    def __init__(self, config: RunSettings, folder: str | Path, device=None) -> None:
        self.config, self.folder, self.device = config, Path(folder), device
        self._job: Job | None = None
        self._run: Run | None = None

    def start(self) -> TrainingJob:
        """Submit the run, refused here when it is over a budget (:func:`fl_core.lab.runs.check_run_budget`, which the
        worker's :func:`~fl_core.lab.runs.train_run` asks again) or the session's job limit."""
        check_run_budget(self.config)
        self._job = heavy_engine().submit(training_job, TrainingRequest(self.config, str(self.folder), self.device),
                                          graceful=True, device=self.device, lane=Lane.LONG)
        return self

    def cancel(self) -> None:
        self._job.cancel()

    def wait(self, timeout: float | None = None) -> JobStatus:
        self._job.join(timeout)
        return self.status()

    def status(self) -> JobStatus:
        state = self._job.status()
        if state.state == "queued":
            return JobStatus(0.0, state.message)
        if state.state != "done":
            pca, reference = self._job.published("pca", (None, None))
            return JobStatus(state.fraction, state.message, self._job.published("snapshots", {}), pca, reference,
                             self._job.published("axes", None), state.state if state.finished else "running",
                             error=state.error)
        if self._run is None:
            self._run = self._job.result()
        run = self._run
        steps, planned = (run.history.steps[-1] if run.history.steps else 0), run.config.train.steps
        stopped = run.history.stopped_early
        message = f"stopped at step {steps} of {planned}, saved" if stopped else f"{planned} steps, saved"
        return JobStatus(steps / planned if stopped else 1.0, message, dict(run.snapshots), run.pca,
                         run.reference_pca, run.channel_axes, state="cancelled" if stopped else "done", run=run)

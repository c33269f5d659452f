"""A layer's channel axes over a saved Training Lab run, measured again from its checkpoints (what ``python -m fl_core
channels --model weights:RUN_DIR`` prints): the same images, settings and estimators as the run used while training
(:mod:`fl_core.channelaxes.training`), so the rows equal those stored in its ``run.json``."""

from __future__ import annotations

from pathlib import Path

from fl_core.channelaxes.training import AxesTrajectory, snapshot_axes, training_axes_settings
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import DataError
from fl_core.io.checkpoints import load_state_dict
from fl_core.lab.runs import CHECKPOINTS, Run, axes_data, build_run_model, check_axes_layer, load_run, run_inputs


def is_run_folder(folder: str | Path) -> bool:
    """Whether ``folder`` is a Training Lab run folder (it holds ``run.json``)."""
    return (Path(folder) / "run.json").is_file()


def run_checkpoints(run: Run) -> dict[int, Path]:
    """``{step: checkpoint}`` of a run: its ``checkpoints/`` folder (every snapshot, runs that followed a layer's axes),
    else its ``init`` and ``final`` checkpoints.

    Raises:
        DataError: the run kept no full checkpoints.
    """
    folder = Path(run.path)
    saved = sorted((folder / CHECKPOINTS).glob("step_*.safetensors"))
    if saved:
        return {int(path.stem.removeprefix("step_")): path for path in saved}
    ends = {0: run.checkpoint("init"), run.provenance.get("trained_steps", run.config.train.steps):
            run.checkpoint("final")}
    if any(path is None for path in ends.values()):
        raise DataError(f"Run {run.name} kept no full checkpoints (trained with --no-checkpoints): train it again "
                        "with --channel-axes LAYER to measure a layer's axes at every snapshot.")
    return ends


def run_axes(folder: str | Path, layer: str | None = None, *, device: DeviceLike = None,
             progress: ProgressLike = None) -> AxesTrajectory:
    """``layer``'s axes (default: the one the run followed) at every checkpoint of a run folder, on the run's
    validation crops with its own settings (:func:`~fl_core.channelaxes.training.snapshot_axes`).

    Args:
        folder: a run folder (``run.json``; :func:`run_checkpoints` says which checkpoints it reads).
        layer: a convolution of the run's network.
        device: where to measure.
        progress: ``progress(fraction, message)``.

    Raises:
        DataError: not a readable run folder, no full checkpoints, or no layer given for a run that followed none.
        ModelSpecError: ``layer`` is not a convolution of the run's network.
    """
    device, progress = resolve_device(device), progress_callback(progress)
    run = load_run(folder)
    layer = layer or run.config.channel_axes
    if not layer:
        raise DataError(f"Run {run.name} followed no layer's axes: name one with --layer.")
    checkpoints = run_checkpoints(run)
    report(progress, 0.0, f"{run.name}: cutting its crops")
    inputs = run_inputs(run.config)
    model, _, _ = build_run_model(run.config, len(run.classes))
    check_axes_layer(model, layer)
    data = axes_data(run.config, inputs)
    settings = training_axes_settings(run.config.axes_bootstrap, run.config.train.seed)
    trajectory = AxesTrajectory(layer, (), data.description, settings.axes.bootstrap, settings.axes.seed)
    for i, (step, path) in enumerate(sorted(checkpoints.items())):
        model.load_state_dict(load_state_dict(path).tensors)
        part = sub_progress(progress, i / len(checkpoints), (i + 1) / len(checkpoints))
        trajectory = trajectory.with_snapshot(snapshot_axes(model, layer, data, settings, step=step, device=device,
                                                            progress=part))
    report(progress, 1.0, "done")
    return trajectory

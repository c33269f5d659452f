"""A layer's channel axes over saved training, measured again from its checkpoints:

* a Training Lab run (``python -m fl_core channels --model weights:RUN_DIR``, :func:`run_axes`): the same images,
  settings and estimators as the run used while training (:mod:`fl_core.channelaxes.training`), so the rows equal
  those stored in its ``run.json``;
* a plain folder of one run's checkpoints with its architecture (``--model cifar:resnet20=DIR``, ``timm:NAME=DIR``,
  ``torchvision:NAME=DIR``, :func:`folder_axes`): every checkpoint in training order
  (:mod:`fl_core.report.series`), measured by the same :func:`~fl_core.channelaxes.training.snapshot_axes` on one set
  of labelled images.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from fl_core.channelaxes.calibration import ChannelData, channel_data, is_crops, photo_class_mapping
from fl_core.channelaxes.settings import ChannelDataSettings, ChannelSettings
from fl_core.channelaxes.training import AxesTrajectory, snapshot_axes, training_axes_settings
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import DataError, ModelSpecError
from fl_core.io.checkpoints import load_state_dict
from fl_core.io.models import LoadedModel, load_model
from fl_core.io.specs import ARCHITECTURE_SOURCES, ModelSpec
from fl_core.lab.runs import CHECKPOINTS, Run, axes_data, build_run_model, check_axes_layer, load_run, run_inputs
from fl_core.report.series import checkpoint_files, folder_of, recorded_order, series_steps


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


def checkpoint_folder(spec: str) -> Path | None:
    """The folder of an ``ARCH=DIR`` spec (``cifar:resnet20=DIR``, ``timm:NAME=DIR``, ``torchvision:NAME=DIR``): a
    folder of one run's checkpoints (``None`` for any other spec or a file)."""
    return folder_of(spec, ARCHITECTURE_SOURCES)


def folder_axes(spec: str, layer: str | None = None, data: ChannelDataSettings | None = None,
                settings: ChannelSettings | None = None, *, input_overrides: Mapping[str, object] | None = None,
                device: DeviceLike = None, progress: ProgressLike = None) -> AxesTrajectory:
    """``layer``'s axes at every checkpoint of a folder of one training run, ``ARCH=DIR``: each checkpoint loaded with
    the architecture and measured by :func:`~fl_core.channelaxes.training.snapshot_axes` on the same labelled
    calibration images, at the epoch or step every checkpoint records, else at its index in the folder's natural
    order (:func:`~fl_core.report.series.series_steps`).

    Args:
        spec: ``cifar:NAME=DIR``, ``timm:NAME=DIR`` or ``torchvision:NAME=DIR``.
        layer: a convolution of the network (default: the model's default layer).
        data: the labelled images (``source``, ``n_calibration`` of them measured; labels of the model's classes;
            default: :class:`~fl_core.channelaxes.settings.ChannelDataSettings`'s).
        settings: the estimators' settings (default: the page's, :class:`~fl_core.channelaxes.settings.
            ChannelSettings`).
        input_overrides: preprocessing overrides of every checkpoint (:func:`~fl_core.io.models.load_model`).
        device: where to measure.
        progress: ``progress(fraction, message)``.

    Raises:
        ModelSpecError: not an ``ARCH=DIR`` spec, a folder without checkpoint files, or ``layer`` not a convolution.
        DataError: the folder is outside what users may read, or the images are not labelled with the model's
            classes.
    """
    from fl_core.channelaxes.analysis import resolve_layers

    device, progress = resolve_device(device), progress_callback(progress)
    folder = checkpoint_folder(spec)
    if folder is None:
        raise ModelSpecError(f"{spec} is not a folder of checkpoints with its architecture: give ARCH=DIR "
                             "(cifar:resnet20=DIR, timm:NAME=DIR or torchvision:NAME=DIR).")
    data, settings = data or ChannelDataSettings(), settings or ChannelSettings()
    parsed, files = ModelSpec.parse(spec), checkpoint_files(folder)
    snapshots, recorded, measured = [], [], None
    for i, path in enumerate(files):
        report(progress, i / len(files), f"{path.name} ({i + 1} of {len(files)})")
        loaded = load_model(str(dataclasses.replace(parsed, path=str(path))), input_overrides=input_overrides)
        recorded.append(recorded_order(path))
        if measured is None:
            layer = resolve_layers(loaded, [layer])[0].name
            measured = series_data(loaded, data)
        step = i if recorded[-1] is None else recorded[-1]
        part = sub_progress(progress, i / len(files), (i + 1) / len(files))
        snapshots.append(snapshot_axes(loaded.model, layer, measured, settings, step=step, device=device,
                                       progress=part))
    ordered = sorted(zip(series_steps(recorded), snapshots), key=lambda item: item[0])
    report(progress, 1.0, "done")
    return AxesTrajectory(layer, tuple(dataclasses.replace(s, step=step) for step, s in ordered),
                          f"{measured.description}; {len(files)} checkpoints of {folder.name}",
                          settings.axes.bootstrap, settings.axes.seed)


def series_data(loaded: LoadedModel, data: ChannelDataSettings) -> ChannelData:
    """The labelled images a folder's checkpoints are measured on (:func:`~fl_core.channelaxes.calibration.
    channel_data` with ``loaded``'s head), refusing crops labelled by the network's own decisions: those labels
    would change from checkpoint to checkpoint.

    Raises:
        DataError: the images are the bundled crops and the model's head has none of their classes.
    """
    if is_crops(data.source) and photo_class_mapping(loaded) is None:
        raise DataError(f"The bundled crops are not among {loaded.label}'s {loaded.num_classes} classes, so each crop "
                        "would be labelled by each checkpoint's own decision, which changes over training. Give images "
                        "labelled with the model's classes: --data cifar10:PATH (CIFAR networks) or an ImageFolder "
                        "tree.")
    return channel_data(loaded, data.source, data.n_calibration, data.n_evaluation, data.seed)

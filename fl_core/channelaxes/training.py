"""One layer's channel axes followed over training: the paper's claims 1, 2 and 5 live (docs/methods.md, "The axes
over training").

At every snapshot of a training run (a Training Lab run, ``python -m fl_core train --channel-axes LAYER``) or of a
folder of its checkpoints (``python -m fl_core channels --model weights:RUN_DIR``), :func:`snapshot_axes` measures on
the same N analysis images, with the Channel Axes estimators themselves (:func:`~.analysis.layers_axes`,
:func:`~.axes.layer_intervals`, :func:`~.axes.compare_axes`):

* ρ(I_X, I(ā; m)) and the ARI of the axes' groupings, with bootstrap intervals over the images (claims 1, 2);
* the share of channels whose task information is measurable (permutation p < 0.05) and the noise floor;
* claim 5: the cosines of the update −∇_W L of the layer's filters with the gradients of total input capture and of
  total task information (:mod:`fl_core.channelaxes.gradients`), with intervals from the same resamples.

Each snapshot is measured on a private copy of the network in eval mode whose BatchNorm running statistics are
re-estimated on the analysis images first (:func:`~.initialization.recalibrate_batchnorm`): the running averages lag
the weights early in training (at step 0 they are 0 and 1), the batch statistics training uses do not.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch
from torch import nn

from fl_core.channelaxes.analysis import layers_axes
from fl_core.channelaxes.axes import compare_axes, interval_of, layer_intervals
from fl_core.channelaxes.calibration import ChannelData, LabelledInputs
from fl_core.channelaxes.gradients import COSINES, gradient_pieces
from fl_core.channelaxes.initialization import recalibrate_batchnorm
from fl_core.channelaxes.settings import AxisSettings, ChannelSettings
from fl_core.channelaxes.significance import bootstrap
from fl_core.compute.device import cpu_layout
from fl_core.compute.progress import Progress, report
from fl_core.io.checkpoints import save_state_dict
from fl_core.results import Result, jsonable

if TYPE_CHECKING:
    from fl_core.channelaxes.claims import ClaimsTable


def training_axes_settings(bootstrap_resamples: int, seed: int = 0) -> ChannelSettings:
    """The Channel Axes settings of the axes over training: the page's defaults without lesions or pruning,
    ``bootstrap_resamples`` resamples of the images."""
    return ChannelSettings(lesion_kinds=(), pruning=None, axes=AxisSettings(bootstrap=bootstrap_resamples, seed=seed))


@dataclass(frozen=True)
class AxesSnapshot(Result):
    """One layer's axes at one step of training (module docstring).

    Attributes:
        step: the SGD step (0 = initialization).
        spearman, spearman_ci: ρ(I_X, I(ā; m)) and its bootstrap interval over the images.
        ari, ari_ci: the ARI of the axes' k-means groupings and its interval (NaN: too few channels).
        significant_share: fraction of channels whose task information has permutation p < 0.05.
        noise_floor: the task information's expectation under independence on these images (nats).
        mean_task_info: the channels' mean task information (nats).
        cosines: ``{name: value}`` of :data:`~fl_core.channelaxes.gradients.COSINES` (claim 5).
        cosines_ci: ``{name: [low, high]}`` their bootstrap intervals.
        loss, accuracy: the network on the analysis images.
        n_images: N.
        seconds: time to measure the snapshot.
    """

    step: int
    spearman: float
    spearman_ci: list[float] | None
    ari: float
    ari_ci: list[float] | None
    significant_share: float
    noise_floor: float
    mean_task_info: float
    cosines: dict[str, float]
    cosines_ci: dict[str, list[float] | None]
    loss: float
    accuracy: float
    n_images: int
    seconds: float = 0.0

    def row(self) -> dict:
        """A flat row: every field, intervals as ``*_low`` / ``*_high`` (:meth:`AxesTrajectory.to_frame`)."""
        out = {"step": self.step, "spearman": self.spearman, **_bounds("spearman", self.spearman_ci),
               "ari": self.ari, **_bounds("ari", self.ari_ci), "significant_share": self.significant_share,
               "noise_floor": self.noise_floor, "mean_task_info": self.mean_task_info}
        for name in COSINES:
            out[name] = self.cosines.get(name, np.nan)
            out.update(_bounds(name, self.cosines_ci.get(name)))
        return out | {"loss": self.loss, "accuracy": self.accuracy, "n_images": self.n_images,
                      "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: dict) -> AxesSnapshot:
        """Read :meth:`to_dict` (a run folder's ``run.json``); JSON's ``null`` back to NaN."""

        def number(value) -> float:
            return float("nan") if value is None else float(value)

        return cls(step=int(data["step"]), spearman=number(data["spearman"]), spearman_ci=data.get("spearman_ci"),
                   ari=number(data["ari"]), ari_ci=data.get("ari_ci"),
                   significant_share=number(data["significant_share"]), noise_floor=number(data["noise_floor"]),
                   mean_task_info=number(data["mean_task_info"]),
                   cosines={k: number(v) for k, v in data["cosines"].items()},
                   cosines_ci=dict(data.get("cosines_ci") or {}), loss=number(data["loss"]),
                   accuracy=number(data["accuracy"]), n_images=int(data["n_images"]),
                   seconds=number(data.get("seconds", 0.0)))


def _bounds(name: str, interval: list[float] | None) -> dict[str, float]:
    low, high = interval if interval else (np.nan, np.nan)
    return {f"{name}_low": np.nan if low is None else low, f"{name}_high": np.nan if high is None else high}


@dataclass(frozen=True)
class AxesTrajectory(Result):
    """One layer's axes at every snapshot of a training run (module docstring).

    Attributes:
        layer: the convolution followed.
        snapshots: one :class:`AxesSnapshot` per step, in step order.
        data: the analysis images, in words.
        bootstrap: resamples of the images behind every interval.
        seed: seed of the resamples and permutations.
    """

    layer: str
    snapshots: tuple[AxesSnapshot, ...]
    data: str
    bootstrap: int
    seed: int = 0

    _figures: ClassVar[dict[str, str]] = {"axes": "fl_core.channelaxes.plots:axes_over_training_figure"}

    def figure_inputs(self, kind: str) -> tuple:
        return (self,)

    @property
    def steps(self) -> list[int]:
        return [s.step for s in self.snapshots]

    def to_frame(self) -> pd.DataFrame:
        """One row per snapshot (:meth:`AxesSnapshot.row`)."""
        return pd.DataFrame([s.row() for s in self.snapshots])

    def to_dict(self) -> dict:
        return jsonable({"layer": self.layer, "data": self.data, "bootstrap": self.bootstrap, "seed": self.seed,
                         "snapshots": [s.to_dict() for s in self.snapshots]})

    @classmethod
    def from_dict(cls, data: dict) -> AxesTrajectory:
        return cls(layer=data["layer"], snapshots=tuple(AxesSnapshot.from_dict(s) for s in data["snapshots"]),
                   data=data["data"], bootstrap=int(data["bootstrap"]), seed=int(data.get("seed", 0)))

    def claims(self) -> ClaimsTable:
        """The two-axis paper's claims 1, 2 and 5 measured along this run
        (:func:`fl_core.channelaxes.claims.trajectory_claims`)."""
        from fl_core.channelaxes.claims import trajectory_claims

        return trajectory_claims(self)

    def with_snapshot(self, snapshot: AxesSnapshot) -> AxesTrajectory:
        """This trajectory with ``snapshot`` added (live views)."""
        return AxesTrajectory(self.layer, (*self.snapshots, snapshot), self.data, self.bootstrap, self.seed)


def analysis_data(x: torch.Tensor, y: torch.Tensor, classes: Sequence[str], description: str, seed: int = 0
                  ) -> ChannelData:
    """The analysis images of the axes over training as Channel Axes data (model input ``x``, labels ``y``)."""
    inputs = LabelledInputs(x=x, y=y)
    return ChannelData(calibration=inputs, evaluation=inputs, classes=tuple(classes), description=description,
                       seed=seed)


def snapshot_axes(model: nn.Module, layer: str, data: ChannelData, settings: ChannelSettings, *, step: int,
                  device: torch.device, progress: Progress | None = None) -> AxesSnapshot:
    """``layer``'s axes and claim-5 cosines in ``model`` at ``step`` (module docstring), on a private copy (the
    model is not changed)."""
    start = time.perf_counter()
    network = cpu_layout(copy.deepcopy(model).to(device).eval(), device)
    recalibrate_batchnorm(network, data.calibration, device, settings.batch_size)
    report(progress, 0.0, f"step {step}: the axes of {layer}")
    axes = layers_axes(network, [layer], data, settings, device, None)[0]
    intervals = layer_intervals(axes.samples(settings.axes.shrinkage), settings)
    comparison = compare_axes(axes.table, settings, intervals, axes.target.significance)
    report(progress, 0.6, f"step {step}: the gradients of {layer}'s filters")
    pieces = gradient_pieces(network, axes.site, data.calibration, device=device, batch_size=settings.batch_size)
    cosines = bootstrap(pieces.cosines, (pieces.n_images,), resamples=settings.axes.bootstrap,
                        seed=settings.axes.seed, chunk=max(1, min(100, (1 << 24) // pieces.loss[0].size)))
    significance = axes.target.significance
    return AxesSnapshot(
        step=int(step), spearman=comparison.spearman, spearman_ci=interval_of(intervals, "spearman"),
        ari=comparison.ari, ari_ci=interval_of(intervals, "ari"), significant_share=significance.significant_share,
        noise_floor=significance.null_mean, mean_task_info=float(np.mean(significance.information)),
        cosines={name: value.estimate for name, value in cosines.items()},
        cosines_ci={name: value.interval if len(value.values) else None for name, value in cosines.items()},
        loss=axes.stats.loss, accuracy=axes.stats.accuracy, n_images=axes.stats.n_images,
        seconds=time.perf_counter() - start)


@dataclass
class AxesFollower:
    """Measures one layer's axes at each snapshot of a training run (``train_classifier``'s ``at_snapshot``),
    collecting the :class:`AxesTrajectory` and handing it to ``on_axes`` after each snapshot (live views); with
    ``checkpoints``, the full network is saved there first (``step_000000.safetensors`` …, the step in the file's
    metadata), so the ``channels`` command measures the same rows again from the folder."""

    layer: str
    data: ChannelData
    settings: ChannelSettings
    device: torch.device
    on_axes: Callable[[AxesTrajectory], None] | None = None
    checkpoints: Path | None = None
    trajectory: AxesTrajectory = field(init=False)

    def __post_init__(self) -> None:
        self.trajectory = AxesTrajectory(self.layer, (), self.data.description, self.settings.axes.bootstrap,
                                         self.settings.axes.seed)

    def __call__(self, step: int, model: nn.Module) -> None:
        if self.checkpoints is not None:
            save_state_dict(model.state_dict(), self.checkpoints / f"step_{step:06d}.safetensors", {"step": str(step)})
        snapshot = snapshot_axes(model, self.layer, self.data, self.settings, step=step, device=self.device)
        self.trajectory = self.trajectory.with_snapshot(snapshot)
        if self.on_axes is not None:
            self.on_axes(self.trajectory)

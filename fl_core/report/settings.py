"""The settings of the checkpoint report and of its weight statistics (light: no torch, so the command line and the
family registry read them at once); the report's defaults are the families' own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from fl_core.firstlayer.settings import EnergySettings, WhiteningSettings
from fl_core.io.sources import BUNDLED
from fl_core.masterkeys.settings import FIT_METHODS, MasterKeySettings
from fl_core.settings import MAX_IMAGES, MAX_SEED, Settings, setting


@dataclass(frozen=True)
class WeightSettings(Settings):
    """The thresholds of the weight statistics (:func:`fl_core.report.weightstats.weight_statistics`).

    Attributes:
        dead_tolerance: a filter is dead when ‖w_k‖ ≤ dead_tolerance · max_j ‖w_j‖ of its layer.
        duplicate_r2: a live filter is a duplicate when its peers reconstruct it to R² ≥ this, and a copy when its
            |cos| with a single peer is ≥ this.
    """

    dead_tolerance: float = setting(1e-6, minimum=0.0, maximum=0.5)
    duplicate_r2: float = setting(0.999, minimum=0.5, maximum=1.0)


class WeightOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`WeightSettings`, e.g. ``weight_statistics(model, duplicate_r2=0.99)``, kept
    equal to the class by tests/test_contract.py."""

    dead_tolerance: float
    duplicate_r2: float


@dataclass(frozen=True)
class ReportSettings(Settings):
    """What a report computes (defaults here only; the CLI's arguments and the page's cache key derive from it).

    Attributes:
        images: image source of the patch statistics, whitening and (labelled trees) accuracy.
        max_images: use at most this many images (none: all).
        seeds: random-init seeds of the energy band and the whitening baseline.
        max_distance: largest whitening distance δ in pixels.
        trajectory_distance: the δ at which whitening is followed over the checkpoints (the paper quotes 10).
        k: master-key clusters.
        restarts: master-key k-means++ restarts.
        method: the scale-space fitting method of the per-key mean filters.
        channel_layer: layer of the channel-axes summary (``None``: the Channel Axes page's default).
        n_calibration: calibration images of the channel axes.
        n_evaluation: evaluation images of the channel axes.
        max_eval_images: labelled images scored for accuracy.
        seed: seed of clustering and data splits.
    """

    images: str = BUNDLED
    max_images: int | None = setting(None, minimum=1, maximum=MAX_IMAGES)
    seeds: int = setting(EnergySettings.seeds, minimum=1, maximum=1000)
    max_distance: int = setting(WhiteningSettings.max_distance, minimum=0, maximum=1024)
    trajectory_distance: int = setting(10, minimum=1, maximum=1024)
    k: int = setting(MasterKeySettings.k, minimum=1, maximum=64)
    restarts: int = setting(MasterKeySettings.restarts, minimum=1, maximum=100)
    method: str = setting("B", choices=FIT_METHODS)
    channel_layer: str | None = None
    n_calibration: int = setting(128, minimum=8, maximum=MAX_IMAGES)
    n_evaluation: int = setting(128, minimum=8, maximum=MAX_IMAGES)
    max_eval_images: int = setting(500, minimum=1, maximum=MAX_IMAGES)
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)


class ReportOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`ReportSettings`, e.g. ``build_report(model, seeds=2)``: its fields (nested ones
    by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    images: str
    max_images: int | None
    seeds: int
    max_distance: int
    trajectory_distance: int
    k: int
    restarts: int
    method: str
    channel_layer: str | None
    n_calibration: int
    n_evaluation: int
    max_eval_images: int
    seed: int

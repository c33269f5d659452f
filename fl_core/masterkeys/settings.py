"""The master-key families' settings and the names they choose from: fitting methods, replacements, k-means and
re-scoring defaults (light: no torch, so the command line and the family registry read them at once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from fl_core.settings import MAX_IMAGES, MAX_SEED, MIN_LEARNING_RATE, Settings, setting

FitMethod = Literal["A", "B", "C1", "C2", "D1", "D2"]
FIT_METHODS: tuple[str, ...] = ("A", "B", "C1", "C2", "D1", "D2")
FIT_METHOD_DESCRIPTIONS: dict[str, str] = {
    "A": "continuous variance transfer",
    "B": "matching weighted discrete spread",
    "C1": "l1 minimisation, anisotropic",
    "C2": "l1 minimisation, isotropic",
    "D1": "l2 minimisation, anisotropic",
    "D2": "l2 minimisation, isotropic",
}
REPLACEMENTS: dict[str, str] = {
    **{method: f"idealized models, method {method} ({text})" for method, text in FIT_METHOD_DESCRIPTIONS.items()},
    "centroid": "own cluster centroids (a·c + b)",
    "random": "random filters of matched norm (baseline)",
    "keep": "unchanged filters (control)",
    "zero": "zero filters (lesion control: the layer's spatial filtering removed)",
}
DEFAULT_K = 8
DEFAULT_RESTARTS = 8
MAX_ITERATIONS = 100
DEFAULT_BATCH_SIZE = 64


@dataclass(frozen=True)
class MasterKeySettings(Settings):
    """What :func:`analyze_master_keys` computes.

    Attributes:
        k: number of clusters (the papers find 8).
        restarts: independent k-means++ starts; the best (largest mean |cos|) is kept.
        max_iterations: Lloyd iterations per restart at most.
        seed: seed of the k-means++ draws and the silhouette sample.
        kernel_size: k of the k×k filters (default: the most frequent).
        layers: depthwise layer names to use (``None``: all).
        stages: stage indices to use, 0 = highest resolution (``None``: all).
        sweep: also cluster for these k and report mean |cos| and silhouette (``None``: no sweep).
        method: fitting method of the idealized templates used for kernels other than 7×7.
    """

    k: int = setting(DEFAULT_K, minimum=1, maximum=64)
    restarts: int = setting(DEFAULT_RESTARTS, minimum=1, maximum=100)
    max_iterations: int = setting(MAX_ITERATIONS, minimum=1, maximum=1000)
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)
    kernel_size: int | None = setting(None, minimum=1, maximum=64)
    layers: tuple[str, ...] | None = None
    stages: tuple[int, ...] | None = setting(None, minimum=0, maximum=64)
    sweep: tuple[int, ...] | None = setting(None, minimum=1, maximum=64)
    method: str = setting("B", choices=FIT_METHODS)


class MasterKeyOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`MasterKeySettings`, e.g. ``analyze_master_keys(model, k=8)``: its fields (nested
    ones by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    k: int
    restarts: int
    max_iterations: int
    seed: int
    kernel_size: int | None
    layers: tuple[str, ...] | list[str] | None
    stages: tuple[int, ...] | list[int] | None
    sweep: tuple[int, ...] | list[int] | None
    method: str



@dataclass(frozen=True)
class ScaleSpaceSettings(Settings):
    """How the idealized scale-space models are fitted (:func:`fl_core.masterkeys.assignment.analyze_scale_space`).

    Attributes:
        method: fitting method (A, B, C1, C2, D1, D2: docs/methods.md, "Fitting methods A–D2").
        kernel_size: of a model: k of the k×k filters (default: the most frequent).
        layers: of a model: depthwise layer names to use (``None``: all).
        stages: of a model: stage indices to use, 0 = highest resolution (``None``: all).
    """

    method: str = setting("B", choices=FIT_METHODS)
    kernel_size: int | None = setting(None, minimum=1, maximum=64)
    layers: tuple[str, ...] | None = None
    stages: tuple[int, ...] | None = setting(None, minimum=0, maximum=64)


class ScaleSpaceOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`ScaleSpaceSettings`, e.g. ``analyze_scale_space(method='D1')``: its fields
    (nested ones by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    method: str
    kernel_size: int | None
    layers: tuple[str, ...] | list[str] | None
    stages: tuple[int, ...] | list[int] | None



@dataclass(frozen=True)
class RecoverySettings(Settings):
    """The recovery protocol (module docstring).

    Attributes:
        steps: distillation steps per swapped network (0: BatchNorm recalibration only).
        calibration: images taken (at random) for calibration; the rest of the images are the held-out set.
        lr: SGD step size of the distillation (on the fixture MobileNetV2 with every depthwise layer swapped by
            method B, 10 steps at 1e-3 took held-out top-1 from 45 % to 53 %, 20 steps at 1e-2 down to 5 %).
        batch: images per distillation step (and per recalibration batch).
        recalibrate_batchnorm: re-estimate the BatchNorm statistics before distilling.
        seed: seeds the split and the distillation's batch order.
    """

    steps: int = setting(20, minimum=0, maximum=10_000, flag="recover-steps")
    calibration: int = setting(256, minimum=1, maximum=MAX_IMAGES)
    lr: float = setting(1e-3, minimum=MIN_LEARNING_RATE, maximum=10.0, flag="recover-lr")
    batch: int = setting(32, minimum=2, maximum=1024, flag="recover-batch")
    recalibrate_batchnorm: bool = setting(True, flag="batchnorm-recalibration")
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)


@dataclass(frozen=True)
class ScoringSettings(Settings):
    """How swapped variants are made and scored (what :class:`RescoreSettings` and the layer sweep's settings share).

    Attributes:
        layers: depthwise layer names to swap (``None``: all).
        stages: stage indices to swap, 0 = highest resolution (``None``: all).
        k: clusters per kernel size of the ``centroid`` replacement.
        seed: seed of the ``random`` and ``centroid`` replacements.
        recovery: recover every swap on a calibration split first (:mod:`fl_core.masterkeys.recovery`; every variant
            is then scored on the held-out rest); ``None``: score the swaps as they are.
        batch_size: images per batch.
        workers: DataLoader worker processes decoding the images (``None``: CPU cores − 1, at most 8; none for a
            single batch); threads instead inside a daemonic process (a Dask worker), which may not start any.
        share_prefix: run each variant only from its first changed module on (:mod:`fl_core.networks.partial_forward`);
            off: every variant runs the whole network (the same numbers, for timing).
    """

    layers: tuple[str, ...] | None = None
    stages: tuple[int, ...] | None = setting(None, minimum=0, maximum=64)
    k: int = setting(DEFAULT_K, minimum=1, maximum=64)
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)
    recovery: RecoverySettings | None = None
    batch_size: int = setting(DEFAULT_BATCH_SIZE, minimum=1, maximum=4096)
    workers: int | None = setting(None, minimum=0, maximum=64)
    share_prefix: bool = setting(True, flag="shared-prefix")



class ScoringOverrides(TypedDict, total=False):
    """The keyword overrides of :class:`ScoringSettings`, e.g. ``analyze_rescore(model, images, batch_size=32)``: its
    fields (nested ones by their own names; tuples also as lists), kept equal to the class by tests/test_contract.py."""

    layers: tuple[str, ...] | list[str] | None
    stages: tuple[int, ...] | list[int] | None
    k: int
    seed: int
    recovery: RecoverySettings | None
    batch_size: int
    workers: int | None
    share_prefix: bool


@dataclass(frozen=True)
class RescoreSettings(ScoringSettings):
    """What :func:`rescore` scores besides the original model.

    Attributes:
        replacements: one swap per replacement (keys of :data:`fl_core.masterkeys.swap.REPLACEMENTS`; default: the
            six idealized-model methods; empty: the original alone).
    """

    replacements: tuple[str, ...] = setting(FIT_METHODS, choices=tuple(REPLACEMENTS), flag="swap")


@dataclass(frozen=True)
class LayerSweepSettings(ScoringSettings):
    """What :func:`sweep_layers` swaps, layer by layer (the layers, stages, recovery and batching as in a re-score).

    Attributes:
        replacement: what each layer is swapped for (a key of :data:`fl_core.masterkeys.swap.REPLACEMENTS`).
    """

    replacement: str = setting("B", choices=tuple(REPLACEMENTS), flag="swap")


class RescoreOverrides(ScoringOverrides, total=False):
    """The keyword overrides of :class:`RescoreSettings` (``analyze_rescore(model, images, replacements=["B"])``)."""

    replacements: tuple[str, ...] | list[str]


class LayerSweepOverrides(ScoringOverrides, total=False):
    """The keyword overrides of :class:`LayerSweepSettings` (``sweep_layers(model, images, replacement="D1")``)."""

    replacement: str

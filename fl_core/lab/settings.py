"""The Training Lab's settings: the optimizer (:class:`TrainSettings`) and everything that defines a run
(:class:`RunSettings`), with the names they choose from (light: no torch, so the command line reads them at once)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from fl_core.errors import ModelSpecError
from fl_core.io.sources import BUNDLED, is_bundled
from fl_core.settings import (
    MAX_IMAGES,
    MAX_SEED,
    MAX_STEPS,
    MIN_LEARNING_RATE,
    Settings,
    replace_settings,
    setting,
    setting_value,
    settings_fields,
)

SMALL_NETS = ("small_vgg", "small_resnet")
"""The small CNNs of :data:`fl_core.io.nets.NETS` (a test keeps the two equal)."""
LABEL_VARIANTS = ("true", "random", "energy")
"""The label variants of :func:`fl_core.lab.trainsets.label_variant`."""
KERNELS = (3, 5, 7)
"""The first-layer kernel sizes of the small nets (a timm net keeps its own, recorded when its run starts)."""
MAX_FIRST_KERNEL = 32
"""The largest first-layer kernel a run records (the crops are 32×32)."""
DERIVED_TRAIN_FIELDS = ("eval_every", "snapshot_steps")
"""The :class:`TrainSettings` fields a run sets from its steps and snapshots (not options of a run)."""
AXES_FIELDS = ("channel_axes", "axes_bootstrap")
"""The :class:`RunSettings` fields of a layer's channel axes followed over training."""


@dataclass(frozen=True)
class TrainSettings(Settings):
    """Optimizer and schedule.

    Attributes:
        steps: SGD steps.
        batch_size: examples per step.
        lr: step size.
        momentum: SGD momentum (0 = the authors' plain SGD).
        weight_decay: L2 penalty.
        seed: seeds the batch order (a Training Lab run also initializes the network and permutes labels with it).
        eval_every: steps between validation passes.
        snapshot_steps: steps at which the first layer's weights are recorded (0 = before training).
        freeze_first: keep the first layer at its initialization.
    """

    steps: int = setting(400, minimum=1, maximum=MAX_STEPS)
    batch_size: int = setting(128, minimum=1, maximum=4096)
    lr: float = setting(0.2, minimum=MIN_LEARNING_RATE, maximum=10.0)
    momentum: float = setting(0.0, minimum=0.0, maximum=1.0)
    weight_decay: float = setting(0.0, minimum=0.0, maximum=1.0)
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)
    eval_every: int = setting(250, minimum=1, maximum=MAX_STEPS)
    snapshot_steps: tuple[int, ...] = setting((), minimum=0, maximum=MAX_STEPS)
    freeze_first: bool = False


@dataclass(frozen=True)
class RunSettings(Settings):
    """Everything that defines a run (configs as data; JSON round trip with :meth:`to_dict` / :meth:`from_dict`).

    Attributes:
        images: "bundled" (crops of the bundled photos, label = photo) or an ImageFolder tree (label = class).
        max_images: use at most this many images of a folder (spread over its classes).
        crops_per_image: training crops per image (default 600 bundled; about 6,600 in total for folders).
        arch: small_vgg, small_resnet or timm:NAME (random init, any timm net that takes 32×32 input).
        width: first-layer width K (timm nets: their own, recorded when the run starts).
        body_widths: widths of the later stages (small nets).
        first_kernel: first-layer kernel size, 3, 5 or 7 (timm nets: their own).
        labels: true, random (a permutation) or energy (App. D.1 deciles).
        label_component: 1-based PCA component of the energy labels.
        alpha: App. D.2 scale of one component of every first-layer tile (1 = unchanged input). With α ≠ 1 the
            first layer gets stride = kernel and no padding, so it sees exactly the manipulated tiles.
        alpha_component: 1-based PCA component scaled by alpha.
        train: the optimizer (plain SGD, as the authors, with its default ``momentum=0``), ``freeze_first`` and the
            ``seed``, which also initializes the network and permutes the labels. Its ``eval_every`` (about 20
            evaluations, at least 10 steps apart) and ``snapshot_steps`` are set from ``steps`` and ``snapshots``.
        snapshots: number of first-layer snapshots, log-spaced over the steps (step 0 and the last included).
        channel_axes: a convolution whose channel axes are followed at every snapshot (ρ, ARI, measurable task
            information, the claim-5 cosines: :mod:`fl_core.channelaxes.training`), on the validation crops; none: not
            followed.
        axes_bootstrap: resamples of the validation crops behind the intervals of the followed axes.
    """

    images: str = BUNDLED
    max_images: int | None = setting(None, minimum=1, maximum=MAX_IMAGES)
    crops_per_image: int | None = setting(None, minimum=1, maximum=10_000)
    arch: str = "small_vgg"
    width: int = setting(32, minimum=1, maximum=1024)
    body_widths: tuple[int, ...] = setting((32, 64), minimum=1, maximum=1024)
    first_kernel: int = setting(3, minimum=1, maximum=MAX_FIRST_KERNEL)
    labels: str = setting("true", choices=LABEL_VARIANTS)
    label_component: int = setting(15, minimum=1, maximum=3 * max(KERNELS) ** 2)
    alpha: float = setting(1.0, minimum=0.0, maximum=100.0)
    alpha_component: int = setting(4, minimum=1, maximum=3 * max(KERNELS) ** 2)
    train: TrainSettings = field(default_factory=TrainSettings)
    snapshots: int = setting(13, minimum=2, maximum=100)
    channel_axes: str | None = None
    axes_bootstrap: int = setting(200, minimum=0, maximum=10_000)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.is_timm and self.arch not in SMALL_NETS:
            raise ModelSpecError(f"Unknown architecture '{self.arch}': use {', '.join(SMALL_NETS)} or timm:NAME.")
        if not self.is_timm and self.first_kernel not in KERNELS:
            raise ModelSpecError(f"First-layer kernel {self.first_kernel}: choose {', '.join(map(str, KERNELS))}.")
        if self.is_timm and self.manipulated:
            raise ModelSpecError("The App. D.2 input manipulation needs a first layer of stride = kernel: use "
                                 "small_vgg or small_resnet.")
        train = self.train
        object.__setattr__(self, "train", dataclasses.replace(
            train, eval_every=max(10, train.steps // 20), snapshot_steps=self.snapshot_steps()))

    @property
    def is_timm(self) -> bool:
        return self.arch.startswith("timm:")

    @property
    def manipulated(self) -> bool:
        """True for the App. D.2 input manipulation."""
        return self.alpha != 1.0

    @property
    def patch_stride(self) -> int:
        """Stride of the patches the first layer sees: its kernel for App. D.2, else 1 (all overlapping patches)."""
        return self.first_kernel if self.manipulated else 1

    def snapshot_steps(self) -> tuple[int, ...]:
        """Log-spaced snapshot steps: 0, then about ``snapshots − 1`` steps from 1 to ``steps`` (``np.geomspace``'s
        points, rounded half to even, without importing numpy)."""
        steps, n = self.train.steps, max(self.snapshots - 1, 1)
        exponent = math.log10(steps) / (n - 1) if n > 1 else 0.0
        inner = (round(10 ** (i * exponent)) for i in range(1, n - 1))
        return tuple(sorted({0, 1, *inner, steps}))

    def slug(self) -> str:
        """A short file-name-safe name, e.g. ``small_vgg-k3-w32-true-s0``."""
        arch = self.arch.replace("timm:", "timm-").replace("/", "-")
        parts = [arch, f"k{self.first_kernel}", f"w{self.width}", self.labels]
        if self.labels == "energy":
            parts[-1] = f"energy{self.label_component}"
        if self.manipulated:
            parts.append(f"alpha{self.alpha:g}c{self.alpha_component}")
        if self.train.freeze_first:
            parts.append("frozen")
        if not is_bundled(self.images):
            parts.append(Path(self.images).name or "folder")
        return "-".join([*parts, f"s{self.train.seed}"])

    def to_dict(self) -> dict:
        """The fields, ``train``'s flattened beside the others (the ``config`` of ``run.json``) without the two it
        derives, and without the axes' fields when no layer is followed (run folders written before them read
        alike)."""
        unused = () if self.channel_axes else AXES_FIELDS
        return {f.name: setting_value(self, f.name) for f in settings_fields(RunSettings)
                if f.name not in DERIVED_TRAIN_FIELDS + unused}

    @classmethod
    def from_dict(cls, data: dict) -> RunSettings:
        """Read :meth:`to_dict` (flat keys, as every run folder stores them); unknown keys are ignored."""
        return replace_settings(cls(), {k: v for k, v in data.items() if k not in DERIVED_TRAIN_FIELDS})

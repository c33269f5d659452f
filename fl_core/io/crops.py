"""A small labelled data set made offline from the bundled photos: 32×32 crops, label = source photo.

Each photo is resized so its short side is ``scale`` pixels (the scale the demo models see). Training crops come
from the left ``1 − val_fraction`` of each photo, validation crops from the right part, so the two never share
pixels. Crops are fixed (seeded), like a CIFAR-style data set; no augmentation (the authors' setup).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2 as T

from fl_core.io.images import ImageSet, bundled_images
from fl_core.io.preprocessing import InputConfig
from fl_core.settings import MAX_SEED, Settings, setting


@dataclass(frozen=True)
class CropSettings(Settings):
    """How the crop data set is cut.

    Attributes:
        crop_size: side of each crop in pixels.
        scale: short side of each photo after resizing.
        val_fraction: right-hand fraction of each photo's width kept for validation.
        train_per_photo: random training crops per photo.
        val_stride: stride of the validation crop grid.
        seed: seed of the crop positions.
    """

    crop_size: int = setting(32, minimum=4, maximum=256)
    scale: int = setting(128, minimum=8, maximum=1024)
    val_fraction: float = setting(0.3, minimum=0.05, maximum=0.95)
    train_per_photo: int = setting(600, minimum=1, maximum=10_000)
    val_stride: int = setting(8, minimum=1, maximum=256)
    seed: int = setting(0, minimum=0, maximum=MAX_SEED)


@dataclass(frozen=True)
class CropData:
    """uint8 crops (N, 3, s, s) with labels, for training and validation, plus the normalization to apply."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    classes: tuple[str, ...]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    config: CropSettings

    def input_config(self) -> InputConfig:
        """The model input config that reproduces these crops from a whole photo (resize to ``scale``, crop)."""
        return InputConfig(input_size=self.config.crop_size, crop_pct=self.config.crop_size / self.config.scale,
                           interpolation="bilinear", mean=self.mean, std=self.std)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 crops -> float model input."""
        mean = torch.tensor(self.mean, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, 3, 1, 1)
        return (x.float() / 255 - mean) / std


def photo_crops(config: CropSettings = CropSettings(), images: ImageSet | None = None) -> CropData:
    """Cut the crop data set from ``images`` (default: the bundled photos); deterministic under ``config.seed``."""
    images = images or bundled_images()
    rng = np.random.default_rng(config.seed)
    resize = T.Compose([T.Resize(config.scale, interpolation=InterpolationMode.BILINEAR, antialias=True),
                        T.ToImage()])
    s = config.crop_size
    train_x, train_y, val_x, val_y = [], [], [], []
    for label in range(len(images)):
        photo = resize(images.image(label))  # (3, H, W) uint8
        _, h, w = photo.shape
        split = round(w * (1 - config.val_fraction))
        tops = rng.integers(0, h - s + 1, config.train_per_photo)
        lefts = rng.integers(0, split - s + 1, config.train_per_photo)
        train_x += [photo[:, t: t + s, x: x + s] for t, x in zip(tops, lefts)]
        train_y += [label] * config.train_per_photo
        grid = [(t, x) for t in range(0, h - s + 1, config.val_stride)
                for x in range(split, w - s + 1, config.val_stride)]
        val_x += [photo[:, t: t + s, x: x + s] for t, x in grid]
        val_y += [label] * len(grid)
    train = torch.stack(train_x)
    mean = (train.float() / 255).mean(dim=(0, 2, 3))
    std = (train.float() / 255).std(dim=(0, 2, 3))
    return CropData(train_x=train, train_y=torch.tensor(train_y), val_x=torch.stack(val_x), val_y=torch.tensor(val_y),
                    classes=tuple(images.classes), mean=tuple(round(float(v), 4) for v in mean),
                    std=tuple(round(float(v), 4) for v in std), config=config)

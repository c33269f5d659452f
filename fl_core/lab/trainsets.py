"""Training sets of the Training Lab (Chowers & Weiss §4, App. D): labelled crops, label variants, input variants.

* **Data**: 32×32 crops of the bundled photos (label = photo) or of any ImageFolder tree (label = class folder),
  training and validation crops cut from disjoint strips of each image (:func:`fl_core.io.crops.photo_crops`).
* **Label variants**: ``true``; ``random``, a seeded permutation of the labels (class counts kept, as in the
  authors' code); ``energy`` (App. D.1), the deciles of the per-image patch energy along one PCA component,
  E_u(X) = Σ_i (P_i(X)ᵀu)² over every k×k patch P_i of the (normalized) crop, top 10 % → class 0 … bottom → class 9.
* **Input variant** (App. D.2): every k×k tile P of the image (stride k, the grid the first layer then sees) becomes
  α⟨P,u_t⟩u_t + Σ_{j≠t}⟨P,u_j⟩u_j = P + (α−1)⟨P,u_t⟩u_t. The tile covariance C becomes MCM with
  M = I + (α−1)u_t u_tᵀ, so exactly one eigenvalue changes: λ_t → αλ_t (λ = patch std), and the u_j stay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from fl_core.errors import DataError
from fl_core.firstlayer.patches import PatchPCA, patch_pca
from fl_core.io.crops import CropData, CropSettings, photo_crops
from fl_core.io.images import BUNDLED, BUNDLED_PHOTOS, ImageSet, open_images
from fl_core.io.sources import is_bundled
from fl_core.lab.settings import LABEL_VARIANTS

N_DECILES = 10
BUNDLED_CROPS = CropSettings()
"""The bundled data set: 600 training crops per photo, 11 photos (the demo checkpoints' data)."""
FOLDER_TRAIN_CROPS = 6600
"""Training crops of a folder data set when not given: about as many as the bundled one, spread over its images."""
FOLDER_MAX_IMAGES = 2000
"""Images of a folder used when ``max_images`` is not given (evenly spread over its classes)."""
MAX_VAL_CROPS = 2000
PCA_MAX_CROPS = 2000
"""Crops (evenly spaced) whose every patch enters a run's patch PCA: ≥ 1.8 M patches at 32×32, ample for D ≤ 147."""


# ------------------------------------------------------------------------------------------------------------ data


def crop_dataset(images: str = BUNDLED, max_images: int | None = None, crops_per_image: int | None = None,
                 seed: int = 0) -> CropData:
    """Labelled crops of an image source: ``bundled`` (label = photo) or a folder/ImageFolder tree (label = class).

    Args:
        images: ``"bundled"`` or a folder path (an ImageFolder tree gives class labels; a flat folder labels each
            crop by its image).
        max_images: use at most this many images (evenly spread over the sorted tree, so every class can appear;
            default: all bundled photos, at most :data:`FOLDER_MAX_IMAGES` of a folder).
        crops_per_image: training crops per image (default: 600 for the bundled photos; for folders about
            6,600 in total).
        seed: crop positions.
    """
    return _cached_crops(images or BUNDLED, max_images, crops_per_image, seed)


@lru_cache(maxsize=4)
def _cached_crops(images: str, max_images: int | None, crops_per_image: int | None, seed: int) -> CropData:
    source = open_images(images, max_images or (None if is_bundled(images) else FOLDER_MAX_IMAGES))
    if len(source) < 2:
        raise DataError(f"{source.description}: a training set needs at least two images.")
    per_image = crops_per_image or (BUNDLED_CROPS.train_per_photo if is_bundled(images)
                                    else max(4, FOLDER_TRAIN_CROPS // len(source)))
    config = dataclasses.replace(BUNDLED_CROPS, train_per_photo=per_image, seed=seed)
    data = photo_crops(config, source)
    return data if is_bundled(images) else _class_labels(data, source)


def train_crop_count(images: str = BUNDLED, max_images: int | None = None, crops_per_image: int | None = None) -> int:
    """At most how many training crops :func:`crop_dataset` cuts, without listing a folder (its image count taken as
    ``max_images``, default :data:`FOLDER_MAX_IMAGES`)."""
    if is_bundled(images or BUNDLED):
        return min(max_images or len(BUNDLED_PHOTOS), len(BUNDLED_PHOTOS)) * (crops_per_image or
                                                                            BUNDLED_CROPS.train_per_photo)
    count = max_images or FOLDER_MAX_IMAGES
    return count * crops_per_image if crops_per_image else max(4 * count, FOLDER_TRAIN_CROPS)


def _class_labels(data: CropData, source: ImageSet) -> CropData:
    """Crops labelled by their image's class (ImageFolder) instead of the image index; at most MAX_VAL_CROPS
    validation crops, evenly spaced."""
    keep = torch.from_numpy(np.unique(np.linspace(0, len(data.val_x) - 1, MAX_VAL_CROPS).round().astype(int)))
    val_x, val_y = data.val_x[keep], data.val_y[keep]
    if not source.labelled:
        return dataclasses.replace(data, val_x=val_x, val_y=val_y, classes=tuple(source.names))
    image_class = torch.tensor(source.labels)
    return dataclasses.replace(data, train_y=image_class[data.train_y], val_x=val_x, val_y=image_class[val_y],
                               classes=tuple(source.classes))


def crops_pca(data: CropData, kernel: int, prepare: Callable[[torch.Tensor], torch.Tensor] | None = None, *,
              stride: int = 1, device=None, max_crops: int = PCA_MAX_CROPS, batch_size: int = 256) -> PatchPCA:
    """Patch PCA of (at most ``max_crops`` evenly spaced) training crops in the model's input space.

    ``stride`` = 1: every overlapping k×k patch (the paper's Def. 2.1); ``stride`` = k: the non-overlapping tiles
    that a first layer of stride k sees (App. D.2).
    """
    prepare = prepare or data.normalize
    picks = torch.from_numpy(np.unique(np.linspace(0, len(data.train_x) - 1, max_crops).round().astype(int)))
    crops = data.train_x[picks]
    batches = (prepare(crops[i: i + batch_size]) for i in range(0, len(crops), batch_size))
    return patch_pca(batches, (kernel, kernel), stride=stride, device=device)


# -------------------------------------------------------------------------------------------------- label variants


def random_labels(labels: torch.Tensor, seed: int) -> torch.Tensor:
    """A seeded random permutation of ``labels``: every class keeps its count, the image-label link is broken."""
    generator = torch.Generator().manual_seed(int(seed))
    return labels[torch.randperm(len(labels), generator=generator)]


def patch_energy(x: torch.Tensor, direction: np.ndarray | torch.Tensor, kernel: tuple[int, int, int],
                 batch_size: int = 512) -> torch.Tensor:
    """E_u(X) = Σ_i (P_iᵀu)² over every k×k patch P_i (stride 1, no padding) of each image X: (N,) float64.

    Computed as the squared response of u used as a convolution filter, summed over positions.
    """
    u = torch.as_tensor(np.asarray(direction), dtype=torch.float64).reshape(1, *kernel)
    out = []
    for start in range(0, len(x), batch_size):
        batch = x[start: start + batch_size].to(torch.float64)
        out.append(F.conv2d(batch, u.to(batch.device)).pow(2).sum(dim=(1, 2, 3)).cpu())
    return torch.cat(out)


@dataclass(frozen=True)
class EnergyDeciles:
    """Decile labels of a patch energy (App. D.1): class d holds the d-th tenth from the top.

    Attributes:
        component: the 1-based PCA component u whose energy defines the labels.
        cuts: the lowest training energy of deciles 0…8 (decreasing); a new image's label is the number of cuts
            above its energy.
    """

    component: int
    cuts: np.ndarray

    @classmethod
    def fit(cls, energy: torch.Tensor, component: int) -> tuple[EnergyDeciles, torch.Tensor]:
        """Equal-size deciles of the training energies (ties broken by order) and the training labels."""
        n = len(energy)
        if n < N_DECILES:
            raise DataError(f"{n} training images cannot be split into {N_DECILES} energy deciles.")
        order = torch.argsort(energy, descending=True, stable=True)
        labels = torch.empty(n, dtype=torch.long)
        labels[order] = torch.arange(n) * N_DECILES // n
        cuts = np.array([float(energy[labels == d].min()) for d in range(N_DECILES - 1)])
        return cls(component=component, cuts=cuts), labels

    def labels(self, energy: torch.Tensor) -> torch.Tensor:
        """Labels of held-out images: how many decile boundaries lie above each energy."""
        return (energy.unsqueeze(1).double() < torch.from_numpy(self.cuts).unsqueeze(0)).sum(1).long()


@dataclass(frozen=True)
class LabelledSplit:
    """Training and validation labels of one label variant, with what defines them."""

    variant: str
    train_y: torch.Tensor
    val_y: torch.Tensor
    classes: tuple[str, ...]
    deciles: EnergyDeciles | None = None


def label_variant(data: CropData, variant: str, *, seed: int = 0, pca: PatchPCA | None = None,
                  component: int = 15, prepare: Callable[[torch.Tensor], torch.Tensor] | None = None
                  ) -> LabelledSplit:
    """The labels of one variant: ``true``, ``random`` (permutation, seeded) or ``energy`` (App. D.1 deciles of
    the energy along the 1-based ``component`` of ``pca``, on ``prepare``-d crops)."""
    if variant == "true":
        return LabelledSplit("true", data.train_y, data.val_y, data.classes)
    if variant == "random":
        return LabelledSplit("random", random_labels(data.train_y, seed), random_labels(data.val_y, seed + 1),
                             data.classes)
    if variant == "energy":
        if pca is None:
            raise DataError("Energy-decile labels need the patch PCA of the training crops.")
        if not 1 <= component <= pca.dim:
            raise DataError(f"Component {component} does not exist: the patches have {pca.dim} components.")
        prepare = prepare or data.normalize
        direction = pca.components[component - 1]
        deciles, train_y = EnergyDeciles.fit(patch_energy(prepare(data.train_x), direction, pca.kernel), component)
        val_y = deciles.labels(patch_energy(prepare(data.val_x), direction, pca.kernel))
        names = tuple(f"decile {d + 1} of E_{component}" for d in range(N_DECILES))
        return LabelledSplit("energy", train_y, val_y, names, deciles)
    raise DataError(f"Unknown label variant '{variant}'; choose one of {', '.join(LABEL_VARIANTS)}.")


# -------------------------------------------------------------------------------------------------- input variant


@dataclass(frozen=True)
class TileScaling:
    """App. D.2: scale the coefficient of every k×k tile along one PCA component u_t by α.

    P → P + (α−1)⟨P,u_t⟩u_t on the non-overlapping tiles of the image (stride k from the top-left corner; rows
    and columns past the last whole tile are left as they are). Pair it with a first layer of stride k and no
    padding, which sees exactly these tiles.

    Attributes:
        direction: u_t, flattened in (channel, row, column) order.
        kernel: (C, k, k).
        alpha: the scale α.
        component: t, 1-based.
    """

    direction: np.ndarray
    kernel: tuple[int, int, int]
    alpha: float
    component: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the map to a float batch (N, C, H, W)."""
        k = self.kernel[-1]
        h, w = x.shape[-2] // k * k, x.shape[-1] // k * k
        tiles = F.unfold(x[..., :h, :w], k, stride=k)  # (N, D, L)
        u = torch.as_tensor(self.direction, dtype=x.dtype, device=x.device).view(1, -1, 1)
        scaled = tiles + (self.alpha - 1.0) * u * (u * tiles).sum(dim=1, keepdim=True)
        out = x.clone()
        out[..., :h, :w] = F.fold(scaled, (h, w), k, stride=k)
        return out

    @classmethod
    def from_pca(cls, pca: PatchPCA, component: int, alpha: float) -> TileScaling:
        """The map along the 1-based ``component`` of ``pca`` (which should be the tile PCA, stride k)."""
        if not 1 <= component <= pca.dim:
            raise DataError(f"Component {component} does not exist: the patches have {pca.dim} components.")
        if alpha <= 0:
            raise DataError(f"α = {alpha:g}: the scale must be positive.")
        return cls(direction=pca.components[component - 1].copy(), kernel=pca.kernel, alpha=float(alpha),
                   component=component)

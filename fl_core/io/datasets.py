"""Images a script already holds, as image sets: a tensor batch, a ``Dataset``, a ``DataLoader``.

Values are taken before any preprocessing: RGB in [0, 1] (floats, as ``torchvision.transforms.ToTensor`` gives them)
or 0-255 (``uint8``), rounded to 8 bits like a decoded photo (:func:`as_pixels`); each image is then preprocessed for
the model exactly as a photo read from a file (:mod:`fl_core.io.images`: resize, crop, the model's normalization).
Normalized values are refused, as are images over the decoding limits.

* a tensor batch ``(N, 3, H, W)`` (:func:`tensor_images`), unlabelled; a greyscale ``(N, 1, H, W)`` batch is taken
  with a notice (its one channel repeated as R, G and B, as a greyscale photo is read);
* a map-style ``torch.utils.data.Dataset`` of images (PIL, tensors, arrays) or ``(image, label)`` pairs, read image by
  image (:class:`DatasetImages`); ``TensorDataset(images, labels)`` is the labelled tensor batch;
* a ``DataLoader`` of such batches, held in memory within the analysis budget (:func:`loader_images`).

Labels index the model's outputs (classes ``"0"`` … ``"K-1"``, mapped by number:
:func:`fl_core.io.classes.map_tree_classes`), or the dataset's ``classes`` when it names them (as torchvision's data
sets do), mapped like an ImageFolder tree's.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from fl_core.compute.budgets import analysis_budget
from fl_core.errors import DataError
from fl_core.io.images import ImageSet, check_image_size

log = logging.getLogger(__name__)
GREYSCALE_NOTE = "greyscale: its one channel repeated as R, G and B"
"""What a greyscale batch's description (and the warning logged when it is taken) says."""
PIXEL_VALUES = ("RGB values in [0, 1] (floats, as torchvision's ToTensor() gives them) or uint8 0-255, before "
                "normalization (leave Normalize out: the model's own normalization is applied)")


def as_pixels(values: torch.Tensor | np.ndarray, what: str) -> torch.Tensor:
    """8-bit RGB values from values before normalization: ``uint8`` as they are, floats in [0, 1] rounded to 8 bits
    like a decoded photo (the model's preprocessing then runs as on one).

    Raises:
        DataError: naming ``what``, for another type or values outside [0, 1] (normalized ones, say).
    """
    x = torch.as_tensor(values).detach().cpu()
    if x.dtype == torch.uint8:
        return x
    if not x.is_floating_point():
        raise DataError(f"{what} holds {str(x.dtype).removeprefix('torch.')} values: give {PIXEL_VALUES}.")
    low, high = (float(x.min()), float(x.max())) if x.numel() else (0.0, 0.0)
    if not (low >= -1e-6 and high <= 1 + 1e-6):
        raise DataError(f"{what} holds values in [{low:.3g}, {high:.3g}]: give {PIXEL_VALUES}.")
    return x.float().mul(255).round_().clamp_(0, 255).to(torch.uint8)


def image_from_array(values: torch.Tensor | np.ndarray, name: str = "the image") -> Image.Image:
    """An RGB image from a tensor ``(3, H, W)`` or ``(1, H, W)``, or an array ``(H, W, 3)`` or ``(H, W)``, of values
    before normalization (:func:`as_pixels`).

    Raises:
        DataError: another shape or values, or an image over the decoding limits
            (:func:`fl_core.io.images.check_image_size`).
    """
    pixels = as_pixels(values, name)
    if isinstance(values, torch.Tensor) and pixels.ndim == 3:
        pixels = pixels.permute(1, 2, 0)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    if pixels.ndim != 3 or pixels.shape[-1] not in (1, 3):
        layout = "(3, H, W) tensor" if isinstance(values, torch.Tensor) else "(H, W, 3) array"
        raise DataError(f"{name} has shape {tuple(values.shape)}: give an RGB image as a {layout}.")
    check_image_size(pixels.shape[1], pixels.shape[0], name)
    return Image.fromarray(pixels.expand(-1, -1, 3).contiguous().numpy())


def _integer_classes(labels: Sequence[int]) -> tuple[str, ...]:
    """Class names ``"0"`` … ``"K-1"`` for labels that index the model's outputs
    (:func:`fl_core.io.classes.map_tree_classes` maps them by value)."""
    return tuple(str(i) for i in range(max(labels, default=-1) + 1))


def tensor_images(batch: torch.Tensor, labels: torch.Tensor | Sequence[int] | None = None,
                  classes: Sequence[str] | None = None, description: str | None = None) -> ImageSet:
    """A tensor batch ``(N, 3, H, W)`` of values before normalization (:func:`as_pixels`, held as 8 bits) as an
    image set; ``labels`` (one integer per image) index ``classes`` (default: the model's outputs). The default
    description names the batch's SHA-256, so a re-score's resume file never mistakes one batch for another. A
    greyscale batch ``(N, 1, H, W)`` is taken with a notice (a logged warning, and :data:`GREYSCALE_NOTE` in the
    description): its one channel is repeated as R, G and B."""
    if not isinstance(batch, torch.Tensor) or batch.ndim != 4 or batch.shape[1] not in (1, 3):
        shape = tuple(batch.shape) if isinstance(batch, torch.Tensor) else type(batch).__name__
        raise DataError(f"A tensor batch must have shape (N, 3, H, W), not {shape}.")
    pixels = as_pixels(batch, "The tensor batch")
    check_image_size(batch.shape[-1], batch.shape[-2], "Each image of the tensor batch")
    label_list = [-1] * len(batch) if labels is None else [int(v) for v in torch.as_tensor(labels).reshape(-1)]
    if len(label_list) != len(batch):
        raise DataError(f"{len(label_list)} labels for {len(batch)} images: give one label per image.")
    items = [(lambda i=i: image_from_array(pixels[i], f"image {i}"), label, f"image {i}")
             for i, label in enumerate(label_list)]
    classes = tuple(classes) if classes is not None else () if labels is None else _integer_classes(label_list)
    digest = hashlib.sha256(pixels.numpy().tobytes()).hexdigest()[:12]
    grey = f"; {GREYSCALE_NOTE}" if batch.shape[1] == 1 else ""
    if grey:
        log.warning("the tensor batch of shape %s is greyscale: its one channel is repeated as R, G and B",
                    tuple(batch.shape))
    return ImageSet(items, classes, description or f"{len(batch)} {batch.shape[-2]}×{batch.shape[-1]} images of a "
                    f"tensor batch (sha256 {digest}{grey})", labelled=labels is not None)


class DatasetImages(ImageSet):
    """The images of a map-style ``torch.utils.data.Dataset``, each read when used: items are images (PIL, or
    tensors and arrays as :func:`image_from_array` takes them) or ``(image, label)`` pairs (labelled; the label an
    index of the dataset's ``classes`` when it names them, else of the model's outputs). Labels come from
    ``dataset.targets`` (as torchvision's data sets hold them) or a ``TensorDataset``'s second tensor without reading
    images, through any ``Subset``; otherwise from the items, read when labels are first needed."""

    def __init__(self, dataset: Dataset, indices: Sequence[int] | None = None, description: str | None = None) -> None:
        indices = list(range(len(dataset))) if indices is None else list(indices)  # type: ignore[arg-type]
        while isinstance(dataset, Subset):  # read the underlying data set's targets and classes
            indices, dataset = [int(dataset.indices[i]) for i in indices], dataset.dataset
        self.dataset, self.indices = dataset, indices
        self.description = description or f"{len(self.indices)} images of a {type(dataset).__name__}"
        self._labelled = bool(len(dataset)) and _dataset_item(dataset[0])[1] is not None  # type: ignore[arg-type]
        self._labels: list[int] | None = None

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def names(self) -> list[str]:
        return [f"item {j}" for j in self.indices]

    @property
    def labels(self) -> list[int]:
        if self._labels is None:
            self._labels = self._read_labels()
        return self._labels

    def _read_labels(self) -> list[int]:
        if not self._labelled:
            return [-1] * len(self.indices)
        targets = getattr(self.dataset, "targets", None)
        if isinstance(self.dataset, TensorDataset) and len(self.dataset.tensors) > 1:
            targets = self.dataset.tensors[1]
        if targets is not None:
            return [int(targets[j]) for j in self.indices]
        return [self[i][1] for i in range(len(self))]

    @property
    def classes(self) -> tuple[str, ...]:  # type: ignore[override]
        named = getattr(self.dataset, "classes", None)
        if self._labelled and isinstance(named, Sequence) and named and all(isinstance(c, str) for c in named):
            return tuple(named)
        return _integer_classes(self.labels) if self._labelled else ()

    def image(self, index: int) -> Image.Image:
        return self[index][0]

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        image, label = _dataset_item(self.dataset[self.indices[index]])
        name = f"item {self.indices[index]}"
        image = image.convert("RGB") if isinstance(image, Image.Image) else image_from_array(image, name)
        return image, -1 if label is None else int(label)

    def subset(self, indices: Sequence[int]) -> ImageSet:
        chosen = DatasetImages(self.dataset, [self.indices[i] for i in indices], self.description)
        if self._labels is not None:
            chosen._labels = [self._labels[i] for i in indices]
        return chosen


def _dataset_item(item: object) -> tuple[object, object]:
    """``(image, label or None)`` of a dataset item: an image, or a tuple whose first two entries are image and label
    (a one-tensor ``TensorDataset``'s items are 1-tuples)."""
    if isinstance(item, tuple | list):
        return item[0], item[1] if len(item) > 1 else None
    return item, None


def loader_images(loader: DataLoader) -> ImageSet:
    """Every batch of a ``DataLoader`` (image tensors ``(B, 3, H, W)`` or ``(images, labels)`` pairs, values before
    normalization), held as 8-bit images within the analysis memory budget, as :func:`tensor_images`; labels index the
    dataset's ``classes`` when it names them, else the model's outputs."""
    limit = analysis_budget().memory_bytes
    batches: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    for batch in loader:
        x = batch[0] if isinstance(batch, tuple | list) else batch
        if not isinstance(x, torch.Tensor) or x.ndim != 4:
            raise DataError(f"The DataLoader yields {type(x).__name__} batches: give one of image tensors (B, 3, H, W) "
                            "or (images, labels) pairs (torchvision's ToTensor() as the transform).")
        if sum(map(torch.Tensor.numel, batches)) + x.numel() > limit:
            raise DataError(f"The DataLoader's images exceed the {limit >> 20} MiB analysis memory budget as 8-bit "
                            "images: pass its dataset instead (read image by image), or fewer images.")
        batches.append(as_pixels(x, "The DataLoader's images"))
        if isinstance(batch, tuple | list) and len(batch) > 1:
            labels.append(torch.as_tensor(batch[1]).reshape(-1))
    if not batches:
        raise DataError("The DataLoader yields no images.")
    named = getattr(loader.dataset, "classes", None)
    return tensor_images(torch.cat(batches), torch.cat(labels) if labels else None,
                         classes=tuple(named) if labels and named else None)

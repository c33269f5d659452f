"""Labelled calibration and evaluation sets for channel analyses (docs/methods.md, "Calibration and evaluation sets").

Two sources:

* labelled images, split at random (seeded) into disjoint calibration and evaluation halves: an ImageFolder tree
  (``root/<class>/*.jpg``; ImageNet val layout: class index = sorted wnid), or images a script holds with their
  labels (a ``TensorDataset(images, labels)``, a ``Dataset`` of ``(image, label)`` pairs, a ``DataLoader`` of such
  batches: :func:`fl_core.arguments.as_images`);
* the bundled labelled crops (:func:`fl_core.io.crops.photo_crops`): calibration from the training crops, evaluation
  from the validation crops, which never share pixels. A model whose classes are not the photos' (an ImageNet
  classifier offline) is scored against its own top-1 decision on each crop (:func:`decision_labels`): the target
  axis then measures what a channel tells about the network's decision, and accuracy is agreement with the intact
  network [proposed].

The class index the data assigns is checked against the model's head
(:func:`fl_core.io.classes.map_tree_classes`: by ImageNet wnid for 1000-way heads, by the model's class names,
else by position when the counts agree); remapped labels and assumptions are reported as warnings, and data whose
classes the head cannot score is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fl_core.arguments import ModelLike, as_images, as_model
from fl_core.channelaxes.settings import CROPS, ChannelDataSettings
from fl_core.compute.device import analysis_threads, cpu_threads
from fl_core.errors import DataError
from fl_core.io.classes import map_tree_classes
from fl_core.io.crops import CropData, CropSettings, photo_crops
from fl_core.io.images import ImageSet, bundled_images, iter_input_batches
from fl_core.io.models import LoadedModel
from fl_core.io.preprocessing import InputConfig
from fl_core.io.sources import is_bundled

DECISION_LABELS = "each labelled with the network's own top-1 class"
"""What the data description says when the labels are the network's decisions (:func:`decision_labels`)."""


class LabelledInputs:
    """Labelled model input served in batches ``(x (B, 3, S, S) float32, y (B,) int64)``.

    Either tensors held in memory (the crops, or a small set after :meth:`materialized`), or an image set decoded
    batch by batch with the model's evaluation transform, so memory does not grow with the number of images.
    """

    def __init__(self, *, x: torch.Tensor | None = None, y: torch.Tensor | None = None,
                 images: ImageSet | None = None, labels: Sequence[int] | None = None,
                 config: InputConfig | None = None) -> None:
        if (x is None) == (images is None):
            raise ValueError("give either tensors (x, y) or an image set with its input config")
        self._x, self._images, self._config = x, images, config
        self._labels = torch.as_tensor(y if y is not None else labels, dtype=torch.long)

    def __len__(self) -> int:
        return len(self._labels)

    @property
    def labels(self) -> torch.Tensor:
        """All labels ``(N,)``."""
        return self._labels

    @property
    def in_memory(self) -> bool:
        return self._x is not None

    def batches(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(x, y)`` batches in a fixed order."""
        if self._x is not None:
            for start in range(0, len(self), batch_size):
                yield self._x[start: start + batch_size], self._labels[start: start + batch_size]
            return
        start = 0
        for x, _ in iter_input_batches(self._images, self._config, batch_size=batch_size):
            yield x, self._labels[start: start + len(x)]
            start += len(x)

    def head(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``n`` examples as tensors (example input, gradient batches)."""
        return next(iter(self.batches(max(1, min(n, len(self))))))

    def materialized(self, max_bytes: int) -> LabelledInputs:
        """An in-memory copy when all inputs fit in ``max_bytes`` (for repeated passes), else ``self``."""
        if self.in_memory or len(self) == 0:
            return self
        x, _ = self.head(1)
        if x[0].numel() * x.element_size() * len(self) > max_bytes:
            return self
        return LabelledInputs(x=torch.cat([x for x, _ in self.batches(64)]), y=self._labels)


@dataclass(frozen=True)
class ChannelData:
    """Disjoint calibration (statistics, regressions, fine-tuning) and evaluation (lesions, pruning) sets.

    Attributes:
        calibration: labelled inputs for the streaming statistics (the reference's D_cal).
        evaluation: held-out labelled inputs for Δloss / Δaccuracy and pruning curves.
        classes: class names in label order (the model's order after any remapping).
        description: where the data came from.
        seed: seed of the split / subsampling.
        warnings: class-mapping notes for the user.
        source: the source as :func:`channel_data` was given it (a path, ``crops``; ``None``: images a script holds).
    """

    calibration: LabelledInputs
    evaluation: LabelledInputs
    classes: tuple[str, ...]
    description: str
    seed: int
    warnings: tuple[str, ...] = ()
    source: str | None = None


def class_mapping(classes: Sequence[str], loaded: LoadedModel, labels: Sequence[int] | None = None,
                  partial: bool = False) -> tuple[np.ndarray, tuple[str, ...]]:
    """Map data class indices (position in ``classes``) to the model's output indices.

    Uses :func:`fl_core.io.classes.map_tree_classes` (ImageNet wnids, the model's class names, output indices, then
    position). Returns ``(mapping, notes)`` with ``mapping[data_label] = model_label``; ``partial``: classes of none
    of the model's outputs map to -1 (their images are left out, ``labels`` counts them in the notes). Raises
    :class:`DataError` when no class (``partial``), or not every class, matches the head (the true-class margin needs
    the right class).
    """
    mapping = map_tree_classes(classes, loaded.num_classes, loaded.class_names, labels)
    if mapping.label_map is None or (mapping.label_map < 0).all() or (not partial and mapping.unmatched):
        raise DataError("The data's classes do not match the model's head: " + " ".join(mapping.warnings or
                                                                                         (mapping.how,)))
    moved = mapping.label_map != np.arange(len(classes))
    notes = mapping.warnings + ((f"{mapping.how} {int(moved.sum())} of {len(classes)} labels differ from the "
                                 "sorted folder order.",) if moved.any() else ())
    return mapping.label_map, notes


def image_channel_data(images: ImageSet, loaded: LoadedModel, n_calibration: int, n_evaluation: int,
                       seed: int = 0) -> ChannelData:
    """Disjoint random halves of a labelled image set (at most ``n_calibration`` / ``n_evaluation``), labels mapped
    onto the model's head; images of folders that name none of the model's classes are left out (the warnings
    say how many)."""
    if not images.labelled:
        raise DataError(f"{images.description} is not labelled: give an ImageFolder tree (root/<class>/image.jpg), "
                        "images with their labels (e.g. a TensorDataset(images, labels)), or 'crops'.")
    mapping, warnings = class_mapping(images.classes, loaded, images.labels, partial=True)
    order = np.random.default_rng(seed).permutation(len(images))
    order = order[mapping[np.asarray(images.labels, dtype=int)][order] >= 0]  # images of the model's classes
    half = len(order) // 2
    cal_index = np.sort(order[:half][:n_calibration])
    eval_index = np.sort(order[half:][:n_evaluation])

    def inputs(index: np.ndarray) -> LabelledInputs:
        chosen = images.subset(index.tolist())
        return LabelledInputs(images=chosen, labels=mapping[np.asarray(chosen.labels, dtype=int)].tolist(),
                              config=loaded.input_config)

    if len(cal_index) < n_calibration or len(eval_index) < n_evaluation:
        warnings += (f"Asked for {n_calibration} calibration + {n_evaluation} evaluation images; {images.description} "
                     f"has {len(images)}, split into disjoint halves, so {len(cal_index)} + {len(eval_index)} are "
                     "used.",)
    return ChannelData(calibration=inputs(cal_index), evaluation=inputs(eval_index), classes=tuple(images.classes),
                       description=f"{len(cal_index)} + {len(eval_index)} images of {images.description}",
                       seed=seed, warnings=warnings)


@lru_cache(maxsize=2)
def _bundled_crops(config: CropSettings) -> CropData:
    """The bundled photos' crop data set, cut once per process (read-only)."""
    return photo_crops(config)


def crop_settings_for(loaded: LoadedModel) -> CropSettings:
    """The crops a model is analysed on: the demo models' 32-px crops of 128-px photos, and for larger inputs crops of
    a quarter of the input size from photos resized to the input size (the same field of view, more pixels; an
    ImageNet network's 224 px: 56-px crops, each upsampled 4×)."""
    size = max(CropSettings.crop_size, loaded.input_config.input_size // 4)
    return CropSettings() if size == CropSettings.crop_size else CropSettings(crop_size=size, scale=4 * size)


@torch.no_grad()  # not inference mode: the labels enter the Taylor criterion's loss, which autograd records
def decision_labels(loaded: LoadedModel, x: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """The intact network's top-1 class of each model input ``x (N, 3, S, S)``: the labels of crops whose classes
    are not the model's (a forward pass on the shared model, which it does not change; in the threads the load leaves
    it: :func:`~fl_core.compute.device.analysis_threads`)."""
    cpu = torch.device("cpu")
    model = loaded.forward_copy(cpu)
    with cpu_threads(analysis_threads(cpu)):
        return torch.cat([model(x[start: start + batch_size]).argmax(dim=1) for start in range(0, len(x), batch_size)])


def photo_class_mapping(loaded: LoadedModel) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """:func:`class_mapping` of the bundled photos' classes (the crops' labels) onto the model's head; ``None`` when
    the head has no such classes, and the crops are labelled by the network's decisions (:func:`decision_labels`)."""
    try:
        return class_mapping(bundled_images().classes, loaded)
    except DataError:
        return None


def crop_channel_data(loaded: LoadedModel, n_calibration: int, n_evaluation: int, seed: int = 0,
                      config: CropSettings | None = None) -> ChannelData:
    """Calibration from the bundled photos' training crops, evaluation from their validation crops, labelled by the
    photo they come from when the model's head has the photos' classes, else by the model's own decision."""
    crops = _bundled_crops(config or crop_settings_for(loaded))
    mapping, warnings = photo_class_mapping(loaded) or (None, ())
    rng = np.random.default_rng(seed)
    cal = np.sort(rng.permutation(len(crops.train_x))[:n_calibration])
    val = np.sort(rng.permutation(len(crops.val_x))[:n_evaluation])
    cfg = loaded.input_config

    def inputs(x: torch.Tensor, y: torch.Tensor) -> LabelledInputs:
        pixels = x.float() / 255
        if pixels.shape[-1] != cfg.input_size:
            pixels = F.interpolate(pixels, size=cfg.input_size, mode="bilinear", antialias=True)
        mean = torch.tensor(cfg.mean).view(1, 3, 1, 1)
        std = torch.tensor(cfg.std).view(1, 3, 1, 1)
        x = (pixels - mean) / std
        return LabelledInputs(x=x, y=torch.as_tensor(mapping)[y] if mapping is not None else decision_labels(loaded, x))

    description = (f"{len(cal)} training + {len(val)} validation {crops.config.crop_size}-px crops of the bundled "
                   "photos")
    if mapping is None:
        description += f", {DECISION_LABELS}"
        warnings = (f"The bundled photos are not among {loaded.label}'s {loaded.num_classes} classes, so each crop is "
                    "labelled with the intact network's own top-1 class: the target axis measures what a channel "
                    "tells about the network's decision, and accuracy is agreement with the intact network. For "
                    "accuracy on true labels, give images labelled with the model's classes: an ImageFolder tree "
                    "(ImageNet: val/<wnid>/*.JPEG), a labelled set uploaded in the dashboard's sidebar, or labelled "
                    "images from Python.",)
    return ChannelData(calibration=inputs(crops.train_x[cal], crops.train_y[cal]),
                       evaluation=inputs(crops.val_x[val], crops.val_y[val]),
                       classes=crops.classes if mapping is not None else tuple(loaded.class_names or ()),
                       description=description, seed=seed, warnings=warnings)


def is_crops(source: object) -> bool:
    """The source is the bundled photos' labelled crops (:data:`CROPS`, or the bundled photos' own source)."""
    return isinstance(source, str | Path) and (str(source) == CROPS or is_bundled(str(source)))


def channel_data(model: ModelLike, source: object = ChannelDataSettings.source,
                 n_calibration: int = ChannelDataSettings.n_calibration,
                 n_evaluation: int = ChannelDataSettings.n_evaluation, seed: int = 0) -> ChannelData:
    """The labelled sets of a channel analysis of ``model``: ``"crops"`` (or the bundled photos' source: their
    labelled crops), a labelled ImageFolder tree, or labelled images as :func:`fl_core.arguments.as_images` takes
    them, labels mapped onto the model's head (the sizes and seed checked by
    :class:`~fl_core.channelaxes.settings.ChannelDataSettings`).

    Args:
        model: the model analysed (a spec string, :class:`LoadedModel` or ``nn.Module``).
        source: ``"crops"``, a labelled ImageFolder tree, or labelled images (e.g. a ``TensorDataset(images,
            labels)``).
        n_calibration: images the axes are estimated on.
        n_evaluation: images the lesions and pruning curves are scored on.
        seed: seed of the split and of the sampling.
    """
    loaded = as_model(model)
    named = isinstance(source, str | Path)
    asked = ChannelDataSettings(str(source) if named else CROPS, n_calibration, n_evaluation, seed)
    if is_crops(source):
        data = crop_channel_data(loaded, asked.n_calibration, asked.n_evaluation, asked.seed)
    else:
        data = image_channel_data(as_images(asked.source if named else source, "source"), loaded,
                                  asked.n_calibration, asked.n_evaluation, asked.seed)
    return dataclasses.replace(data, source=asked.source if named else None)


def as_channel_data(data: object, loaded: LoadedModel, seed: int = 0) -> ChannelData:
    """``data`` of :func:`~fl_core.channelaxes.analysis.analyze_channels`: a :class:`ChannelData` as is, anything
    else :func:`channel_data` takes through it (default sizes, ``seed``), ``None``: the bundled crops."""
    if isinstance(data, ChannelData):
        return data
    return channel_data(loaded, CROPS if data is None else data, seed=seed)

"""Class names: ImageNet-1k's (wnids and readable names) and the mapping of an ImageFolder tree onto a model's outputs.

Tree folders map onto model outputs by ImageNet-1k wnid (1000-way heads), else by the model's class names, else by
number when they are named 0 to K-1 (labels that index the outputs, as a tensor batch's are), else by sorted position
when the counts agree; otherwise there is no accuracy, only agreement with the original model
(:func:`map_tree_classes`, which says what it did and warns when tree and model disagree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

IMAGENET_CLASSES = 1000


@cache
def imagenet_wnids() -> tuple[str, ...]:
    """The 1000 ImageNet-1k wnids in class-index order (sorted), from timm's bundled class info."""
    from timm.data import ImageNetInfo

    return tuple(ImageNetInfo("imagenet-1k").label_names())


@cache
def imagenet_class_names() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names in class-index order ("tench", "goldfish", ...), from torchvision's metadata."""
    import torchvision

    return tuple(torchvision.models.ResNet18_Weights.DEFAULT.meta["categories"])


@dataclass(frozen=True)
class ClassMapping:
    """How the tree's class folders map onto the model's outputs.

    Attributes:
        label_map: tree class index -> model output index (-1: not mappable), or ``None`` when the labels are not
            used (no accuracy, agreement only).
        how: one sentence saying what was done.
        warnings: disagreements between tree and model, for the user.
    """

    label_map: np.ndarray | None
    how: str
    warnings: tuple[str, ...] = ()


def map_tree_classes(classes: Sequence[str], n_outputs: int | None,
                     model_classes: Sequence[str] | None = None) -> ClassMapping:
    """Map an ImageFolder tree's classes (sorted folder names) onto a model's outputs (module docstring)."""
    if not classes:
        return ClassMapping(None, "The images are unlabelled: only agreement with the original model is scored.")
    wnids = {wnid: i for i, wnid in enumerate(imagenet_wnids())}
    if n_outputs == len(wnids) and all(c in wnids for c in classes):
        subset = "" if len(classes) == len(wnids) else f" (the tree holds {len(classes)} of the 1000 classes)"
        return ClassMapping(np.array([wnids[c] for c in classes]), f"Folders are ImageNet-1k wnids{subset}: each is "
                            "mapped to its ImageNet class index.")
    if model_classes and all(c in model_classes for c in classes):
        index = {name: i for i, name in enumerate(model_classes)}
        return ClassMapping(np.array([index[c] for c in classes]), "Folders are mapped to the model's classes by name.")
    if n_outputs and set(classes) == {str(i) for i in range(len(classes))} and len(classes) <= n_outputs:
        return ClassMapping(np.array([int(c) for c in classes]), "Classes named 0 to K-1 (labels given as numbers) "
                            "are mapped to the model's output of that index.")
    if n_outputs == len(classes):
        return ClassMapping(np.arange(len(classes)), f"Folder i (sorted) is taken as output i of {n_outputs}.",
                            (f"The {len(classes)} folder names are neither ImageNet wnids nor the model's class "
                             "names; the sorted folder order is assumed to be the model's class order.",))
    return ClassMapping(None, "Tree and model classes disagree: only agreement with the original model is scored.",
                        (f"The tree has {len(classes)} classes but the model has {n_outputs} outputs, and the folder "
                         "names are neither ImageNet-1k wnids nor the model's class names, so accuracy cannot be "
                         "computed. Use an ImageFolder tree of the model's classes (ImageNet: val/<wnid>/*.JPEG).",))

"""Class names: ImageNet-1k's (wnids and readable names) and the mapping of an ImageFolder tree onto a model's outputs.

Each tree folder maps onto a model output on its own (:func:`map_tree_classes`): by ImageNet-1k wnid (1000-way
heads), by the model's class name (ImageNet's for a 1000-way head without names of its own), exactly or ignoring
case, spaces, underscores and hyphens (``great_white_shark`` is "great white shark", :func:`class_key`), or by number
when every folder is a number below the output count (labels that index the outputs, as a tensor batch's are). Folders
that map nowhere are left out of accuracy (their images still count for agreement with the original model), and the
mapping says which and how many images. When no folder maps and the counts agree, the sorted folder order is taken as
the class order; otherwise there is no accuracy, and the mapping says why.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from fl_core.settings import printable

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


def class_key(name: str) -> str:
    """A class name as folders are matched to it: case folded, each run of spaces, underscores and hyphens one space
    ("Great_White-shark" -> "great white shark")."""
    return " ".join(part for part in re.split(r"[\s_\-]+", name.casefold()) if part)


@dataclass(frozen=True)
class ClassMapping:
    """How the tree's class folders map onto the model's outputs.

    Attributes:
        label_map: tree class index -> model output index (-1: a folder of none of the model's classes, scored for
            agreement only), or ``None`` when the labels are not used (no accuracy, agreement only).
        how: one sentence saying what was done.
        warnings: disagreements between tree and model, for the user (folders left out, and why there is no
            accuracy when nothing maps).
        unmatched: the folders that map onto no output.
    """

    label_map: np.ndarray | None
    how: str
    warnings: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()


MATCH_KINDS = ("wnid", "name", "name ignoring case, spaces, underscores and hyphens", "index")


def map_tree_classes(classes: Sequence[str], n_outputs: int | None, model_classes: Sequence[str] | None = None,
                     labels: Sequence[int] | None = None) -> ClassMapping:
    """Map an ImageFolder tree's classes (sorted folder names) onto a model's outputs (module docstring).

    ``labels``: the tree class of every image, so that the warnings count the images left out.
    """
    if not classes:
        return ClassMapping(None, "The images are unlabelled: only agreement with the original model is scored.")
    if n_outputs == IMAGENET_CLASSES and not model_classes:
        model_classes = imagenet_class_names()
    names = _name_index(tuple(model_classes or ()))
    numbers = all(c.isdigit() for c in classes)
    matches = [_match(name, n_outputs, names, numbers) for name in classes]
    label_map = np.array([-1 if match is None else match[0] for match in matches])
    unmatched = tuple(name for name, match in zip(classes, matches) if match is None)
    if len(unmatched) < len(classes):
        left_out = (_left_out(classes, unmatched, labels, n_outputs, model_classes),) if unmatched else ()
        return ClassMapping(label_map, _how(matches, len(classes)), left_out, unmatched)
    if n_outputs == len(classes):
        return ClassMapping(np.arange(len(classes)), f"Folder i (sorted) is taken as output i of {n_outputs}.",
                            (f"The {len(classes)} folder names are neither ImageNet wnids nor the model's class "
                             "names; the sorted folder order is assumed to be the model's class order.",))
    return ClassMapping(None, "Tree and model classes disagree: only agreement with the original model is scored.",
                        (_no_accuracy(classes, n_outputs, model_classes),), unmatched)


@cache
def _name_index(model_classes: tuple[str, ...]) -> tuple[dict[str, int], dict[str, int]]:
    """The output of each class name, and of each :func:`class_key` that names one class only ("Cardigan", the dog,
    and "cardigan", the sweater, share a key: each is found by its exact name only)."""
    keys = [class_key(name) for name in model_classes]
    counts = Counter(keys)
    return {name: i for i, name in enumerate(model_classes)}, {key: i for i, key in enumerate(keys) if counts[key] == 1}


@cache
def _wnid_index() -> dict[str, int]:
    return {wnid: i for i, wnid in enumerate(imagenet_wnids())}


def _match(name: str, n_outputs: int | None, names: tuple[dict[str, int], dict[str, int]],
           numbers: bool) -> tuple[int, str] | None:
    """The output a folder names, and how it was found (one of :data:`MATCH_KINDS`), or ``None``."""
    exact, keyed = names
    if n_outputs == IMAGENET_CLASSES and name in _wnid_index():
        return _wnid_index()[name], MATCH_KINDS[0]
    if name in exact:
        return exact[name], MATCH_KINDS[1]
    if class_key(name) in keyed:
        return keyed[class_key(name)], MATCH_KINDS[2]
    if numbers and n_outputs and int(name) < n_outputs:
        return int(name), MATCH_KINDS[3]
    return None


def _how(matches: Sequence[tuple[int, str] | None], n_folders: int) -> str:
    """One sentence: how many folders mapped, by which rule."""
    kinds = [match[1] for match in matches if match is not None]
    if kinds == [MATCH_KINDS[0]] * n_folders:
        subset = "" if n_folders == IMAGENET_CLASSES else f" (the tree holds {n_folders} of the 1000 classes)"
        return f"Folders are ImageNet-1k wnids{subset}: each is mapped to its ImageNet class index."
    counts = ", ".join(f"{kinds.count(kind)} by {kind}" for kind in MATCH_KINDS if kind in kinds)
    share = "All" if len(kinds) == n_folders else f"{len(kinds)} of"
    return f"{share} {n_folders} classes are mapped to the model's outputs ({counts})."


def _left_out(classes: Sequence[str], unmatched: Sequence[str], labels: Sequence[int] | None,
              n_outputs: int | None, model_classes: Sequence[str] | None) -> str:
    """The warning of a partly matching tree: which folders (and how many images) accuracy leaves out."""
    folders = f"{len(unmatched)} of {len(classes)} folders ({_examples(unmatched, 8)})"
    if labels is not None:
        left = {i for i, name in enumerate(classes) if name in set(unmatched)}
        folders = f"{sum(label in left for label in labels)} of {len(labels)} images, in {folders},"
    keys = Counter(class_key(name) for name in model_classes or ())
    ambiguous = [name for name in unmatched if keys[class_key(name)] > 1]
    shared = (f" {_examples(ambiguous, 3)} names more than one class when case is ignored: write its exact name."
              if ambiguous else "")
    return (f"{folders[0].upper()}{folders[1:]} are of none of the model's classes: accuracy leaves them out, "
            f"agreement with the original model counts them.{shared} {_naming(n_outputs, model_classes)}")


def _no_accuracy(classes: Sequence[str], n_outputs: int | None, model_classes: Sequence[str] | None) -> str:
    """Why a tree that maps onto nothing has no accuracy, and how to name its folders."""
    outputs = f"the model has {n_outputs} outputs" if n_outputs else "the model's outputs are unknown"
    return (f"The tree has {len(classes)} classes but {outputs}, and no folder name ({_examples(classes, 3)}) is an "
            f"ImageNet-1k wnid, one of the model's class names or an output index, so accuracy cannot be computed. "
            f"{_naming(n_outputs, model_classes)}").strip()


def _examples(names: Sequence[str], most: int) -> str:
    return ", ".join(f"'{printable(name)}'" for name in names[:most]) + (" …" if len(names) > most else "")


def _naming(n_outputs: int | None, model_classes: Sequence[str] | None) -> str:
    """How to name a folder so that it maps: by wnid (ImageNet heads), class name (two examples), output index."""
    ways = ["its ImageNet wnid (e.g. n01440764, as val/<wnid>/*.JPEG)"] if n_outputs == IMAGENET_CLASSES else []
    if model_classes:
        named = [model_classes[0], model_classes[min(2, len(model_classes) - 1)].replace(" ", "_")]
        ways.append(f"the model's class name (e.g. {_examples(named, 2)}; case, spaces, underscores and hyphens do "
                    "not matter)")
    if n_outputs:
        ways.append(f"its output index (0 to {n_outputs - 1}, every folder a number)")
    if not ways:
        return ""
    return "Name each folder by " + (", ".join(ways[:-1]) + " or " + ways[-1] if len(ways) > 1 else ways[0]) + "."

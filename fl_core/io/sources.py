"""Image sources by name: the bundled photos, a folder or an ImageFolder tree, a CIFAR-10/100 folder in torchvision's
format, and how many images to read (light: no torch, so the command line checks them before any analysis loads)."""

from __future__ import annotations

from dataclasses import dataclass

from fl_core.settings import MAX_IMAGES, Settings, setting

BUNDLED = "bundled"
"""The image source of the bundled natural photos (:data:`fl_core.io.images.BUNDLED_PHOTOS`, package data: offline;
the empty string means the same)."""


CIFAR_KINDS = ("cifar10", "cifar100")
"""The prefixes of CIFAR sources: ``cifar10:PATH``, ``cifar100:PATH``."""
CIFAR_SPLITS = ("test", "train")
"""A CIFAR folder's splits, named by a trailing ``@test`` or ``@train`` (none: the test split)."""


def is_bundled(source: str) -> bool:
    """The source is the bundled photos (:data:`BUNDLED` or empty)."""
    return source in ("", BUNDLED)


def source_text(source: str) -> str:
    """An image source as a person reads it: "the bundled photos" (not the internal name ``bundled``), else the
    folder as given."""
    return "the bundled photos" if is_bundled(source) else source


@dataclass(frozen=True)
class CifarSource:
    """A CIFAR source, ``cifar10:PATH[@train|@test]`` or ``cifar100:PATH[@train|@test]``
    (:mod:`fl_core.io.cifar_data` reads it).

    Attributes:
        kind: ``cifar10`` or ``cifar100``.
        path: torchvision's download folder (holding ``cifar-10-batches-py`` or ``cifar-100-python``), that folder
            itself, or one batch file of it (its meta file beside it).
        split: ``test`` or ``train`` as the source names it; ``None``: a folder's test split (CIFAR's held-out 10,000
            images), a batch file's own images.
    """

    kind: str
    path: str
    split: str | None = None

    @classmethod
    def parse(cls, source: str) -> CifarSource | None:
        """The CIFAR source ``source`` names, or ``None`` when it names another kind of source. A trailing ``@train``
        or ``@test`` is always the split (a path that ends so is named with the split after it)."""
        kind, colon, rest = source.partition(":")
        if not colon or kind not in CIFAR_KINDS:
            return None
        path, at, split = rest.rpartition("@")
        if at and split in CIFAR_SPLITS:
            return cls(kind, path, split)
        return cls(kind, rest)


def source_path(source: str) -> str | None:
    """The file or folder an image source reads, as the path policy checks it: none for the bundled photos, ``PATH``
    of ``cifar10:PATH``, else the source itself (a folder)."""
    if is_bundled(source):
        return None
    cifar = CifarSource.parse(source)
    return cifar.path if cifar else source


@dataclass(frozen=True)
class ImageSource(Settings):
    """Which images an analysis reads (:func:`fl_core.io.images.open_images` checks its arguments with it).

    Attributes:
        images: 'bundled' (offline natural photos), a folder, an ImageFolder tree, or a CIFAR folder in
            torchvision's format: cifar10:PATH or cifar100:PATH (its test split; PATH@train: the training split).
        max_images: use at most this many images (none: all).
    """

    images: str = BUNDLED
    max_images: int | None = setting(None, minimum=1, maximum=MAX_IMAGES)

"""Image sources by name: the bundled photos, a folder or an ImageFolder tree, and how many images to read (light: no
torch, so the command line checks them before any analysis loads)."""

from __future__ import annotations

from dataclasses import dataclass

from fl_core.settings import MAX_IMAGES, Settings, setting

BUNDLED = "bundled"
"""The image source of the bundled natural photos (:data:`fl_core.io.images.BUNDLED_PHOTOS`, package data: offline;
the empty string means the same)."""


def is_bundled(source: str) -> bool:
    """The source is the bundled photos (:data:`BUNDLED` or empty)."""
    return source in ("", BUNDLED)


def source_text(source: str) -> str:
    """An image source as a person reads it: "the bundled photos" (not the internal name ``bundled``), else the
    folder as given."""
    return "the bundled photos" if is_bundled(source) else source


@dataclass(frozen=True)
class ImageSource(Settings):
    """Which images an analysis reads (:func:`fl_core.io.images.open_images` checks its arguments with it).

    Attributes:
        images: 'bundled' (offline natural photos), a folder, or an ImageFolder tree.
        max_images: use at most this many images (none: all).
    """

    images: str = BUNDLED
    max_images: int | None = setting(None, minimum=1, maximum=MAX_IMAGES)

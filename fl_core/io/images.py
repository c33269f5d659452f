"""Image sources and their conversion into a model's input space.

A source is ``bundled`` (natural photos shipped as package data, from the sample data of scikit-image, scikit-learn
and matplotlib: no network),
a folder of images, a labelled ImageFolder tree (``root/<class>/*.jpg``, class index = sorted folder names,
as in the ImageNet ``val/<wnid>/*.JPEG`` layout), or CIFAR-10/100 in torchvision's format (``cifar10:PATH``,
``cifar100:PATH``: :mod:`fl_core.io.cifar_data`). Uploads are saved to a folder and read as one.

Images a script already holds (a tensor batch, a ``Dataset``, a ``DataLoader``) become image sets in
:mod:`fl_core.io.datasets`.

Two views of an image in a model's input space (:class:`~fl_core.io.preprocessing.InputConfig`):

* :func:`scaled_input` — resized as the model's evaluation resize does (``input_size / crop_pct`` on the short side,
  both sides or the long side, by the crop mode: the scale the model sees) and normalized, *not* cropped: every
  overlapping patch of it is used for patch statistics.
* :func:`input_transform` — the model's evaluation transform (resize, crop, normalize) for forward passes: timm's
  ``create_transform`` for evaluation in its three crop modes, which torchvision's ``weights.transforms()`` is the
  ``center`` case of.

Every image is bounded before it costs: its header is checked before decoding (:func:`decode_rgb`: pixels, aspect
ratio, and for JPEGs pixels × scans, :func:`jpeg_scans`), and its size at the model's scale before resizing
(:func:`scaled_size`, :data:`MAX_SCALED_PIXELS`).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, default_collate
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2 as T

from fl_core.compute.budgets import check_decoding
from fl_core.errors import DataError
from fl_core.io import ASSETS_DIR
from fl_core.io.cifar_data import read_cifar
from fl_core.io.paths import PathPolicy, check_readable, open_readable, path_policy
from fl_core.io.preprocessing import InputConfig
from fl_core.io.sources import BUNDLED as BUNDLED  # re-exported: the public name
from fl_core.io.sources import CifarSource, ImageSource, is_bundled
from fl_core.settings import path_text_problem, printable

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm")
MAX_IMAGE_PIXELS = 64_000_000
"""Pixels of one decoded image (192 MB as RGB), checked from its header."""
MAX_ASPECT_RATIO = 16
"""Long side / short side, checked from the header. The resize to the model's scale sets the short side, so it
multiplies the long side by the same factor: a 1×65,535 strip would become 256×16.8 million pixels. 16:1 admits
every real panorama (a 360° one is 2:1 to 8:1)."""
MAX_SCALED_PIXELS = 4096 * 4096
"""Pixels of an image once resized to the model's scale (before any crop): a square image at the largest resize
:class:`~fl_core.io.preprocessing.InputConfig` allows (200 MB as a float32 tensor)."""
Image.MAX_IMAGE_PIXELS = None  # Pillow's own check is off: decode_rgb checks every image itself (see there)


PHOTOS_DIR = ASSETS_DIR / "photos"
"""The bundled photos: package data, copied byte for byte from the sample data of scikit-image, scikit-learn and
matplotlib by ``scripts/make_bundled_photos.py`` (credits and licences in ``fl_core/assets/ATTRIBUTION.md``)."""


@dataclass(frozen=True)
class BundledPhoto:
    """A natural photo shipped in :data:`PHOTOS_DIR`, with where it was copied from and its licence.

    Attributes:
        name: the photo's name (its class name in :func:`bundled_images`).
        source: the file it is a copy of, inside the installed ``package`` (e.g. ``skimage/data/astronaut.png``).
        package: the distribution that ships the original.
        credit: author or owner.
        licence: the licence the original is published under.
    """

    name: str
    source: str
    package: str
    credit: str
    licence: str

    @property
    def path(self) -> Path:
        """The shipped copy."""
        return PHOTOS_DIR / Path(self.source).name


BUNDLED_PHOTOS: tuple[BundledPhoto, ...] = (
    BundledPhoto("astronaut", "skimage/data/astronaut.png", "scikit-image", "NASA (Eileen Collins)", "public domain"),
    BundledPhoto("coffee", "skimage/data/coffee.png", "scikit-image", "Rachel Michetti / Pikolo Espresso Bar", "CC0"),
    BundledPhoto("chelsea", "skimage/data/chelsea.png", "scikit-image", "Stefan van der Walt", "CC0"),
    BundledPhoto("rocket", "skimage/data/rocket.jpg", "scikit-image", "SpaceX (DSCOVR launch)", "public domain"),
    BundledPhoto("hubble_deep_field", "skimage/data/hubble_deep_field.jpg", "scikit-image", "NASA / HubbleSite",
                 "public domain"),
    BundledPhoto("brick", "skimage/data/brick.png", "scikit-image", "CC0Textures (Bricks25)", "CC0"),
    BundledPhoto("retina", "skimage/data/retina.jpg", "scikit-image", "Mikael Häggström (Wikimedia Commons)", "CC0"),
    BundledPhoto("camera", "skimage/data/camera.png", "scikit-image", "Lav Varshney", "CC0"),
    BundledPhoto("china", "sklearn/datasets/images/china.jpg", "scikit-learn", "danielbuechele (Flickr)", "CC BY 2.0"),
    BundledPhoto("flower", "sklearn/datasets/images/flower.jpg", "scikit-learn", "vultilion (Flickr)", "CC BY 2.0"),
    BundledPhoto("grace_hopper", "matplotlib/mpl-data/sample_data/grace_hopper.jpg", "matplotlib",
                 "US Navy (Grace Hopper portrait)", "public domain"),
)


def bundled_licences() -> list[dict[str, str]]:
    """Rows of (photo, package, credit, licence) for the UI's licence table."""
    return [{"photo": p.name, "package": p.package, "credit": p.credit, "licence": p.licence} for p in BUNDLED_PHOTOS]


@cache
def _bundled_array(name: str) -> np.ndarray:
    """The photo's RGB pixels, decoded once per process."""
    photo = next(p for p in BUNDLED_PHOTOS if p.name == name)
    return np.asarray(decode_rgb(photo.path, photo.name))


def decode_rgb(source: str | Path | io.BytesIO, name: str | None = None, policy: PathPolicy | None = None
               ) -> Image.Image:
    """Decode an image as RGB, refusing from its header, before decoding, an image over :data:`MAX_IMAGE_PIXELS`
    (a small, highly compressed file cannot unpack to gigabytes) or more elongated than :data:`MAX_ASPECT_RATIO`.

    Pillow's own decompression-bomb check is switched off at import (``Image.MAX_IMAGE_PIXELS = None``): it only
    warns between its limit and twice it and raises its own error above, so with it on a user would see two rules
    and Pillow's message. Every untrusted image goes through this function, so one rule and one message remain.

    A path is opened under ``policy`` (default: the one in force), checked on the file actually opened
    (:func:`fl_core.io.paths.open_readable`): a symlink swapped in after its folder was listed is not followed out of
    the shared folders, and a FIFO or a device is refused without reading it.

    Raises:
        DataError: naming the image (``name``, else the path) and saying what to do.
    """
    label = printable(name or (str(source) if isinstance(source, str | Path) else "the image"))
    try:
        with _opened(source, policy) as file, Image.open(file) as handle:
            check_image_size(handle.width, handle.height, label)
            if handle.format == "JPEG":
                check_decoding(handle.width, handle.height, jpeg_scans(_file_bytes(handle)), label)
            return handle.convert("RGB")
    except (OSError, ValueError, SyntaxError) as err:  # UnidentifiedImageError is an OSError
        raise DataError(f"{label} is not a readable image ({err}). Remove or replace the file.") from err


def _opened(source: str | Path | io.BytesIO, policy: PathPolicy | None) -> contextlib.AbstractContextManager:
    """A path opened under ``policy`` (:func:`fl_core.io.paths.open_readable`); a file object as it is."""
    return open_readable(source, policy) if isinstance(source, str | Path) else contextlib.nullcontext(source)


_MARKER = re.compile(rb"\xff+([^\x00\xff])")
"""A marker as a decoder finds it after a segment: 0xFF (and any 0xFF fill bytes) followed by a byte other than 0x00;
libjpeg skips whatever comes before it."""
_MARKER_AFTER_SCAN = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
"""The first marker after a scan's entropy-coded data, where 0xFF is followed by 0x00 (stuffing), a restart
marker (0xD0-0xD7) or more 0xFF fill bytes."""


def jpeg_scans(data: bytes) -> int:
    """Start-of-scan (SOS) segments of a JPEG stream, found as libjpeg finds them: from marker to marker, each
    segment skipped by its length and each scan's entropy-coded data to the next marker, bytes between a segment and
    the next marker skipped (as the decoder skips them: a stray byte cannot hide the scans behind it), so bytes
    inside segments are never taken for markers. A baseline JPEG has one scan (or one per colour), a progressive one
    usually 10."""
    scans, position = 0, 2
    while (found := _MARKER.search(data, position)) is not None:
        marker, position = found.group(1)[0], found.end()
        if marker == 0xD9:  # end of image
            break
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # restart markers and TEM have no segment
            continue
        position += int.from_bytes(data[position:position + 2], "big")
        if marker == 0xDA:
            scans += 1
            after = _MARKER_AFTER_SCAN.search(data, position)
            position = after.start() if after else len(data)
    return scans


def _file_bytes(handle: Image.Image) -> bytes:
    """The whole file behind an open image, its read position kept."""
    where = handle.fp.tell()
    handle.fp.seek(0)
    data = handle.fp.read()
    handle.fp.seek(where)
    return data


def check_image_size(width: int, height: int, label: str) -> None:
    if width * height > MAX_IMAGE_PIXELS:
        raise DataError(f"{label} is {width:,}×{height:,} pixels, over the {MAX_IMAGE_PIXELS:,}-pixel limit; refused "
                        "before decoding. Use a smaller image.")
    if max(width, height) > MAX_ASPECT_RATIO * max(min(width, height), 1):
        raise DataError(f"{label} is {width:,}×{height:,} pixels, more elongated than {MAX_ASPECT_RATIO}:1; refused "
                        "before decoding (at the model's scale its long side would grow by the same factor as its "
                        "short side). Crop it to a less elongated image.")


class ImageSet(Dataset):
    """An indexable set of RGB images with integer labels (``-1`` when unlabelled).

    ``dataset[i]`` returns ``(PIL.Image, label)``; wrap it with :class:`TransformedImages` for tensors. Image files are
    opened under ``policy``, the path policy in force when the set was listed (kept with the set, so the decoding
    threads, processes and workers that read it later check the same folders).
    """

    policy: PathPolicy | None = None

    def __init__(self, items: Sequence[tuple[str | Callable[[], Image.Image], int, str]],
                 classes: Sequence[str] = (), description: str = "", labelled: bool | None = None,
                 policy: PathPolicy | None = None) -> None:
        self._items = list(items)
        self.classes = tuple(classes)
        self.description = description
        self._labelled = bool(self.classes) if labelled is None else labelled
        self.policy = policy

    def __len__(self) -> int:
        return len(self._items)

    @property
    def labelled(self) -> bool:
        """Labels are classes a model can be scored against (an ImageFolder tree), not photo names."""
        return self._labelled

    @property
    def names(self) -> list[str]:
        return [name for _, _, name in self._items]

    @property
    def labels(self) -> list[int]:
        return [label for _, label, _ in self._items]

    def image(self, index: int) -> Image.Image:
        """The image as RGB; unreadable files raise :class:`DataError` naming the file."""
        source, _, name = self._items[index]
        return source() if callable(source) else decode_rgb(source, name, self.policy)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return self.image(index), self._items[index][1]

    def subset(self, indices: Sequence[int]) -> ImageSet:
        """The images at ``indices`` (same classes)."""
        return ImageSet([self._items[i] for i in indices], self.classes, self.description, self.labelled, self.policy)


class TransformedImages(Dataset):
    """``(transform(image), label)`` pairs of an :class:`ImageSet` (DataLoader-ready)."""

    def __init__(self, images: ImageSet, transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.images[index]
        return self.transform(image), label


def threaded_batches(dataset: Dataset, batch_size: int, threads: int, *, prefetch: int = 2,
                     pin_memory: bool = False) -> Iterator[list[torch.Tensor]]:
    """The batches a ``DataLoader(dataset, batch_size)`` gives, in order, their items made by ``threads`` threads of
    this process ``prefetch`` batches ahead: decoding beside the forward passes where worker processes cannot be
    started (a daemonic process, such as a Dask worker, may have no children). Pillow's decoding and resizing and
    torch's conversions release the GIL, so the threads work side by side."""
    starts = iter(range(0, len(dataset), batch_size))
    pending: deque[list] = deque()
    pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="fl-decode")

    def submit_next() -> None:
        start = next(starts, None)
        if start is not None:
            stop = min(start + batch_size, len(dataset))
            pending.append([pool.submit(dataset.__getitem__, index) for index in range(start, stop)])

    try:
        for _ in range(1 + prefetch):
            submit_next()
        while pending:
            batch = default_collate([item.result() for item in pending.popleft()])
            submit_next()
            yield [part.pin_memory() for part in batch] if pin_memory else batch
    finally:  # also when the consumer stops early (an error, a cancelled job): drop what was not started
        pool.shutdown(wait=False, cancel_futures=True)


def bundled_images(names: Sequence[str] | None = None) -> ImageSet:
    """The bundled natural photos (offline). Labels are photo indices (``classes`` are the photo names; the set is not
    :attr:`~ImageSet.labelled`)."""
    chosen = [p for p in BUNDLED_PHOTOS if names is None or p.name in names]
    items = [(lambda n=p.name: Image.fromarray(_bundled_array(n)), i, p.name) for i, p in enumerate(chosen)]
    return ImageSet(items, classes=[p.name for p in chosen], description=f"{len(items)} bundled photos",
                    labelled=False)


def folder_images(root: str | Path, limit: int | None = None) -> ImageSet:
    """Images in a folder. If its sub-folders hold images, it is read as a labelled ImageFolder tree.

    Class index = position in the sorted sub-folder names (the torchvision/ImageNet convention). The folder and every
    image in it must be readable under the path policy (:func:`fl_core.io.paths.check_readable`): a symlink out of
    it is refused.
    """
    if problem := path_text_problem(str(root)):
        raise DataError(f"The image folder '{printable(str(root)[:60])}' cannot be used: {problem}.")
    root = check_readable(root)
    if not root.is_dir():
        raise DataError(f"No folder at {printable(str(root))}. Give a folder of images or an ImageFolder tree "
                        "(root/class/img.jpg).")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    items: list[tuple[str, int, str]] = []
    if classes:
        for label, cls in enumerate(classes):
            items += [(str(f), label, printable(f"{cls}/{f.name}")) for f in sorted((root / cls).iterdir())
                      if _is_image(f)]
    if not items:
        classes = []
        items = [(str(f), -1, printable(f.name)) for f in sorted(root.iterdir()) if _is_image(f)]
    if not items:
        raise DataError(f"{root} holds no images ({', '.join(IMAGE_SUFFIXES)}).")
    if path_policy().roots is not None:
        for path, _, _ in items:
            check_readable(path)
    if limit is not None:
        items = _spread(items, limit)
    kind = f"ImageFolder tree, {len(classes)} classes" if classes else "folder"
    return ImageSet(items, classes=[printable(c) for c in classes], policy=path_policy(),
                    description=printable(f"{len(items)} images from {root} ({kind})"))


def cifar_images(source: CifarSource, limit: int | None = None) -> ImageSet:
    """The images of a CIFAR source (:func:`fl_core.io.cifar_data.read_cifar`), labelled with its classes; at most
    ``limit``, evenly spread over the split's order (which mixes the classes). Only the chosen images' pixels are kept
    (3 KB each)."""
    split = read_cifar(source)
    rows = _spread(list(range(len(split.labels))), limit) if limit is not None else range(len(split.labels))
    pixels = split.pixels(rows)
    items = [(functools.partial(Image.fromarray, pixels[k]), int(split.labels[row]), split.names[row])
             for k, row in enumerate(rows)]
    count = f"{len(items):,}" if len(items) == len(split.labels) else f"{len(items):,} of {len(split.labels):,}"
    return ImageSet(items, classes=split.classes, description=f"{count} images of {split.description}", labelled=True)


def _spread(items: list, limit: int) -> list:
    """At most ``limit`` items, evenly spaced (so every class of a sorted tree is represented)."""
    if len(items) <= limit:
        return items
    picks = np.linspace(0, len(items) - 1, limit).round().astype(int)
    return [items[i] for i in picks]


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def open_images(source: str, limit: int | None = None) -> ImageSet:
    """The images of a source.

    Args:
        source: :data:`BUNDLED` (or empty: the bundled photos), a folder of images, a labelled ImageFolder tree, or
            CIFAR-10/100 in torchvision's format: ``cifar10:PATH`` / ``cifar100:PATH``, its test split unless the
            source ends in ``@train`` (:class:`~fl_core.io.sources.CifarSource`).
        limit: at most this many images (a folder's evenly spread over its sorted files, so every class is kept).
    """
    checked = ImageSource(source, limit)
    source, limit = checked.images, checked.max_images
    if is_bundled(source):
        images = bundled_images()
        return images if limit is None else images.subset(range(min(limit, len(images))))
    if cifar := CifarSource.parse(source):
        return cifar_images(cifar, limit)
    return folder_images(source, limit=limit)


def save_uploaded_images(files: Sequence[tuple[str, bytes]], folder: str | Path) -> ImageSet:
    """Decode uploaded image bytes (refusing non-images and decompression bombs) and save them as PNGs, each under
    its own name: the upload's stem without leading dots (a dot-file is a visible image too), ``-2``, ``-3``, ...
    added when two uploads share it (``a.png`` and ``a.jpg`` are both kept)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    for name, data in files:
        image = decode_rgb(io.BytesIO(data), name)
        stem = Path(name).stem.lstrip(".")[:60] or "image"
        saved = next(candidate for n in itertools.count(1)
                     if (candidate := stem if n == 1 else f"{stem}-{n}").lower() not in taken)
        taken.add(saved.lower())
        image.save(folder / f"{saved}.png")
    return folder_images(folder)


def _interpolation(config: InputConfig) -> InterpolationMode:
    return InterpolationMode(config.interpolation)


def _to_normalized_tensor(config: InputConfig) -> list:
    return [T.ToImage(), T.ToDtype(torch.float32, scale=True), T.Normalize(config.mean, config.std)]


def scaled_size(width: int, height: int, config: InputConfig) -> tuple[int, int]:
    """(width, height) after the model's resize to ``s = config.resize_size``, computed as timm and torchvision do:

    * ``center``: short side s, long side ``int(s · long / short)`` (torchvision's ``Resize(s)``);
    * ``squash``: s × s;
    * ``border``: long side s, short side ``round(s · short / long)`` (timm's ``ResizeKeepRatio(longest=1)``).
    """
    size = config.resize_size
    if config.crop_mode == "squash":
        return size, size
    short, long = sorted((width, height))
    if config.crop_mode == "border":
        new_short = round(short * size / long)
        return (new_short, size) if width <= height else (size, new_short)
    new_long = int(size * long / short)
    return (size, new_long) if width <= height else (new_long, size)


def check_scaled_size(image: Image.Image, config: InputConfig, name: str | None = None) -> Image.Image:
    """Refuse, before resizing, an image that would exceed :data:`MAX_SCALED_PIXELS` at the model's scale.

    Raises:
        DataError: naming the image and saying what to do (lower the input size, or use a smaller image).
    """
    width, height = scaled_size(image.width, image.height, config)
    if width * height > MAX_SCALED_PIXELS:
        label = name or f"a {image.width:,}×{image.height:,} image"
        raise DataError(f"{label} would be {width:,}×{height:,} pixels at the model's scale (resized edge "
                        f"{config.resize_size} px = input size {config.input_size} / crop {config.crop_pct:g}), over "
                        f"the {MAX_SCALED_PIXELS:,}-pixel limit. Lower the input size or raise the crop fraction, or "
                        "use a smaller or less elongated image.")
    return image


class ScaledSizeCheck:
    """:func:`check_scaled_size` as the first step of a transform (picklable, for DataLoader workers)."""

    def __init__(self, config: InputConfig) -> None:
        self.config = config

    def __call__(self, image: Image.Image) -> Image.Image:
        return check_scaled_size(image, self.config)


class ModelScaleResize:
    """The model's evaluation resize to :func:`scaled_size` (picklable, for DataLoader workers)."""

    def __init__(self, config: InputConfig) -> None:
        self.config = config

    def __call__(self, image: Image.Image) -> Image.Image:
        width, height = scaled_size(image.width, image.height, self.config)
        return T.functional.resize(image, [height, width], interpolation=_interpolation(self.config), antialias=True)


class PadToSize:
    """Pad an image smaller than ``size`` on either side up to it, centred (left/top get the smaller half), with
    ``fill`` — timm's ``CenterCropOrPad`` before its crop, which pads with the mean colour ``round(255 · mean)``."""

    def __init__(self, size: int, fill: tuple[int, int, int]) -> None:
        self.size, self.fill = size, fill

    def __call__(self, image: Image.Image) -> Image.Image:
        extra_w, extra_h = max(self.size - image.width, 0), max(self.size - image.height, 0)
        if not extra_w and not extra_h:
            return image
        padding = [extra_w // 2, extra_h // 2, (extra_w + 1) // 2, (extra_h + 1) // 2]
        return T.functional.pad(image, padding, fill=list(self.fill))


def _crop_steps(config: InputConfig) -> list:
    """Centre crop to the input size; in ``border`` mode first padded to it with the mean colour."""
    crop = [T.CenterCrop(config.input_size)]
    if config.crop_mode != "border":
        return crop
    return [PadToSize(config.input_size, tuple(round(255 * v) for v in config.mean)), *crop]


def input_transform(config: InputConfig) -> T.Compose:
    """The model's evaluation transform: resize to the model's scale (:func:`scaled_size`, by the crop mode), crop
    (:func:`_crop_steps`), normalize; images too large at that scale are refused before resizing
    (:func:`check_scaled_size`)."""
    return T.Compose([ScaledSizeCheck(config), ModelScaleResize(config), *_crop_steps(config),
                      *_to_normalized_tensor(config)])


def scaled_input(image: Image.Image, config: InputConfig, name: str | None = None) -> torch.Tensor:
    """The whole image at the model's scale (:func:`scaled_size`), normalized, shape (3, H, W); refused before
    resizing when too large at that scale (:func:`check_scaled_size`)."""
    transform = T.Compose([ModelScaleResize(config), *_to_normalized_tensor(config)])
    return transform(check_scaled_size(image, config, name))


def iter_scaled_inputs(images: ImageSet, config: InputConfig) -> Iterator[torch.Tensor]:
    """:func:`scaled_input` of every image, one (1, 3, H, W) tensor at a time."""
    for index, name in enumerate(images.names):
        yield scaled_input(images.image(index), config, name).unsqueeze(0)


def iter_input_batches(images: ImageSet, config: InputConfig, batch_size: int = 32
                       ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Centre-cropped, normalized model input in batches: ``(x (B, 3, S, S), labels (B,))``."""
    transform = input_transform(config)
    for start in range(0, len(images), batch_size):
        stop = min(start + batch_size, len(images))
        pairs = [images[i] for i in range(start, stop)]
        yield (torch.stack([transform(img) for img, _ in pairs]),
               torch.tensor([label for _, label in pairs], dtype=torch.long))


def to_display(x: torch.Tensor, config: InputConfig) -> np.ndarray:
    """Undo normalization: (3, H, W) model input -> (H, W, 3) uint8 for display."""
    mean = torch.tensor(config.mean).view(3, 1, 1)
    std = torch.tensor(config.std).view(3, 1, 1)
    rgb = (x.detach().cpu().float() * std + mean).clamp(0, 1)
    return (rgb.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)

"""Image sources and their conversion into a model's input space.

A source is ``bundled`` (natural photos that ship inside scikit-image, scikit-learn and matplotlib: no network),
a folder of images, or a labelled ImageFolder tree (``root/<class>/*.jpg``, class index = sorted folder names,
as in the ImageNet ``val/<wnid>/*.JPEG`` layout). Uploads are saved to a folder and read as one.

Two views of an image in a model's input space (:class:`~fl_core.models.InputConfig`):

* :func:`scaled_input` — resized so the short side is ``input_size / crop_pct`` (the scale the model sees) and
  normalized, *not* cropped: every overlapping patch of it is used for patch statistics.
* :func:`input_transform` — the model's evaluation transform (resize, centre crop, normalize) for forward passes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2 as T

from fl_core.errors import DataError
from fl_core.models import InputConfig

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm")
MAX_IMAGE_PIXELS = 64_000_000
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS


@dataclass(frozen=True)
class BundledPhoto:
    """A natural photo that ships inside an installed package, with its licence."""

    name: str
    package: str
    loader: Callable[[], np.ndarray]
    credit: str
    licence: str


def _skimage(name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        import skimage.data

        image = getattr(skimage.data, name)()
        return image[0] if isinstance(image, tuple) else image

    return load


def _sklearn(filename: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from sklearn.datasets import load_sample_image

        return load_sample_image(filename)

    return load


def _grace_hopper() -> np.ndarray:
    import matplotlib.cbook

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        return np.asarray(Image.open(handle).convert("RGB"))


BUNDLED_PHOTOS: tuple[BundledPhoto, ...] = (
    BundledPhoto("astronaut", "scikit-image", _skimage("astronaut"), "NASA (Eileen Collins)", "public domain"),
    BundledPhoto("coffee", "scikit-image", _skimage("coffee"), "Rachel Michetti / Pikolo Espresso Bar", "CC0"),
    BundledPhoto("chelsea", "scikit-image", _skimage("chelsea"), "Stefan van der Walt", "CC0"),
    BundledPhoto("rocket", "scikit-image", _skimage("rocket"), "SpaceX (DSCOVR launch)", "public domain"),
    BundledPhoto("hubble_deep_field", "scikit-image", _skimage("hubble_deep_field"), "NASA / HubbleSite",
                 "public domain"),
    BundledPhoto("immunohistochemistry", "scikit-image", _skimage("immunohistochemistry"),
                 "Center for Microscopy and Molecular Imaging", "no known copyright restrictions"),
    BundledPhoto("retina", "scikit-image", _skimage("retina"), "Mikael Häggström (Wikimedia Commons)", "CC0"),
    BundledPhoto("motorcycle", "scikit-image", _skimage("stereo_motorcycle"),
                 "Middlebury 2014 stereo benchmark (Scharstein et al.)", "free for research use"),
    BundledPhoto("china", "scikit-learn", _sklearn("china.jpg"), "danielbuechele (Flickr)", "CC BY 2.0"),
    BundledPhoto("flower", "scikit-learn", _sklearn("flower.jpg"), "vultilion (Flickr)", "CC BY 2.0"),
    BundledPhoto("grace_hopper", "matplotlib", _grace_hopper, "US Navy (Grace Hopper portrait)", "public domain"),
)


def bundled_licences() -> list[dict[str, str]]:
    """Rows of (photo, package, credit, licence) for the UI's licence table."""
    return [{"photo": p.name, "package": p.package, "credit": p.credit, "licence": p.licence} for p in BUNDLED_PHOTOS]


@cache
def _bundled_array(name: str) -> np.ndarray:
    photo = next(p for p in BUNDLED_PHOTOS if p.name == name)
    array = np.asarray(photo.loader())
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    return np.ascontiguousarray(array[..., :3].astype(np.uint8))


def decode_rgb(source: str | Path | io.BytesIO) -> Image.Image:
    """Decode an image as RGB. Images over ``MAX_IMAGE_PIXELS`` are refused from their header, before decoding
    (PIL itself only warns below twice that limit): a small, highly compressed file cannot unpack to gigabytes."""
    with Image.open(source) as handle:
        if handle.width * handle.height > MAX_IMAGE_PIXELS:
            raise Image.DecompressionBombError(f"{handle.width}×{handle.height} pixels is over the "
                                               f"{MAX_IMAGE_PIXELS:,}-pixel limit")
        return handle.convert("RGB")


class ImageSet(Dataset):
    """An indexable set of RGB images with integer labels (``-1`` when unlabelled).

    ``dataset[i]`` returns ``(PIL.Image, label)``; wrap it with :class:`TransformedImages` for tensors.
    """

    def __init__(self, items: Sequence[tuple[str | Callable[[], Image.Image], int, str]],
                 classes: Sequence[str] = (), description: str = "") -> None:
        self._items = list(items)
        self.classes = tuple(classes)
        self.description = description

    def __len__(self) -> int:
        return len(self._items)

    @property
    def labelled(self) -> bool:
        return bool(self.classes)

    @property
    def names(self) -> list[str]:
        return [name for _, _, name in self._items]

    @property
    def labels(self) -> list[int]:
        return [label for _, label, _ in self._items]

    def image(self, index: int) -> Image.Image:
        """The image as RGB; unreadable files raise :class:`DataError` naming the file."""
        source, _, name = self._items[index]
        if callable(source):
            return source()
        try:
            return decode_rgb(source)
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as err:
            raise DataError(f"Could not read image {name}: {err}. Remove or replace the file.") from err

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return self.image(index), self._items[index][1]

    def subset(self, indices: Sequence[int]) -> ImageSet:
        """The images at ``indices`` (same classes)."""
        return ImageSet([self._items[i] for i in indices], self.classes, self.description)


class TransformedImages(Dataset):
    """``(transform(image), label)`` pairs of an :class:`ImageSet` (DataLoader-ready)."""

    def __init__(self, images: ImageSet, transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.images[index]
        return self.transform(image), label


def bundled_images(names: Sequence[str] | None = None) -> ImageSet:
    """The bundled natural photos (offline). Labels are photo indices."""
    chosen = [p for p in BUNDLED_PHOTOS if names is None or p.name in names]
    items = [(lambda n=p.name: Image.fromarray(_bundled_array(n)), i, p.name) for i, p in enumerate(chosen)]
    return ImageSet(items, classes=[p.name for p in chosen], description=f"{len(items)} bundled photos")


def folder_images(root: str | Path, limit: int | None = None) -> ImageSet:
    """Images in a folder. If its sub-folders hold images, it is read as a labelled ImageFolder tree.

    Class index = position in the sorted sub-folder names (the torchvision/ImageNet convention).
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"No folder at {root}. Give a folder of images or an ImageFolder tree (root/class/img.jpg).")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    items: list[tuple[str, int, str]] = []
    if classes:
        for label, cls in enumerate(classes):
            items += [(str(f), label, f"{cls}/{f.name}") for f in sorted((root / cls).iterdir()) if _is_image(f)]
    if not items:
        classes = []
        items = [(str(f), -1, f.name) for f in sorted(root.iterdir()) if _is_image(f)]
    if not items:
        raise DataError(f"{root} holds no images ({', '.join(IMAGE_SUFFIXES)}).")
    if limit is not None:
        items = _spread(items, limit)
    kind = f"ImageFolder tree, {len(classes)} classes" if classes else "folder"
    return ImageSet(items, classes=classes, description=f"{len(items)} images from {root} ({kind})")


def _spread(items: list, limit: int) -> list:
    """At most ``limit`` items, evenly spaced (so every class of a sorted tree is represented)."""
    if len(items) <= limit:
        return items
    picks = np.linspace(0, len(items) - 1, limit).round().astype(int)
    return [items[i] for i in picks]


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def open_images(source: str, limit: int | None = None) -> ImageSet:
    """``"bundled"`` or a folder path -> :class:`ImageSet`."""
    if source in ("", "bundled"):
        images = bundled_images()
        return images if limit is None else images.subset(range(min(limit, len(images))))
    return folder_images(source, limit=limit)


def save_uploaded_images(files: Sequence[tuple[str, bytes]], folder: str | Path) -> ImageSet:
    """Decode uploaded image bytes (refusing non-images and decompression bombs) and save them as PNGs."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files:
        try:
            image = decode_rgb(io.BytesIO(data))
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as err:
            raise DataError(f"{name} is not a readable image ({err}).") from err
        image.save(folder / f"{Path(name).stem[:60]}.png")
    return folder_images(folder)


def _interpolation(config: InputConfig) -> InterpolationMode:
    return InterpolationMode(config.interpolation)


def _to_normalized_tensor(config: InputConfig) -> list:
    return [T.ToImage(), T.ToDtype(torch.float32, scale=True), T.Normalize(config.mean, config.std)]


def input_transform(config: InputConfig) -> T.Compose:
    """The model's evaluation transform: Resize(short side = size / crop_pct), CenterCrop(size), normalize."""
    return T.Compose([T.Resize(config.resize_size, interpolation=_interpolation(config), antialias=True),
                      T.CenterCrop(config.input_size), *_to_normalized_tensor(config)])


def scaled_input(image: Image.Image, config: InputConfig) -> torch.Tensor:
    """The whole image at the model's scale (short side = size / crop_pct), normalized, shape (3, H, W)."""
    transform = T.Compose([T.Resize(config.resize_size, interpolation=_interpolation(config), antialias=True),
                           *_to_normalized_tensor(config)])
    return transform(image)


def iter_scaled_inputs(images: ImageSet, config: InputConfig) -> Iterator[torch.Tensor]:
    """:func:`scaled_input` of every image, one (1, 3, H, W) tensor at a time."""
    for index in range(len(images)):
        yield scaled_input(images.image(index), config).unsqueeze(0)


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

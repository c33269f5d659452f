"""How images become a model's input (:class:`InputConfig`: resize, crop, normalization, as timm evaluates) and the
one codec of the preprocessing overrides that the sidebar, the URL and the command line share."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from fl_core.errors import ModelSpecError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
CROP_MODES = ("center", "squash", "border")
"""timm's evaluation crop modes (``timm.data.create_transform``): which edge the resize sets, how the crop is cut."""
MAX_RESIZE_SIZE = 4096
"""Largest edge set by the resize (``input_size / crop_pct``): the largest input size, uncropped."""
MAX_NORMALIZATION = 1000.0
"""The largest |mean| or std (of pixel values on a 0-1 scale): beyond it patch statistics overflow."""
MIN_STD = 1e-4
"""The smallest std: normalized values stay within float32's range."""
OVERRIDE_TEXT_KEYS = {"input_size": "size", "crop_pct": "crop", "interpolation": "interp", "mean": "mean",
                      "std": "std", "crop_mode": "mode"}
"""The preprocessing fields a user may override (uploaded weights: sidebar, URL, CLI) and their key in URL text."""
OVERRIDE_FIELDS = tuple(OVERRIDE_TEXT_KEYS)
Overrides = tuple[tuple[str, object], ...]
"""Preprocessing overrides as sorted ``(field, value)`` pairs (:meth:`InputConfig.overrides`): hashable."""


def parse_rgb(text: str, sep: str | None = None) -> tuple[float, float, float]:
    """Three numbers (R, G, B) separated by ``sep`` (default: whitespace); ``ValueError`` otherwise."""
    values = tuple(float(v) for v in text.split(sep))
    if len(values) != 3:
        raise ValueError(f"'{text}' is not three numbers (R, G, B)")
    return values


def rgb_text(values: tuple[float, ...], sep: str = " ") -> str:
    """``(0.485, 0.456, 0.406)`` -> ``"0.485 0.456 0.406"`` (six significant digits, :func:`parse_rgb` reads it)."""
    return sep.join(f"{v:g}" for v in values)


def _override_values(given: Mapping[str, object], strict: bool = False) -> dict[str, object]:
    """The non-``None`` preprocessing fields of ``given``, sequences as tuples; other keys dropped (refused when
    ``strict``)."""
    if strict and (unknown := set(given) - set(OVERRIDE_FIELDS)):
        raise ModelSpecError(f"Unknown preprocessing field(s) {', '.join(sorted(unknown))}: use "
                             f"{', '.join(OVERRIDE_FIELDS)}.")
    return {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in given.items()
            if k in OVERRIDE_FIELDS and v is not None}


def _value_text(value: object) -> str:
    if isinstance(value, list | tuple):
        return rgb_text(value, "/")
    return f"{value:g}" if isinstance(value, float) else str(value)


def _parse_value(name: str, text: str) -> object:
    """One override field from its URL text (``ValueError`` when malformed)."""
    if name in ("mean", "std"):
        return parse_rgb(text, "/")
    if name == "input_size":
        return int(text)
    if name == "crop_pct":
        return float(text)
    return text


@dataclass(frozen=True)
class InputConfig:
    """How images become model input: a resize to ``s = floor(input_size / crop_pct)``, a crop to ``input_size``,
    normalize — with timm's three evaluation crop modes (``timm.data.transforms_imagenet_eval``):

    * ``center`` — short side to s (aspect kept), centre crop; the image's margins are lost;
    * ``squash`` — both sides to s (aspect not kept), centre crop; nothing is lost when ``crop_pct`` = 1;
    * ``border`` — long side to s (aspect kept), centre crop, padded with the mean colour where the image is smaller.

    Patches for every statistic are taken in this input space (after normalization). Bounded: input size 8-4096,
    crop fraction in [0.05, 1], resized edge at most :data:`MAX_RESIZE_SIZE`, finite mean and positive std.
    """

    input_size: int = 224
    crop_pct: float = 0.875
    interpolation: str = "bilinear"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    crop_mode: str = "center"

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        if self.input_size < 8 or self.input_size > 4096:
            raise ModelSpecError(f"input size {self.input_size} is out of range (8-4096 pixels).")
        if not 0.05 <= self.crop_pct <= 1.0:
            raise ModelSpecError(f"crop fraction {self.crop_pct} must be in (0.05, 1].")
        if self.interpolation not in INTERPOLATIONS:
            raise ModelSpecError(f"interpolation '{self.interpolation}' must be one of {', '.join(INTERPOLATIONS)}.")
        if self.crop_mode not in CROP_MODES:
            raise ModelSpecError(f"crop mode '{self.crop_mode}' must be one of {', '.join(CROP_MODES)}.")
        if self.resize_size > MAX_RESIZE_SIZE:
            raise ModelSpecError(f"input size {self.input_size} with crop fraction {self.crop_pct:g} resizes the "
                                 f"image to {self.resize_size} pixels, over the {MAX_RESIZE_SIZE}-pixel limit: "
                                 f"raise the crop fraction to at least {self.input_size / MAX_RESIZE_SIZE:.3g} or "
                                 "lower the input size.")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ModelSpecError("mean and std need three values (R, G, B), and std must be positive.")
        if not all(abs(v) <= MAX_NORMALIZATION for v in (*self.mean, *self.std)) or min(self.std) < MIN_STD:
            raise ModelSpecError(f"mean and std must be finite numbers of at most {MAX_NORMALIZATION:g} in size, and "
                                 f"std at least {MIN_STD:g} (images are read on a 0-1 scale: ImageNet's mean is "
                                 "0.485 0.456 0.406, its std 0.229 0.224 0.225).")

    @property
    def resize_size(self) -> int:
        """The edge the resize sets (short side, both sides or long side by :attr:`crop_mode`), before the crop:
        ``floor(input_size / crop_pct)`` as timm computes it (the 1e-6 keeps ``crop / (crop / resize)`` = resize
        exact for configs given as crop and resize sizes, such as torchvision's; no timm config is changed by it)."""
        return math.floor(self.input_size / self.crop_pct + 1e-6)

    def with_overrides(self, **overrides: object) -> InputConfig:
        """A copy with the non-``None`` overrides applied (sidebar fields / CLI ``--input-size`` ...)."""
        given = _override_values(overrides, strict=True)
        return dataclasses.replace(self, **given) if given else self

    def changed_fields(self, chosen: Mapping[str, object]) -> dict[str, object]:
        """The fields of ``chosen`` (a form's values) that differ from this config: the overrides to keep."""
        return {k: v for k, v in _override_values(chosen).items() if getattr(self, k) != v}

    @staticmethod
    def overrides(given: Mapping[str, object]) -> Overrides:
        """The preprocessing overrides in ``given`` (field names; argparse's ``vars(args)`` too) as sorted pairs:
        the non-``None`` values, sequences as tuples, other keys dropped; hashable, so a cache key."""
        return tuple(sorted(_override_values(given).items()))

    @staticmethod
    def overrides_to_text(overrides: Mapping[str, object] | Overrides) -> str:
        """Overrides as URL text, e.g. ``size=32;crop=1;mean=0.49/0.48/0.45`` (:meth:`overrides_from_text`)."""
        return ";".join(f"{OVERRIDE_TEXT_KEYS[k]}={_value_text(v)}" for k, v in dict(overrides).items())

    @staticmethod
    def overrides_from_text(text: str) -> dict[str, object]:
        """The overrides of :meth:`overrides_to_text` text; unknown or malformed parts are ignored (an edited URL)."""
        fields = {key: name for name, key in OVERRIDE_TEXT_KEYS.items()}
        overrides: dict[str, object] = {}
        for part in filter(None, text.split(";")):
            key, _, value = part.partition("=")
            if key in fields:
                with contextlib.suppress(ValueError):
                    overrides[fields[key]] = _parse_value(fields[key], value)
        return overrides

    def describe(self) -> str:
        """In words: ``224 px, cropped from 256 px, bilinear, mean 0.485 0.456 0.406, std 0.229 0.224 0.225``."""
        crop = "no crop" if self.resize_size == self.input_size else f"cropped from {self.resize_size} px"
        mode = "" if self.crop_mode == "center" else f" ({self.crop_mode})"
        return (f"{self.input_size} px, {crop}{mode}, {self.interpolation}, mean {rgb_text(self.mean)}, "
                f"std {rgb_text(self.std)}")

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

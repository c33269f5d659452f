"""How images become a model's input (:class:`InputConfig`: resize, crop, normalization, as timm evaluates) and the
one codec of the preprocessing overrides that the sidebar, the URL and the command line share."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from fl_core.compute.budgets import check_scaled_images
from fl_core.errors import ModelSpecError
from fl_core.settings import Settings, setting

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
class InputConfig(Settings):
    """How images become model input: a resize to ``s = floor(input_size / crop_pct)``, a crop to ``input_size``,
    normalize — with timm's three evaluation crop modes (``timm.data.transforms_imagenet_eval``):

    * ``center`` — short side to s (aspect kept), centre crop; the image's margins are lost;
    * ``squash`` — both sides to s (aspect not kept), centre crop; nothing is lost when ``crop_pct`` = 1;
    * ``border`` — long side to s (aspect kept), centre crop, padded with the mean colour where the image is smaller.

    Patches for every statistic are taken in this input space (after normalization). Bounded: input size 8-4096,
    crop fraction in [0.05, 1], resized edge at most :data:`MAX_RESIZE_SIZE`, finite mean and positive std.

    Attributes:
        input_size: square input size in pixels.
        crop_pct: crop fraction: resize to size/crop_pct (the edge the crop mode names), then crop size.
        interpolation: the resize's interpolation.
        mean, std: per-channel normalization (R, G, B) of pixel values on a 0-1 scale.
        crop_mode: timm's crop modes: resize the short side (center), both sides (squash) or the long side with
            mean-colour padding (border) to size/crop_pct, then centre-crop.
    """

    input_size: int = setting(224, minimum=8, maximum=MAX_RESIZE_SIZE)
    crop_pct: float = setting(0.875, minimum=0.05, maximum=1.0)
    interpolation: str = setting("bilinear", choices=INTERPOLATIONS)
    mean: tuple[float, float, float] = setting(IMAGENET_MEAN, minimum=-MAX_NORMALIZATION, maximum=MAX_NORMALIZATION)
    std: tuple[float, float, float] = setting(IMAGENET_STD, minimum=MIN_STD, maximum=MAX_NORMALIZATION)
    crop_mode: str = setting("center", choices=CROP_MODES)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.resize_size > MAX_RESIZE_SIZE:
            raise ModelSpecError(f"input size {self.input_size} with crop fraction {self.crop_pct:g} resizes the "
                                 f"image to {self.resize_size} pixels, over the {MAX_RESIZE_SIZE}-pixel limit: "
                                 f"raise the crop fraction to at least {self.input_size / MAX_RESIZE_SIZE:.3g} or "
                                 "lower the input size.")

    @property
    def resize_size(self) -> int:
        """The edge the resize sets (short side, both sides or long side by :attr:`crop_mode`), before the crop:
        ``floor(input_size / crop_pct)`` as timm computes it (the 1e-6 keeps ``crop / (crop / resize)`` = resize
        exact for configs given as crop and resize sizes, such as torchvision's; no timm config is changed by it)."""
        return math.floor(self.input_size / self.crop_pct + 1e-6)

    def with_overrides(self, **overrides: object) -> InputConfig:
        """A copy with the non-``None`` overrides applied (sidebar fields / CLI ``--input-size`` ...), refused when the
        images it resizes would not fit an analysis's memory (:func:`fl_core.compute.budgets.check_scaled_images`)."""
        given = _override_values(overrides, strict=True)
        if not given:
            return self
        config = dataclasses.replace(self, **given)
        check_scaled_images(config.resize_size, f"input size {config.input_size} with crop fraction "
                                                f"{config.crop_pct:g}")
        return config

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

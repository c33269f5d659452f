"""What the public entry points accept, made into what they compute on; misuse raises an :class:`ArgumentError`
that names the argument.

Every family has one call shape, ``analyze_<family>(models_or_model, data=None, settings=None, *, device=None,
progress=None, **setting_overrides)``:

* a model is a spec string (``"demo:squeezenet1_0"``), a :class:`~fl_core.io.models.LoadedModel` or an ``nn.Module``
  (:meth:`LoadedModel.from_module <fl_core.io.models.LoadedModel.from_module>`, default preprocessing);
* data is an image source string (``"bundled"``, a folder, ``"cifar10:PATH"``), an
  :class:`~fl_core.io.images.ImageSet`, or images a script holds: a tensor batch ``(N, 3, H, W)``, a
  ``torch.utils.data.Dataset`` of images or ``(image, label)`` pairs, or a ``DataLoader`` of such batches, RGB values
  in [0, 1] (or ``uint8``) before normalization (:mod:`fl_core.io.datasets`);
* settings is the family's frozen settings object (``None``: its defaults), and keywords named like its fields
  (nested settings' fields too) override it.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from fl_core.compute.progress import Progress, report
from fl_core.errors import ArgumentError, value_text
from fl_core.io.datasets import DatasetImages, loader_images, tensor_images
from fl_core.io.images import BUNDLED, ImageSet, open_images
from fl_core.io.models import LoadedModel, load_model
from fl_core.settings import Settings, replace_settings, settings_fields

S = TypeVar("S", bound=Settings)
ModelLike = str | LoadedModel | nn.Module
"""What a model argument takes: a spec string, a loaded model or a PyTorch module."""

ImagesLike = str | Path | ImageSet | torch.Tensor | Dataset | DataLoader
"""What a data argument takes: an image source, an image set, a tensor batch (N, 3, H, W), a Dataset or a
DataLoader (:func:`as_images`)."""

_MODEL_FORMS = "a model spec string (e.g. 'demo:squeezenet1_0'), a LoadedModel or a torch.nn.Module"


def as_model(value: Any, argument: str = "model", progress: Progress | None = None) -> LoadedModel:
    """One model from a spec string (loaded: ``progress`` hears ``loading SPEC`` first, as a hub download or a large
    checkpoint takes a while), a :class:`LoadedModel` or an ``nn.Module``."""
    if isinstance(value, LoadedModel):
        return value
    if isinstance(value, str):
        report(progress, 0.0, f"loading {value}")
        return load_model(value)
    if isinstance(value, nn.Module):
        return LoadedModel.from_module(value)
    if isinstance(value, Sequence | set):
        raise ArgumentError(f"{argument} takes one model, not a {type(value).__name__} of {len(value)}: call once "
                            "per model.")
    raise ArgumentError(f"{argument} must be {_MODEL_FORMS}, not {value_text(value)}.")


def as_models(value: Any, argument: str = "models", progress: Progress | None = None) -> list[LoadedModel]:
    """One or several models (a single model or a list of them), each as :func:`as_model` takes it; their specs must
    differ (results are keyed by spec)."""
    items = list(value) if isinstance(value, Sequence | set) and not isinstance(value, str) else [value]
    if not items:
        raise ArgumentError(f"{argument} is empty: give at least one model ({_MODEL_FORMS}).")
    models = [as_model(item, f"{argument}[{i}]", progress) for i, item in enumerate(items)]
    specs = [m.spec for m in models]
    repeated = sorted({s for s in specs if specs.count(s) > 1})
    if repeated:
        raise ArgumentError(f"{argument} names {', '.join(repeated)} more than once; results are keyed by spec, so "
                            "give each nn.Module its own name: LoadedModel.from_module(module, name=...).")
    return models


def as_images(data: Any, argument: str = "data") -> ImageSet:
    """An image set from a source string (``"bundled"``, a folder, an ImageFolder tree, ``"cifar10:PATH"``), an
    :class:`ImageSet`, a tensor batch, a ``Dataset`` or a ``DataLoader`` (module docstring); ``None``: the bundled
    photos."""
    if data is None:
        return open_images(BUNDLED)
    if isinstance(data, ImageSet):
        return data
    if isinstance(data, str | Path):
        return open_images(str(data))
    if isinstance(data, torch.Tensor):
        return tensor_images(data)
    if isinstance(data, DataLoader):
        return loader_images(data)
    check_images(data, argument)
    return DatasetImages(data)


def as_settings(cls: type[S], settings: Any, overrides: Mapping[str, Any], argument: str = "settings") -> S:
    """``settings`` (``None``: ``cls()``) with the keyword ``overrides`` applied, nested settings' fields included.

    Raises:
        ArgumentError: ``settings`` is not a ``cls``, or an override names no field of it.
    """
    if settings is None:
        settings = cls()
    elif not isinstance(settings, cls):
        raise ArgumentError(f"{argument} must be a {cls.__name__} (or None for its defaults), not "
                            f"{value_text(settings)}.")
    known = {f.name for f in settings_fields(cls)} | {f.name for f in dataclasses.fields(cls)}
    unknown = [name for name in overrides if name not in known]
    if unknown:
        raise ArgumentError(f"{', '.join(map(repr, unknown))}: no such setting of {cls.__name__}; its settings are "
                            f"{', '.join(sorted(known))}.")
    return cast(S, replace_settings(settings, overrides)) if overrides else settings


def check_images(data: Any, argument: str = "data") -> None:
    """Refuse what :func:`as_images` would refuse, without opening anything (``None`` passes)."""
    if data is not None and not isinstance(data, str | Path | ImageSet | torch.Tensor | DataLoader | Dataset):
        raise ArgumentError(f"{argument} must be an image source ('bundled', a folder, an ImageFolder tree or "
                            f"'cifar10:PATH'), an ImageSet, a tensor batch (N, 3, H, W), a Dataset or a DataLoader, "
                            f"not {value_text(data)}.")


def weights_only_data(data: Any, function: str, argument: str = "data") -> None:
    """``data`` of an analysis of the weights alone (the filters are its data): accepted as every family takes it and
    ignored with a notice (a :class:`UserWarning`), so a loop over families can pass the same images to each; settings
    given where the data goes are refused."""
    if data is None:
        return
    if isinstance(data, Settings):
        raise ArgumentError(f"{function} analyses the weights alone and takes no {argument} (got {value_text(data)} "
                            f"where the {argument} goes); pass settings by keyword: settings=... or k=8.")
    check_images(data, argument)
    warnings.warn(f"{function} analyses the weights alone: the {argument} given is not used.", UserWarning,
                  stacklevel=3)


no_data = weights_only_data
"""The earlier name of :func:`weights_only_data` (a family written for it keeps working)."""

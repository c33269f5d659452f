"""Registry architectures (``timm:NAME``, ``torchvision:NAME``): built within the parameter budget, with the
registry's own evaluation preprocessing, and the hub's download failures turned into one message."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from functools import cache

import torch
from torch import nn

from fl_core.compute.budgets import check_parameters
from fl_core.errors import ModelSpecError, WeightsUnavailableError
from fl_core.io.preprocessing import INTERPOLATIONS, InputConfig
from fl_core.io.specs import check_registry_name


def build_timm(name: str, pretrained: bool, num_classes: int | None) -> tuple[nn.Module, InputConfig]:
    import timm
    from timm.data import resolve_data_config

    check_registry_name("timm", name)
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    with _hub_errors(name, "timm"):
        model = build_within_budget(lambda meta: timm.create_model(name, pretrained=pretrained and not meta,
                                                                   **kwargs), f"timm:{name}")
    return model, _timm_input_config(resolve_data_config({}, model=model, use_test_size=True))


def _timm_input_config(data: Mapping[str, object]) -> InputConfig:
    """The input config timm evaluates with: ``resolve_data_config(..., use_test_size=True)`` (as timm's
    ``validate.py``: the pretrained config's test size and test crop where it has them) and its crop mode. Read
    from the model's ``pretrained_cfg`` metadata, so it needs no download."""
    return InputConfig(input_size=int(data["input_size"][-1]), crop_pct=float(data["crop_pct"]),
                       interpolation=_known_interpolation(data["interpolation"]), mean=tuple(data["mean"]),
                       std=tuple(data["std"]), crop_mode=str(data.get("crop_mode") or "center"))


def build_torchvision(name: str, pretrained: bool, num_classes: int | None) -> tuple[nn.Module, InputConfig]:
    """The model and its DEFAULT weights' own evaluation transform (``weights.transforms()``: resize of the short
    side, centre crop, interpolation, mean/std), metadata that needs no download."""
    import torchvision

    check_registry_name("torchvision", name)
    weights_enum = torchvision.models.get_model_weights(name)
    default = weights_enum.DEFAULT
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    with _hub_errors(name, "torchvision"):
        model = build_within_budget(lambda meta: torchvision.models.get_model(
            name, weights=default if pretrained and not meta else None, **kwargs), f"torchvision:{name}")
    preset = default.transforms()
    crop, resize = int(preset.crop_size[0]), int(preset.resize_size[0])
    config = InputConfig(input_size=crop, crop_pct=crop / resize, interpolation=preset.interpolation.value,
                         mean=tuple(preset.mean), std=tuple(preset.std))
    return model, config


_BUILDING = threading.local()
"""The parameter count of the network this thread is building, and its limit (:func:`build_within_budget`)."""


def _count_registered(_module: nn.Module, _name: str, parameter: nn.Parameter | None) -> None:
    if getattr(_BUILDING, "name", None) is None or parameter is None:
        return
    _BUILDING.count += parameter.numel()
    check_parameters(_BUILDING.count, _BUILDING.name, building=True)


def build_within_budget(build: Callable[[bool], nn.Module], name: str) -> nn.Module:
    """``build(meta=False)``, refused by :func:`fl_core.compute.budgets.check_parameters` before it is materialised: its
    parameters are counted on the meta device first (``build(meta=True)``: no memory, no weights fetched). A network
    whose construction needs real values (it computes its widths with tensors) is counted while it is built instead:
    each parameter as it is registered, the build stopped as soon as the count passes the limit."""
    try:
        with torch.device("meta"):
            count = sum(p.numel() for p in build(True).parameters())
    except Exception:  # any failure on the meta device: count while building instead
        count = None
    if count is not None:
        check_parameters(count, name)
        return build(False)
    _BUILDING.name, _BUILDING.count = name, 0
    hook = torch.nn.modules.module.register_module_parameter_registration_hook(_count_registered)
    try:
        return build(False)
    finally:
        hook.remove()
        _BUILDING.name = None


def _known_interpolation(name: str) -> str:
    return name if name in INTERPOLATIONS else "bicubic"


@cache
def hub_offline() -> bool:
    """Whether the Hugging Face hub is used offline, decided once per process (not per request).

    ``HF_HUB_OFFLINE`` as set in the environment wins; otherwise, when huggingface.co cannot be reached, the hub is
    switched offline for the whole process, once, so that no request waits for the hub's slow retries.
    """
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE and not _reachable("huggingface.co"):
        constants.HF_HUB_OFFLINE = True
    return bool(constants.HF_HUB_OFFLINE)


@contextlib.contextmanager
def _hub_errors(name: str, library: str) -> Iterator[None]:
    """Turn download failures into one clear message."""
    if library == "timm":
        hub_offline()
    try:
        yield
    except (OSError, RuntimeError, ValueError) as err:
        if isinstance(err, ValueError) and "weights" not in str(err).lower():
            raise
        cache = "HF_HOME (Hugging Face cache)" if library == "timm" else "TORCH_HOME (torch hub cache)"
        raise WeightsUnavailableError(
            f"Pretrained weights for {library}:{name} could not be downloaded or found in the local cache "
            f"({type(err).__name__}). Either supply the file yourself with the spec {library}:{name}=PATH "
            f"(.safetensors/.pth), or warm the cache on a machine with network and point {cache} at it."
        ) from err


def _reachable(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def registry_model(arch: str) -> tuple[nn.Module, InputConfig]:
    """``timm:NAME`` / ``torchvision:NAME`` → the untrained architecture and its registry input config (the
    architecture of a demo built on a registry network)."""
    source, _, name = arch.partition(":")
    if source not in ("timm", "torchvision"):
        raise ModelSpecError(f"'{arch}' is not a registry architecture (timm:NAME or torchvision:NAME).")
    return (build_timm if source == "timm" else build_torchvision)(name, False, None)

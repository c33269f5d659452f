"""Where an analysis computes: the device (``FL_DEVICE``: ``cpu``, ``cuda``, ``cuda:1``, ``mps``, overrides the
automatic choice), the dtypes of its statistics and products, the CPU layout, the threads it takes beside other
work, autocast."""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator

import torch
from torch import nn

from fl_core.errors import ArgumentError
from fl_core.settings import device_name

DeviceLike = str | torch.device | None
"""What an analysis's ``device=`` takes: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``, a ``torch.device``, or
``None``/``"auto"`` (``FL_DEVICE``, else the best available)."""


def default_device() -> torch.device:
    """The device named by ``FL_DEVICE``, else CUDA, else MPS, else CPU."""
    requested = os.environ.get("FL_DEVICE", "").strip()
    if requested and requested != "auto":
        return resolve_device(requested, argument="FL_DEVICE")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def resolve_device(device: DeviceLike, argument: str = "device") -> torch.device:
    """``None``/``"auto"``: :func:`default_device`; a name or ``torch.device`` that this machine has, as a
    ``torch.device``.

    Raises:
        ArgumentError: an unknown device (:func:`fl_core.settings.device_name`), or an accelerator this machine does
            not have: never a silent run on the CPU.
    """
    if device is None or str(device) == "auto":
        return default_device()
    if not isinstance(device, torch.device):
        device = device_name(device, argument)
    dev = torch.device(device)
    if dev.type == "cpu" or (dev.type == "mps" and _mps_available()) or (
            dev.type == "cuda" and torch.cuda.is_available() and (dev.index or 0) < torch.cuda.device_count()):
        return dev
    raise ArgumentError(f"{argument} {str(dev)!r} is not available on this machine, which has "
                        f"{', '.join(available_devices())}: pick one of those, or 'auto'.")


def available_devices() -> list[str]:
    """Device names a user may pick in the sidebar or pass as ``--device``."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        names.append("mps")
    return names


def statistics_dtype(device: torch.device) -> torch.dtype:
    """float64 for accumulators where the device supports it (MPS has no float64)."""
    return torch.float32 if device.type == "mps" else torch.float64


FAST_FLOAT64_CUDA = frozenset({(6, 0), (7, 0), (8, 0), (9, 0), (10, 0)})
"""CUDA compute capabilities whose float64 runs at half the float32 rate or better (P100, V100, A100, H100/H200,
B200). Other GPUs (GeForce, RTX workstation, L4/L40, T4) run float64 at 1/32-1/64 of float32."""


def product_dtype(device: torch.device) -> torch.dtype:
    """dtype of the large products (patch Gram matrices) that are then accumulated in :func:`statistics_dtype`.

    The rule: float64 on the CPU and on GPUs with fast float64 (:data:`FAST_FLOAT64_CUDA`); float32 on every
    other accelerator, each band's product accumulated into the float64 total. With operands centred by a
    per-channel shift, float32 products keep the patch-PCA λ of natural 7×7×3 patches within ~2e-3 relative of
    float64 at the smallest λ and ~1e-5 at the median (tests/firstlayer/test_patches.py measures it).
    """
    if device.type == "cuda" and torch.cuda.get_device_capability(device) in FAST_FLOAT64_CUDA:
        return torch.float64
    return torch.float64 if device.type == "cpu" else torch.float32


def cpu_layout(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` (a private copy) with its 4-D weights channels-last on a CPU, so its convolutions run in oneDNN's
    native layout instead of reordering every activation (docs/results.md, "Measurements behind design choices");
    as it is on other devices."""
    return model.to(memory_format=torch.channels_last) if device.type == "cpu" else model


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable tasks), ``None`` where the system has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def analysis_threads(device: torch.device, load: float | None = None) -> int:
    """The CPU threads an analysis runs with on ``device``: torch's, at most as many as the cores the load average
    ``load`` (default: now) leaves idle, rounded up, and at least one. On a machine busy with other work, threads that
    cannot all run at once wait for each other at every operation's barrier: MobileNetV2's passes of 8 images at a
    load of 14 on 2 cores took 0.20 CPU-s and 0.5 s in one thread, 0.6–1.7 CPU-s and 1.7–5.2 s in two."""
    threads = torch.get_num_threads()
    load = load_average() if load is None else load
    if device.type != "cpu" or load is None:
        return threads
    return max(1, min(threads, math.ceil((os.cpu_count() or 1) - load)))


_THREAD_LIMITS: list[int] = []
_THREADS_BEFORE: list[int] = []
_THREADS_LOCK = threading.Lock()


@contextlib.contextmanager
def cpu_threads(count: int) -> Iterator[None]:
    """torch's CPU threads at most ``count`` inside the block (the smallest of the limits active and the threads
    before the first), restored when the last ends (as threadpoolctl's ``threadpool_limits``)."""
    with _THREADS_LOCK:
        if not _THREAD_LIMITS:
            _THREADS_BEFORE[:] = [torch.get_num_threads()]
        _THREAD_LIMITS.append(count)
        torch.set_num_threads(min(_THREAD_LIMITS + _THREADS_BEFORE))
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREAD_LIMITS.remove(count)
            torch.set_num_threads(min(_THREAD_LIMITS + _THREADS_BEFORE))


@contextlib.contextmanager
def inference_autocast(device: torch.device, enabled: bool = True) -> Iterator[None]:
    """``torch.inference_mode`` plus bf16/fp16 autocast on accelerators (never on CPU: it is slower there)."""
    with torch.inference_mode():
        if enabled and device.type == "cuda":
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            with torch.autocast("cuda", dtype=dtype):
                yield
        else:
            yield

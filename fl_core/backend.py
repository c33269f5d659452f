"""Device choice, autocast, progress reporting and the classifier evaluation loop shared by every analysis.

``FL_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``) overrides the automatic choice.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from fl_core.errors import AnalysisError

Progress = Callable[[float, str], None]
"""``progress(fraction_done, message)``: pages map it to ``st.progress``, the CLI to ``tqdm``."""


def default_device() -> torch.device:
    """The device named by ``FL_DEVICE``, else CUDA, else MPS, else CPU."""
    requested = os.environ.get("FL_DEVICE", "").strip()
    if requested:
        return resolve_device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """Turn ``None``/``"auto"``/a name into a usable ``torch.device``; unavailable accelerators fall back to CPU."""
    if device is None or str(device) == "auto":
        return default_device()
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        return torch.device("cpu")
    return dev


def available_devices() -> list[str]:
    """Device names a user may pick in the sidebar or pass as ``--device``."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
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
    native layout instead of reordering every activation (MobileNetV2 forward passes on 2 cores: 1.4× faster); as it
    is on other devices."""
    return model.to(memory_format=torch.channels_last) if device.type == "cpu" else model


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


def report(progress: Progress | None, fraction: float, message: str) -> None:
    """Call ``progress`` if given, clamping the fraction to [0, 1]."""
    if progress is not None:
        progress(min(max(float(fraction), 0.0), 1.0), message)


def sub_progress(progress: Progress | None, start: float, stop: float) -> Progress | None:
    """A progress callback that maps [0, 1] onto [start, stop] of ``progress`` (for nested steps)."""
    if progress is None:
        return None

    def scaled(fraction: float, message: str) -> None:
        report(progress, start + (stop - start) * fraction, message)

    return scaled


def evaluate_logits(batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """Mean cross-entropy and top-1 accuracy over ``(logits, labels)`` batches (float32 logits, labels on their
    device)."""
    loss, correct, count = 0.0, 0, 0
    for logits, y in batches:
        if len(y) and int(y.max()) >= logits.shape[1]:
            raise AnalysisError(f"Labels go up to {int(y.max())} but the model has {logits.shape[1]} outputs.")
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(1) == y).sum())
        count += len(y)
    if not count:
        raise AnalysisError("There are no images to evaluate the model on: give more images.")
    return loss / count, correct / count


def evaluate_classifier(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device,
                        *, autocast: bool = False,
                        on_logits: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> tuple[float, float]:
    """Mean cross-entropy and top-1 accuracy of ``model`` over labelled ``(x, y)`` batches (:func:`evaluate_logits`).

    Runs in eval mode (the model's mode is restored after) under :func:`inference_autocast` (``autocast``: bf16/fp16 on
    CUDA), on float32 logits. ``on_logits(logits, y)`` sees each batch on ``device`` after its forward pass.
    """
    def logits() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for x, y in batches:
            out, y = model(x.to(device)).float(), y.to(device)
            yield out, y
            if on_logits is not None:
                on_logits(out, y)

    was_training = model.training
    model.eval()
    try:
        with inference_autocast(device, enabled=autocast):
            return evaluate_logits(logits())
    finally:
        model.train(was_training)

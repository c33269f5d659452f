"""The one evaluation loop of a classifier: mean cross-entropy and top-1 accuracy over labelled batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from fl_core.compute.device import inference_autocast
from fl_core.errors import AnalysisError


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

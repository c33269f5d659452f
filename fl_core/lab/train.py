"""Training small CNNs on in-memory data, with first-layer snapshots (demo checkpoints and the Training Lab).

Defaults are the Training Lab's (``RunSettings`` embeds :class:`TrainSettings`): the authors' plain SGD
(``momentum=0``), cross-entropy and no augmentation, with a larger step and fewer steps so a run finishes in CPU
minutes. Training is deterministic under ``TrainSettings.seed`` on CPU (the model's initialization is the caller's: seed
it before building the model)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fl_core.compute.device import resolve_device
from fl_core.compute.progress import Progress, report
from fl_core.lab.settings import TrainSettings
from fl_core.networks.evaluation import evaluate_classifier
from fl_core.results import Result

LOG_SECONDS = 1.0
"""Longest wall time between two logging intervals (progress, the one read of the device, the stop check), so a long
run reports and can be cancelled every second even when 1 % of its steps takes longer."""


@dataclass(frozen=True)
class TrainHistory(Result):
    """What happened during training.

    Attributes:
        steps: steps at which metrics were recorded.
        train_loss, train_accuracy: running means over the steps since the previous record.
        val_loss, val_accuracy: on the validation set at those steps.
        seconds: wall time of the run.
        snapshots: step -> first-layer weights (K, C, kh, kw) at that step (also the last step of a cancelled run).
        config: the training configuration.
        stopped_early: True when ``should_stop`` ended the run before ``config.steps``.
    """

    steps: list[int]
    train_loss: list[float]
    train_accuracy: list[float]
    val_loss: list[float]
    val_accuracy: list[float]
    seconds: float
    snapshots: dict[int, np.ndarray] = field(default_factory=dict)
    config: TrainSettings = field(default_factory=TrainSettings)
    stopped_early: bool = False

    _private_fields = ("snapshots",)

    @property
    def final_val_accuracy(self) -> float:
        return self.val_accuracy[-1] if self.val_accuracy else float("nan")

    @property
    def final_train_accuracy(self) -> float:
        return self.train_accuracy[-1] if self.train_accuracy else float("nan")

    @classmethod
    def from_dict(cls, data: dict, snapshots: dict[int, np.ndarray] | None = None) -> TrainHistory:
        """Rebuild a history from its ``to_dict()`` (snapshots are stored separately)."""
        config = dict(data.get("config") or {})
        config["snapshot_steps"] = tuple(config.get("snapshot_steps", ()))
        fields = {k: data[k] for k in ("steps", "train_loss", "train_accuracy", "val_loss", "val_accuracy")}
        return cls(**{k: [float("nan") if v is None else v for v in values] for k, values in fields.items()},
                   seconds=float(data.get("seconds", 0.0)), snapshots=dict(snapshots or {}),
                   config=TrainSettings(**config), stopped_early=bool(data.get("stopped_early", False)))


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, prepare: Callable[[torch.Tensor], torch.Tensor],
             device: torch.device, batch_size: int = 512) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on (x, y)
    (:func:`fl_core.networks.evaluation.evaluate_classifier`)."""
    batches = ((prepare(x[start: start + batch_size].to(device)), y[start: start + batch_size])
               for start in range(0, len(x), batch_size))
    return evaluate_classifier(model, batches, device)


def train_classifier(model: nn.Module, train_x: torch.Tensor, train_y: torch.Tensor, val_x: torch.Tensor,
                     val_y: torch.Tensor, prepare: Callable[[torch.Tensor], torch.Tensor], first_layer: nn.Conv2d,
                     config: TrainSettings | None = None, *, device=None, progress: Progress | None = None,
                     should_stop: Callable[[], bool] | None = None,
                     on_snapshot: Callable[[int, np.ndarray], None] | None = None,
                     at_snapshot: Callable[[int, nn.Module], None] | None = None) -> TrainHistory:
    """Train ``model`` in place with SGD + cross-entropy on mini-batches drawn without replacement per epoch.

    Args:
        model: the network (changed in place: pass a copy of anything cached).
        train_x, train_y, val_x, val_y: data tensors (raw, turned into model input by ``prepare``).
        prepare: raw batch on the device -> model input (e.g. uint8 -> normalized float).
        first_layer: the module whose weights are snapshotted (and frozen with ``freeze_first``).
        config: optimizer and schedule (default: ``TrainSettings()``).
        device: where to train.
        progress: ``progress(fraction, message)``, called at every logging interval (every 1 % of the steps and at
            least every :data:`LOG_SECONDS`: the running training loss since the last evaluation) and at each
            evaluation.
        should_stop: polled at every logging interval (nothing per step); training ends there when it returns True
            (cancel button).

    The steps between logging intervals never wait for the device: the running loss and accuracy stay on it and
    are read once per interval.
        on_snapshot: called with ``(step, weights)`` whenever a first-layer snapshot is taken (live views).
        at_snapshot: called with ``(step, model)`` after each snapshot (e.g. a layer's channel axes measured on a copy;
            it must leave the model, its mode and the random state of training as they are).
    """
    config = config or TrainSettings()
    device = resolve_device(device)
    model.to(device).train()
    first_layer.weight.requires_grad_(not config.freeze_first)
    if first_layer.bias is not None:
        first_layer.bias.requires_grad_(not config.freeze_first)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    history: dict[str, list] = {k: [] for k in ("steps", "train_loss", "train_accuracy", "val_loss", "val_accuracy")}
    snapshots: dict[int, np.ndarray] = {}

    def snapshot(step: int) -> None:
        snapshots[step] = first_layer.weight.detach().cpu().numpy().copy()
        if on_snapshot is not None:
            on_snapshot(step, snapshots[step])
        if at_snapshot is not None:
            at_snapshot(step, model)

    if 0 in config.snapshot_steps:
        snapshot(0)
    report_every = max(1, config.steps // 100)
    train_x, train_y = train_x.to(device), train_y.to(device)  # in-memory data: batches are drawn on the device
    running = torch.zeros(2, dtype=torch.float64, device=device)  # Σ loss·batch, Σ correct since the last record
    running_count = 0
    order = torch.randperm(len(train_x), generator=generator).to(device)
    step, cursor, start = 0, 0, time.perf_counter()
    logged = start
    for step in range(1, config.steps + 1):
        if cursor + config.batch_size > len(order):
            order, cursor = torch.randperm(len(train_x), generator=generator).to(device), 0
        index = order[cursor: cursor + config.batch_size]
        cursor += config.batch_size
        xb, yb = prepare(train_x[index]), train_y[index]
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            running += torch.stack([loss.detach().double() * len(index), (logits.argmax(1) == yb).sum().double()])
        running_count += len(index)
        evaluating = step % config.eval_every == 0 or step == config.steps
        logging = evaluating or step % report_every == 0 or time.perf_counter() - logged >= LOG_SECONDS
        stop = logging and should_stop is not None and should_stop()
        if step in config.snapshot_steps or (stop and config.snapshot_steps):
            snapshot(step)
        if not logging:
            continue
        logged = time.perf_counter()
        loss_sum, correct = running.tolist()  # the one wait for the device in a logging interval
        if evaluating or stop:
            val_loss, val_acc = evaluate(model, val_x, val_y, prepare, device)
            for key, value in zip(history, (step, loss_sum / running_count, correct / running_count, val_loss,
                                            val_acc)):
                history[key].append(value)
            running.zero_()
            running_count = 0
            report(progress, step / config.steps, f"step {step}/{config.steps}: validation accuracy {val_acc:.1%}")
        else:
            report(progress, step / config.steps,
                   f"step {step}/{config.steps}: training loss {loss_sum / running_count:.3f}")
        if stop:
            break
    model.eval()
    return TrainHistory(**history, seconds=time.perf_counter() - start, snapshots=snapshots, config=config,
                        stopped_early=step < config.steps)

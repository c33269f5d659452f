"""Training Lab runs: one configuration -> one trained network, its first-layer snapshots and metrics, on disk.

A run folder holds::

    run.json            configuration, metrics per evaluation, provenance (format ``filterlens-run/1``)
    first_layer.safetensors   first-layer weights at each snapshot step (``step_000000`` …, step 0 = init)
    pca.safetensors     the patch PCA of the inputs the first layer saw (plus, for App. D.2, the unmodified one)
    init.safetensors    full state dict at initialization   } optional; loadable anywhere as ``weights:PATH``,
    final.safetensors   full state dict after training      } and shipped runs as ``demo:NAME`` entries
    checkpoints/        with ``channel_axes``: the full state dict at every snapshot (``step_000000.safetensors`` …,
                        the step in its metadata), from which ``channels --model weights:RUN`` measures the axes again

With ``channel_axes`` (a convolution's name) ``run.json`` also holds that layer's axes at every snapshot
(:class:`~fl_core.channelaxes.training.AxesTrajectory`: ρ, ARI, measurable task information and the claim-5 cosines
with their intervals), measured on the validation crops.

Defaults follow the authors' optimizer (plain SGD, cross-entropy, no augmentation) with a larger step and fewer
steps so a run finishes in CPU minutes (Chowers & Weiss use lr 0.01, batch 256, 30 epochs of CIFAR10).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from torch import nn
from torchvision.transforms import v2 as T

from fl_core.channelaxes.training import AxesFollower, AxesTrajectory, analysis_data, training_axes_settings
from fl_core.compute.budgets import check_training
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import DataError, FilterLensError, ModelSpecError
from fl_core.firstlayer.patches import PatchPCA
from fl_core.io import ASSETS_DIR, DEMO_DIR
from fl_core.io.checkpoints import load_state_dict, save_state_dict
from fl_core.io.crops import CropData
from fl_core.io.layers import find_layer
from fl_core.io.models import LoadedModel
from fl_core.io.nets import build_net
from fl_core.io.paths import check_readable, check_writable, runs_root
from fl_core.io.preprocessing import InputConfig
from fl_core.io.registries import build_within_budget
from fl_core.lab.settings import RunSettings
from fl_core.lab.train import TrainHistory, train_classifier
from fl_core.lab.trainsets import (
    LabelledSplit,
    TileScaling,
    crop_dataset,
    crops_pca,
    label_variant,
    train_crop_count,
)
from fl_core.results import Result, with_model_columns

RUN_FORMAT = "filterlens-run/1"
SHIPPED_RUNS_DIR = ASSETS_DIR / "runs"
CROP_BYTES = 3 * 32 * 32
"""Memory of one training crop (uint8 values, held through the run)."""


def user_runs_dir() -> Path:
    """Where runs launched from the command line go: ``FL_RUNS_DIR`` (default: a temp folder)."""
    root = runs_root()
    root.mkdir(parents=True, exist_ok=True)
    return root


SESSION_TOKEN = re.compile(r"[0-9a-f]{32}")
"""A browser session's runs token: 32 hex digits (a random UUID), never a path."""


def session_runs_dir(token: str) -> Path:
    """The runs of one dashboard session: ``FL_RUNS_DIR/sessions/<token>`` (other sessions never list them).

    Raises:
        ValueError: ``token`` is not 32 hex digits.
    """
    if not SESSION_TOKEN.fullmatch(token):
        raise ValueError("a session's runs token is 32 hex digits")
    return user_runs_dir() / "sessions" / token


@dataclass(frozen=True)
class Run(Result):
    """A finished (or cancelled) run: what was trained, how it went, and what its first layer did.

    Attributes:
        name: the run's name (its folder name).
        config: the :class:`RunSettings`.
        history: loss/accuracy per evaluation and the first-layer snapshots.
        classes: class names of the labels trained on.
        input_config: preprocessing that turns a photo into this run's input (for ``demo:``/``weights:`` use).
        arch_kwargs: constructor arguments of a small net (empty for timm).
        first_layer: module name of the first convolution.
        pca: patch PCA of what the first layer saw (App. D.2: the measured, modified spectrum).
        reference_pca: App. D.2 only: the PCA of the unmodified input (same components).
        provenance: timings, machine, data and label details.
        path: the run folder, when saved.
        channel_axes: the axes of ``config.channel_axes`` at every snapshot (``None``: not followed).
    """

    name: str
    config: RunSettings
    history: TrainHistory
    classes: tuple[str, ...]
    input_config: InputConfig
    arch_kwargs: dict
    first_layer: str
    pca: PatchPCA
    reference_pca: PatchPCA | None = None
    provenance: dict = field(default_factory=dict)
    path: str | None = None
    channel_axes: AxesTrajectory | None = None

    _private_fields = ("reference_pca",)

    _figures: ClassVar[dict[str, str]] = {"training": "fl_core.lab.plots:training_curves_figure"}

    def figure_inputs(self, kind: str) -> tuple:
        return ([self],)

    def to_frame(self) -> pd.DataFrame:
        """One row per evaluation, led by the run's name and the spec of its folder (``weights:PATH``; empty for a
        run not saved): step, train_loss, train_accuracy, val_loss, val_accuracy."""
        history = self.history
        frame = pd.DataFrame({"step": history.steps, "train_loss": history.train_loss,
                              "train_accuracy": history.train_accuracy, "val_loss": history.val_loss,
                              "val_accuracy": history.val_accuracy})
        return with_model_columns(frame, self.name, f"weights:{self.path}" if self.path else "")

    @property
    def snapshots(self) -> dict[int, np.ndarray]:
        return self.history.snapshots

    @property
    def steps(self) -> list[int]:
        return sorted(self.history.snapshots)

    @property
    def init_weights(self) -> np.ndarray:
        return self.history.snapshots[0]

    @property
    def final_weights(self) -> np.ndarray:
        return self.history.snapshots[self.steps[-1]]

    def checkpoint(self, which: str = "final") -> Path | None:
        """Path of ``final.safetensors`` or ``init.safetensors`` when the run folder has it."""
        path = Path(self.path or "") / f"{which}.safetensors"
        return path if self.path and path.is_file() else None

    def weights_spec(self) -> tuple[str, dict] | None:
        """``(weights:PATH, preprocessing overrides)`` to open the trained network in the other pages."""
        final = self.checkpoint("final")
        if final is None:
            return None
        cfg = self.input_config
        return f"weights:{final}", {"input_size": cfg.input_size, "crop_pct": cfg.crop_pct, "mean": cfg.mean,
                                    "std": cfg.std}


# ------------------------------------------------------------------------------------------------- model building


def resolve_config(config: RunSettings) -> RunSettings:
    """The configuration with a timm net's own first-layer width and (square) kernel (read on the meta device);
    small nets unchanged."""
    if not config.is_timm:
        return config
    model, first = _meta_network(config)
    conv = model.get_submodule(first)
    if conv.kernel_size[0] != conv.kernel_size[1] or conv.in_channels != 3:
        raise ModelSpecError(f"{config.arch}: its first convolution ({first}, {tuple(conv.weight.shape)}) is not a "
                             "square filter on RGB input, which the energy profile needs.")
    return dataclasses.replace(config, width=conv.out_channels, first_kernel=conv.kernel_size[0])


def build_run_model(config: RunSettings, num_classes: int) -> tuple[nn.Module, str, dict]:
    """``(model, first-layer module name, small-net kwargs)``, initialized from ``config.train.seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.train.seed)
        if config.is_timm:
            model, kwargs = _timm_model(config.arch.removeprefix("timm:"), num_classes), {}
        else:
            kwargs = {"num_classes": num_classes, "widths": [config.width, *config.body_widths],
                      "first_kernel": config.first_kernel}
            if config.manipulated:
                kwargs |= {"first_stride": config.first_kernel, "first_padding": 0}
            model = build_net(config.arch, **kwargs)
    wrapped = LoadedModel(spec=config.arch, label=config.arch, model=model, state_dict=model.state_dict(),
                          input_config=InputConfig(input_size=32, crop_pct=1.0))
    return model, find_layer(wrapped, None).name, kwargs


def _meta_network(config: RunSettings) -> tuple[nn.Module, str]:
    """The run's network (for two classes) and its first layer's name, on the meta device: built there (no memory),
    or, when its construction needs real values, built within the parameter budget
    (:func:`~fl_core.io.registries.build_within_budget`) and moved there."""
    try:
        with torch.device("meta"):
            model, first, _ = build_run_model(config, 2)
    except ModelSpecError:
        model = build_within_budget(lambda meta: build_run_model(config, 2)[0], config.arch).to("meta")
        first = find_layer(LoadedModel(spec=config.arch, label=config.arch, model=model, state_dict={},
                                       input_config=InputConfig(input_size=32, crop_pct=1.0)), None).name
    return model, first


@dataclass(frozen=True)
class RunCost:
    """What one training example costs a run's network, from its shapes on the meta device.

    Attributes:
        parameters: the network's parameters.
        activations: values its modules output (those the backward pass keeps; in-place modules add none).
        multiply_adds: of its convolutions and linear layers, forward.
    """

    parameters: int
    activations: int
    multiply_adds: int


@lru_cache(maxsize=8)
def run_cost(config: RunSettings) -> RunCost:
    """:class:`RunCost` of ``config``'s network: one example through it on the meta device, every leaf module's output
    counted (a convolution or linear layer: each output value costs one multiply-add per weight of its filter)."""
    model, _ = _meta_network(config)
    totals = {"activations": 0, "multiply_adds": 0}

    def count(module: nn.Module, _inputs, output) -> None:
        if isinstance(output, torch.Tensor) and not getattr(module, "inplace", False):
            totals["activations"] += output.numel()
        if isinstance(module, nn.modules.conv._ConvNd | nn.Linear):
            totals["multiply_adds"] += output.numel() * module.weight[0].numel()

    hooks = [module.register_forward_hook(count) for module in model.modules() if not any(module.children())]
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, 32, 32, device="meta"))
    for hook in hooks:
        hook.remove()
    return RunCost(sum(p.numel() for p in model.parameters()), totals["activations"], totals["multiply_adds"])


def check_run_budget(config: RunSettings) -> None:
    """Refuse a run over the budgets (:func:`fl_core.compute.budgets.check_training`: parameters, the memory of one step
    with the training crops, the work of every step) before anything is allocated; :func:`train_run` calls it first."""
    cost = run_cost(config)
    widths = ", ".join(map(str, (config.width, *config.body_widths)))
    what = config.arch if config.is_timm else f"{config.arch} (widths {widths})"
    check_training(cost.parameters, cost.activations, cost.multiply_adds, batch=config.train.batch_size,
                   steps=config.train.steps, momentum=config.train.momentum > 0, what=what,
                   data_bytes=CROP_BYTES * train_crop_count(config.images, config.max_images, config.crops_per_image))


def _timm_model(name: str, num_classes: int) -> nn.Module:
    import timm

    if not timm.is_model(name):
        raise ModelSpecError(f"timm has no architecture '{name}'. See timm.list_models().")
    try:
        try:
            model = timm.create_model(name, pretrained=False, num_classes=num_classes, img_size=32)
        except TypeError:  # no img_size argument: a convolutional net
            model = timm.create_model(name, pretrained=False, num_classes=num_classes)
        with torch.no_grad():
            model.eval()(torch.zeros(2, 3, 32, 32))
    except Exception as err:  # any architectural refusal of 32×32 input
        raise ModelSpecError(f"timm:{name} does not accept 32×32 input ({type(err).__name__}: {err}). Pick a "
                             "convolutional architecture such as resnet18 or mobilenetv3_small_100.") from err
    return model


# ----------------------------------------------------------------------------------------------------- training


@dataclass(frozen=True)
class RunInputs:
    """What a run trains on: data, labels, the input map (normalize, then App. D.2 if any) and the PCAs."""

    data: CropData
    labels: LabelledSplit
    prepare: Callable[[torch.Tensor], torch.Tensor]
    pca: PatchPCA
    reference_pca: PatchPCA | None


def run_inputs(config: RunSettings) -> RunInputs:
    """Crops, label variant, input map and patch PCA(s) of a configuration (PCAs cached across runs)."""
    data = crop_dataset(config.images, config.max_images, config.crops_per_image)
    key = (config.images, config.max_images, config.crops_per_image, config.first_kernel, config.patch_stride)
    base = _data_pca(*key, 1.0, 0)
    prepare = _input_map(data, base, config.alpha, config.alpha_component)
    pca = _data_pca(*key, config.alpha, config.alpha_component) if config.manipulated else base
    labels = label_variant(data, config.labels, seed=config.train.seed, pca=base, component=config.label_component,
                           prepare=prepare)
    return RunInputs(data=data, labels=labels, prepare=prepare, pca=pca,
                     reference_pca=base if config.manipulated else None)


def _input_map(data: CropData, base: PatchPCA | None, alpha: float, component: int
               ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Normalize, then (App. D.2, α ≠ 1) scale ``component`` of ``base`` in every tile (``base`` unused when α = 1)."""
    if alpha == 1.0:
        return data.normalize
    return T.Compose([data.normalize, TileScaling.from_pca(base, component, alpha)])


@lru_cache(maxsize=16)
def _data_pca(images: str, max_images: int | None, crops_per_image: int | None, kernel: int, stride: int,
              alpha: float, component: int) -> PatchPCA:
    """Patch PCA of the crops (after the App. D.2 map along ``component`` when α ≠ 1), cached per data set."""
    data = crop_dataset(images, max_images, crops_per_image)
    base = _data_pca(images, max_images, crops_per_image, kernel, stride, 1.0, 0) if alpha != 1.0 else None
    return crops_pca(data, kernel, _input_map(data, base, alpha, component), stride=stride)


def train_run(config: RunSettings, out: str | Path | None = None, *, name: str | None = None,
              device: DeviceLike = None, save_checkpoints: bool = True, progress: ProgressLike = None,
              should_stop: Callable[[], bool] | None = None,
              on_snapshot: Callable[[int, np.ndarray], None] | None = None,
              on_axes: Callable[[AxesTrajectory], None] | None = None) -> Run:
    """Train one run; with ``out``, save it as a run folder ``out`` (see the module docstring).

    Args:
        config: the run's configuration.
        out: run folder to write (created); ``None`` keeps the run in memory only.
        name: the run's name (default: the folder name, else ``config.slug()``).
        device: where to train (default: ``FL_DEVICE`` or automatic).
        save_checkpoints: also write ``init.safetensors`` and ``final.safetensors``.
        progress: ``progress(fraction, message)``.
        should_stop: polled at every logging interval (cancel); a cancelled run keeps what it has done so far.
        on_snapshot: ``(step, first-layer weights)`` as snapshots are taken (live views).
        on_axes: with ``config.channel_axes``: the layer's axes so far, after each snapshot (live views).

    Raises:
        AnalysisError, ModelSpecError: the run is over a budget (:func:`check_run_budget`), before anything is
            allocated; ``config.channel_axes`` is not a convolution of the network (before training).
        DataError: ``out`` is outside the folders the library may write (:func:`fl_core.io.paths.check_writable`),
            checked before training.
    """
    started = time.perf_counter()
    if out is not None:
        check_writable(out)
    check_run_budget(config)
    device, progress = resolve_device(device), progress_callback(progress)
    report(progress, 0.0, "cutting crops and computing the patch PCA")
    config = resolve_config(config)
    inputs = run_inputs(config)
    data, labels = inputs.data, inputs.labels
    model, first_name, kwargs = build_run_model(config, len(labels.classes))
    init_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    follower = None
    if config.channel_axes:
        follower = axes_follower(config, model, inputs, device, on_axes,
                                 Path(out) / CHECKPOINTS if out is not None and save_checkpoints else None)
    history = train_classifier(model, data.train_x, labels.train_y, data.val_x, labels.val_y, inputs.prepare,
                               model.get_submodule(first_name), config.train, device=device,
                               progress=sub_progress(progress, 0.05, 0.98), should_stop=should_stop,
                               on_snapshot=on_snapshot, at_snapshot=follower)
    run = Run(name=name or (Path(out).name if out else config.slug()), config=config, history=history,
              classes=labels.classes, input_config=data.input_config(), arch_kwargs=kwargs, first_layer=first_name,
              pca=inputs.pca, reference_pca=inputs.reference_pca,
              provenance=_provenance(config, data, labels, history, device, time.perf_counter() - started),
              channel_axes=None if follower is None else follower.trajectory)
    if out is not None:
        run = save_run(run, out, (init_state, model.state_dict()) if save_checkpoints else None)
    report(progress, 1.0, "done")
    return run


CHECKPOINTS = "checkpoints"
"""The folder of a run's full checkpoints at every snapshot (runs that follow a layer's channel axes)."""


def axes_data(config: RunSettings, inputs: RunInputs):
    """The images the axes over training are measured on: the run's validation crops, as the network sees them."""
    labels = inputs.labels
    x = inputs.prepare(inputs.data.val_x)
    return analysis_data(x, labels.val_y, labels.classes, f"{len(x)} validation crops of {config.images} "
                         f"({config.labels} labels)", seed=config.train.seed)


def check_axes_layer(model: nn.Module, layer: str) -> None:
    """Refuse a followed layer that is not a convolution of the run's network, naming the ones it has."""
    convs = [name for name, module in model.named_modules() if isinstance(module, nn.Conv2d)]
    if layer not in convs:
        raise ModelSpecError(f"channel_axes: the network has no convolution '{layer}'; its convolutions: "
                             f"{', '.join(convs)}.")


def axes_follower(config: RunSettings, model: nn.Module, inputs: RunInputs, device: torch.device,
                  on_axes: Callable[[AxesTrajectory], None] | None, checkpoints: Path | None) -> AxesFollower:
    """What measures ``config.channel_axes`` at every snapshot (and, with ``checkpoints``, saves the full network
    there first, so the ``channels`` command can measure the same rows again)."""
    check_axes_layer(model, config.channel_axes)
    if checkpoints is not None:
        checkpoints.mkdir(parents=True, exist_ok=True)
    return AxesFollower(config.channel_axes, axes_data(config, inputs),
                        training_axes_settings(config.axes_bootstrap, config.train.seed), device, on_axes, checkpoints)


def _provenance(config: RunSettings, data, labels, history: TrainHistory, device: torch.device,
                seconds: float) -> dict:
    counts = torch.bincount(labels.train_y, minlength=len(labels.classes))
    out = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "torch": torch.__version__,
           "device": str(device), "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} threads",
           "train_crops": len(data.train_x), "val_crops": len(data.val_x), "images": config.images,
           "chance_accuracy": float(counts.max()) / len(labels.train_y),
           "training_seconds": round(history.seconds, 1), "total_seconds": round(seconds, 1),
           "trained_steps": history.steps[-1] if history.steps else 0, "stopped_early": history.stopped_early,
           "val_accuracy": history.final_val_accuracy, "train_accuracy": history.final_train_accuracy}
    if labels.deciles is not None:
        out["energy_decile_cuts"] = labels.deciles.cuts.tolist()
    return out


# ------------------------------------------------------------------------------------------------- run folders


def _step_key(step: int) -> str:
    return f"step_{step:06d}"


def _pca_tensors(pca: PatchPCA, prefix: str) -> dict[str, torch.Tensor]:
    return {f"{prefix}.components": torch.from_numpy(pca.components), f"{prefix}.lambdas":
            torch.from_numpy(pca.lambdas), f"{prefix}.mean": torch.from_numpy(pca.mean),
            f"{prefix}.shape": torch.tensor([*pca.kernel, pca.n_patches], dtype=torch.float64)}


def _pca_from(tensors: dict[str, torch.Tensor], prefix: str) -> PatchPCA | None:
    if f"{prefix}.lambdas" not in tensors:
        return None
    shape = [int(v) for v in tensors[f"{prefix}.shape"].tolist()]
    return PatchPCA(components=tensors[f"{prefix}.components"].numpy(), lambdas=tensors[f"{prefix}.lambdas"].numpy(),
                    mean=tensors[f"{prefix}.mean"].numpy(), kernel=tuple(shape[:3]), n_patches=shape[3])


def save_run(run: Run, folder: str | Path, states: tuple[dict, dict] | None = None) -> Run:
    """Write ``run`` (and optionally its ``(init, final)`` state dicts) as a run folder; returns it with ``path``
    (where the path policy lets the library write: :func:`fl_core.io.paths.check_writable`)."""
    folder = check_writable(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_state_dict({_step_key(s): torch.from_numpy(w) for s, w in run.snapshots.items()},
                    folder / "first_layer.safetensors")
    pcas = _pca_tensors(run.pca, "pca")
    if run.reference_pca is not None:
        pcas |= _pca_tensors(run.reference_pca, "reference_pca")
    save_state_dict(pcas, folder / "pca.safetensors")
    if states is not None:
        save_state_dict(states[0], folder / "init.safetensors")
        save_state_dict(states[1], folder / "final.safetensors")
    run = dataclasses.replace(run, path=str(folder))
    document = {"format": RUN_FORMAT, **{k: v for k, v in run.to_dict().items() if k != "path"}}  # movable
    (folder / "run.json").write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    return run


def load_run(folder: str | Path) -> Run:
    """Read a run folder written by :func:`save_run` (checkpoints are left on disk; see :meth:`Run.checkpoint`).

    Args:
        folder: the run's folder (``run.json`` and its first-layer snapshots), read under the path policy
            (:func:`fl_core.io.paths.check_readable`).
    """
    folder = check_readable(folder)
    try:
        document = json.loads((folder / "run.json").read_text())
        if document.get("format") != RUN_FORMAT:
            raise DataError(f"{folder} is not a FilterLens run folder (format {document.get('format')!r}).")
        snapshots = {int(k.removeprefix("step_")): v.numpy()
                     for k, v in load_state_dict(folder / "first_layer.safetensors").tensors.items()}
        pcas = load_state_dict(folder / "pca.safetensors").tensors
    except (OSError, json.JSONDecodeError, KeyError) as err:
        raise DataError(f"{folder} is not a readable run folder ({type(err).__name__}: {err}).") from err
    except FilterLensError as err:
        raise DataError(f"{folder}: {err}") from err
    return Run(name=document["name"], config=RunSettings.from_dict(document["config"]),
               history=TrainHistory.from_dict(document["history"], snapshots),
               classes=tuple(document["classes"]), input_config=InputConfig(**document["input_config"]),
               arch_kwargs=document.get("arch_kwargs", {}), first_layer=document["first_layer"],
               pca=_pca_from(pcas, "pca"), reference_pca=_pca_from(pcas, "reference_pca"),
               provenance=document.get("provenance", {}), path=str(folder),
               channel_axes=AxesTrajectory.from_dict(document["channel_axes"]) if document.get("channel_axes")
               else None)


def list_runs(root: str | Path) -> list[Path]:
    """Run folders directly under ``root`` (sorted by name; ``root`` read under the path policy)."""
    root = check_readable(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "run.json").is_file())


# ---------------------------------------------------------------------------------------------- demo registration


def register_demo_runs(runs: Sequence[Run], manifest: str | Path = DEMO_DIR / "manifest.json",
                       prefix: str = "lab_") -> list[str]:
    """Add (or refresh) ``demo:`` entries for saved runs with checkpoints: ``<name>`` and ``<name>_init``.

    Only entries whose names start with ``prefix`` are written or replaced; every other entry (the
    ``tiny_vgg`` demos) is left exactly as it is. Returns the names added.
    """
    manifest = Path(manifest)
    document = json.loads(manifest.read_text()) if manifest.is_file() else {"models": []}
    entries = {e["name"]: e for e in document["models"]}
    added = []
    for run in runs:
        if not run.name.startswith(prefix):
            raise DataError(f"Run {run.name}: demo entries written by the Training Lab start with '{prefix}'.")
        if run.config.is_timm or run.checkpoint("final") is None:
            raise DataError(f"Run {run.name} has no small-net checkpoints to register as a demo.")
        for suffix, which in (("", "final"), ("_init", "init")):
            entries[run.name + suffix] = _demo_entry(run, run.name + suffix, which, manifest.parent)
            added.append(run.name + suffix)
    document["models"] = list(entries.values())
    manifest.write_text(json.dumps(document, indent=2) + "\n")
    return added


def _demo_entry(run: Run, name: str, which: str, demo_dir: Path) -> dict:
    trained = which == "final"
    steps = run.provenance.get("trained_steps", run.config.train.steps) if trained else 0
    what = (f"Training Lab run {run.name}: {run.config.arch}, {run.config.labels} labels, seed "
            f"{run.config.train.seed}, {steps} plain-SGD steps on 32×32 crops of the bundled photos "
            "(scripts/make_shipped_runs.py)."
            if trained else f"The initialization of Training Lab run {run.name} (before training).")
    return {"name": name, "file": os.path.relpath(run.checkpoint(which).resolve(), demo_dir.resolve()),
            "init": f"{run.name}_init" if trained else None, "arch": run.config.arch,
            "arch_kwargs": run.arch_kwargs, "input_config": run.input_config.to_dict(),
            "class_names": list(run.classes), "description": what,
            "provenance": {"script": "scripts/make_shipped_runs.py", "run": run.name, "seed": run.config.train.seed,
                           "trained_steps": steps, "training_seconds": run.provenance.get("training_seconds", 0.0)
                           if trained else 0.0, "optimizer": dataclasses.asdict(run.config.train),
                           "val_accuracy": run.provenance.get("val_accuracy") if trained else None}}

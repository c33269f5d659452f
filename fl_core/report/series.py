"""Checkpoints of one training run, in training order: the input of a report's trajectory section.

A series comes from several ``--model`` specs (in the order given), from ``weights:DIR`` (every checkpoint file of
the folder), or from a Training Lab run folder (``weights:RUN_DIR``, a folder with ``run.json``: one weights-only
checkpoint per first-layer snapshot, at its SGD step). Files of a folder are ordered by the ``epoch`` or ``step``
that every one of them records (safetensors metadata, or a top-level entry of a torch checkpoint), else by the
natural sort of their names (``ckpt_2`` before ``ckpt_10``).
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from fl_core.errors import ModelSpecError
from fl_core.io.checkpoints import CHECKPOINT_SUFFIXES, file_sha256
from fl_core.io.models import LoadedModel, load_model
from fl_core.io.paths import check_readable
from fl_core.io.specs import ModelSpec, spec_file_stamp
from fl_core.lab.runs import load_run

ORDER_KEYS = ("epoch", "step", "global_step")
ModelLoader = Callable[..., LoadedModel]
"""``load(spec, overrides=())`` -> a loaded model (the app's or a worker's cache, or :func:`load_spec`)."""


def natural_key(name: str) -> tuple:
    """Sort key that orders the digit runs of a name by value: ``ckpt_2`` < ``ckpt_10``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part.lower())
                 for part in re.split(r"(\d+)", name) if part)


def load_spec(spec: str, overrides: tuple = ()) -> LoadedModel:
    """:func:`fl_core.io.models.load_model` with hashable ``(key, value)`` overrides."""
    return load_model(spec, input_overrides=dict(overrides))


def folder_of(spec: str, sources: tuple[str, ...] = ("weights",)) -> Path | None:
    """The folder a spec of ``sources`` names (``weights:DIR``; with :data:`~fl_core.io.specs.ARCHITECTURE_SOURCES`,
    ``ARCH=DIR``), once the path policy lets users read it (:func:`fl_core.io.paths.check_readable`); ``None`` for any
    other spec or a file."""
    try:
        parsed = ModelSpec.parse(spec)
    except ModelSpecError:
        return None
    if parsed.source not in sources or parsed.path is None:
        return None
    folder = check_readable(parsed.path)
    return folder if folder.is_dir() else None


def checkpoint_files(folder: Path) -> list[Path]:
    """The checkpoint files directly in ``folder``, in natural order of their names.

    Raises:
        ModelSpecError: the folder holds none.
    """
    files = sorted((p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in CHECKPOINT_SUFFIXES),
                   key=lambda p: natural_key(p.name))
    if not files:
        raise ModelSpecError(f"{folder} holds no checkpoint files ({', '.join(CHECKPOINT_SUFFIXES)}). Point "
                             "weights:DIR at the folder of one run's checkpoints.")
    return files


def recorded_order(path: Path) -> int | None:
    """The epoch or step a checkpoint records (``None`` when it records none): a safetensors file in its metadata,
    a torch file as a top-level integer entry (read with ``weights_only=True`` and tensors on the ``meta`` device
    from a memory map, so no weights are read; legacy non-zip files record none). Call it on validated files."""
    if path.suffix.lower() == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), "pt") as handle:
            entries = dict(handle.metadata() or {})
        entries = {k: int(v) for k, v in entries.items() if str(v).strip().isdigit()}
    else:
        try:
            entries = torch.load(path, map_location="meta", weights_only=True, mmap=True)
        except (RuntimeError, ValueError, OSError, pickle.UnpicklingError):
            return None
    if not isinstance(entries, Mapping):
        return None
    found = (entries.get(key) for key in ORDER_KEYS)
    return next((int(v) for v in found if isinstance(v, int) and not isinstance(v, bool)), None)


def series_steps(recorded: Sequence[int | None]) -> list[int]:
    """The step of each checkpoint of a folder (given in natural name order): the epoch or step it records
    (:func:`recorded_order`) when every one records one, else its index; sorting by it gives training order."""
    return [int(r) for r in recorded] if all(r is not None for r in recorded) else list(range(len(recorded)))


def run_snapshots(folder: Path, overrides: tuple = ()) -> list[LoadedModel]:
    """A Training Lab run folder as one weights-only model per first-layer snapshot, by step."""
    run = load_run(folder)
    config = run.input_config.with_overrides(**dict(overrides))
    sha256 = file_sha256(folder / "first_layer.safetensors")
    return [LoadedModel(spec=f"weights:{folder}#step={step}", label=f"{run.name} step {step}", model=None,
                        state_dict={f"{run.first_layer}.weight": torch.from_numpy(run.snapshots[step])},
                        input_config=config, sha256=sha256,
                        notes=(f"first-layer snapshot of Training Lab run {run.name} at SGD step {step}",))
            for step in run.steps]


def load_series(specs: Sequence[str], overrides: tuple = (), load: ModelLoader = load_spec) -> list[LoadedModel]:
    """Every checkpoint the specs name, in training order (module docstring).

    Specs are taken in the given order; a folder expands in place into its checkpoints (a run folder into its
    snapshots), ordered by recorded epoch/step when every file records one, else by natural name order.
    """
    models: list[LoadedModel] = []
    for spec in specs:
        folder = folder_of(spec)
        if folder is None:
            models.append(load(spec, overrides))
        elif (folder / "run.json").is_file():
            models.extend(run_snapshots(folder, overrides))
        else:
            files = checkpoint_files(folder)
            loaded = [load(f"weights:{path}", overrides) for path in files]  # validated before metadata is read
            steps = series_steps([recorded_order(path) for path in files])
            models.extend(m for _, m in sorted(zip(steps, loaded), key=lambda item: item[0]))
    if not models:
        raise ModelSpecError("Pick at least one model for the report.")
    return models



def series_stamp(spec: str) -> str:
    """Modification times and sizes of every file a spec reads ("" when it reads none): a cache key that changes when
    a checkpoint is edited or added to a folder."""
    folder = folder_of(spec)
    if folder is None:
        return spec_file_stamp(spec)
    files = [folder / "run.json", folder / "first_layer.safetensors"] if (folder / "run.json").is_file() else (
        checkpoint_files(folder))
    return ";".join(f"{path.name}:{path.stat().st_mtime_ns}:{path.stat().st_size}" for path in files)

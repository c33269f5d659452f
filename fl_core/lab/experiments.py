"""Experiments = sets of Training Lab runs that reproduce the claims of Chowers & Weiss (Tables 1–3, App. D).

Each suite is data (:mod:`fl_core.lab.suites`): named :class:`~fl_core.lab.settings.RunSettings` s that differ from
the default run in one factor
(seed, first-layer width, architecture, labels, frozen first layer, App. D.1 labels, App. D.2 input). The analyses
in :mod:`fl_core.lab.claims` find the pairs that differ in exactly one factor and compare them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fl_core.compute.device import DeviceLike
from fl_core.compute.progress import ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import DataError
from fl_core.io.images import BUNDLED
from fl_core.io.paths import check_writable
from fl_core.lab.runs import Run, list_runs, load_run, train_run
from fl_core.lab.suites import SUITES, SuiteRun
from fl_core.settings import replace_settings


def suite_runs(suite: str, *, images: str = BUNDLED, max_images: int | None = None,
               crops_per_image: int | None = None, steps_scale: float = 1.0) -> tuple[SuiteRun, ...]:
    """The runs of a suite on another data set and/or with ``steps_scale`` × the steps."""
    if suite not in SUITES:
        raise DataError(f"Unknown suite '{suite}'; choose one of {', '.join(SUITES)}.")
    out = []
    for item in SUITES[suite]:
        config = replace_settings(item.config, {"images": images, "max_images": max_images,
                                                "crops_per_image": crops_per_image,
                                                "steps": max(1, round(item.config.train.steps * steps_scale))})
        out.append(dataclasses.replace(item, config=config))
    return tuple(out)


def run_suite(runs: Sequence[SuiteRun], root: str | Path, *, device: DeviceLike = None, resume: bool = True,
              save_checkpoints: bool | None = None, progress: ProgressLike = None,
              should_stop: Callable[[], bool] | None = None, log: Callable[[str], None] | None = None) -> list[Run]:
    """Train every run of a suite into ``root/<name>``.

    With ``resume``, a run folder that already holds a run of the same configuration is loaded, not retrained.
    ``save_checkpoints``: write full checkpoints for every run (True), none (False), or only for the ``demo`` runs
    (``None``: what ships in ``fl_core/assets/runs``).
    """
    root, progress = check_writable(root), progress_callback(progress)
    done: list[Run] = []
    for i, item in enumerate(runs):
        step = sub_progress(progress, i / len(runs), (i + 1) / len(runs))
        folder = root / item.name
        existing = load_run(folder) if resume and (folder / "run.json").is_file() else None
        if existing is not None and existing.config == item.config and not existing.history.stopped_early:
            done.append(existing)
            continue
        started = time.perf_counter()
        checkpoints = item.demo if save_checkpoints is None else save_checkpoints
        done.append(train_run(item.config, folder, name=item.name, device=device, save_checkpoints=checkpoints,
                              progress=step, should_stop=should_stop))
        if log is not None:
            log(f"{item.name}: {time.perf_counter() - started:.0f} s, validation accuracy "
                f"{done[-1].history.final_val_accuracy:.1%}")
        if should_stop is not None and should_stop():
            break
    report(progress, 1.0, "done")
    return done


def load_runs(root: str | Path) -> list[Run]:
    """Every run folder under ``root``."""
    return [load_run(path) for path in list_runs(root)]

"""Experiments = sets of Training Lab runs that reproduce the claims of Chowers & Weiss (Tables 1–3, App. D).

Each suite is data: named :class:`~fl_core.lab.runs.RunSettings` s that differ from the default run in one factor
(seed, first-layer width, architecture, labels, frozen first layer, App. D.1 labels, App. D.2 input). The analyses
in :mod:`fl_core.lab.claims` find the pairs that differ in exactly one factor and compare them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fl_core.backend import Progress, report, sub_progress
from fl_core.errors import DataError
from fl_core.io.images import BUNDLED
from fl_core.lab.runs import Run, RunSettings, list_runs, load_run, train_run
from fl_core.settings import replace_settings

RANDOM_LABEL_STEPS = 800
"""Random labels are learnt much more slowly (the authors train 100 epochs instead of 30): 2× the default steps."""
LONG_RANDOM_STEPS = 4000
"""One longer random-label run (10× the default) shows how far the layer leaves its initialization with time."""
D1_COMPONENTS = (15, 2)
"""App. D.1: component 15 (Fig. 8a) and a high-variance one that every first layer learns anyway."""
D2_COMPONENT, D2_ALPHA = 15, 4.0
"""App. D.2 (the paper gives neither): a low-variance component, scaled enough to leave the early regime."""
D2_INPUT = {"alpha": D2_ALPHA, "alpha_component": D2_COMPONENT}


@dataclass(frozen=True)
class SuiteRun:
    """One run of a suite: its name, configuration and whether its checkpoints ship as ``demo:`` models."""

    name: str
    config: RunSettings
    demo: bool = False


BASE = RunSettings()
RANDOM = replace_settings(BASE, {"labels": "random", "steps": RANDOM_LABEL_STEPS})
SUITES: dict[str, tuple[SuiteRun, ...]] = {
    "paper": (
        SuiteRun("lab_vgg_true_s0", BASE, demo=True),
        SuiteRun("lab_vgg_true_s1", replace_settings(BASE, {"seed": 1})),
        SuiteRun("lab_vgg_random_s0", RANDOM, demo=True),
        SuiteRun("lab_resnet_true_s0", replace_settings(BASE, {"arch": "small_resnet"})),
        SuiteRun("lab_vgg_true_w64", replace_settings(BASE, {"width": 64})),
        SuiteRun("lab_vgg_frozen_s0", replace_settings(BASE, {"freeze_first": True})),
        *(SuiteRun(f"lab_vgg_energy{c}_s0", replace_settings(BASE, {"labels": "energy", "label_component": c}))
          for c in D1_COMPONENTS),
        SuiteRun("lab_vgg_alpha_true_s0", replace_settings(BASE, D2_INPUT)),
        SuiteRun("lab_vgg_true_s2", replace_settings(BASE, {"seed": 2})),
        SuiteRun("lab_vgg_true_w16", replace_settings(BASE, {"width": 16})),
        SuiteRun("lab_vgg_random_s1", replace_settings(RANDOM, {"seed": 1})),
        SuiteRun("lab_vgg_alpha_random_s0", replace_settings(RANDOM, D2_INPUT)),
        SuiteRun("lab_vgg_random_long_s0", replace_settings(RANDOM, {"steps": LONG_RANDOM_STEPS})),
    ),
    "quick": (
        SuiteRun("lab_vgg_true_s0", BASE),
        SuiteRun("lab_vgg_true_s1", replace_settings(BASE, {"seed": 1})),
        SuiteRun("lab_vgg_frozen_s0", replace_settings(BASE, {"freeze_first": True})),
        SuiteRun("lab_vgg_random_s0", RANDOM),
    ),
}
"""``paper``: every claim on the bundled photos (the shipped runs); ``quick``: seeds, true vs random, trained vs
init, theory fit and frozen first layer in four runs (for your own ImageFolder)."""


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


def run_suite(runs: Sequence[SuiteRun], root: str | Path, *, device=None, resume: bool = True,
              save_checkpoints: bool | None = None, progress: Progress | None = None,
              should_stop: Callable[[], bool] | None = None, log: Callable[[str], None] | None = None) -> list[Run]:
    """Train every run of a suite into ``root/<name>``.

    With ``resume``, a run folder that already holds a run of the same configuration is loaded, not retrained.
    ``save_checkpoints``: write full checkpoints for every run (True), none (False), or only for the ``demo`` runs
    (``None``: what ships in ``fl_core/assets/runs``).
    """
    root = Path(root)
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

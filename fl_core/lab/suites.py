"""The Training Lab's experiments as data: suites of named runs that reproduce the claims of Chowers & Weiss
(Tables 1–3, App. D), each run a :class:`~fl_core.lab.settings.RunSettings` that differs from the default in one factor
(light: no torch, so ``train --suite`` is checked before any training module loads)."""

from __future__ import annotations

from dataclasses import dataclass

from fl_core.lab.settings import RunSettings
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

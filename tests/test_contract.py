"""The contract every registered analysis family passes (scikit-learn's estimator checks as the model): its settings
refuse out-of-range and mistyped values with an ArgumentError, its keyword overrides are typed like its settings, it
refuses an unknown or missing device, reports progress, and its result draws every plot kind, is a table led by the
model's label and spec where it has one model, and saves to a file that loads back equal.

``EXAMPLES`` holds a tiny run of each family; a family registered without one fails
``test_every_family_has_an_example``. A new check over every family is one more test taking ``family_result``."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import pytest
import torch
from torch import nn

import fl_core
from fl_core.errors import ArgumentError
from fl_core.families import FAMILIES, Family
from fl_core.io.images import bundled_images
from fl_core.settings import own_fields, settings_fields

from .conftest import REPO

BANK = "demo:ppocrv6_det_small_dw7"


def depthwise_net() -> nn.Module:
    """A runnable net with a 7×7 depthwise layer and the 11 outputs of the bundled crops."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 7, padding=3, groups=8),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 11))


def photos(n: int = 3):
    return bundled_images().subset(range(n))


def tiny_run(**options: Any) -> Any:
    from fl_core import RunSettings, TrainSettings

    settings = RunSettings(width=4, body_widths=(4, 4), crops_per_image=4, snapshots=2,
                           train=TrainSettings(steps=4, batch_size=16))
    return fl_core.train_run(settings, None, **options)


EXAMPLES: dict[str, Callable[..., Any]] = {
    "inspect": lambda **options: fl_core.inspect_models("demo:tiny_vgg", **options),
    "energy": lambda **options: fl_core.analyze_energy("demo:tiny_vgg", photos(), seeds=2, **options),
    "whitening": lambda **options: fl_core.analyze_whitening("demo:tiny_vgg", photos(), max_distance=4, seeds=2,
                                                             **options),
    "train": tiny_run,
    "masterkeys": lambda **options: fl_core.analyze_master_keys(BANK, k=4, restarts=1, sweep=[2, 4], **options),
    "scalespace": lambda **options: fl_core.analyze_scale_space(method="B", **options),
    "weights": lambda **options: fl_core.weight_statistics("demo:tiny_vgg", **options),
    "rescore": lambda **options: fl_core.analyze_rescore(depthwise_net(), photos(4), replacements=["B"], batch_size=4,
                                                 workers=0, **options),
    "layersweep": lambda **options: fl_core.sweep_layers(depthwise_net(), photos(4), batch_size=4, workers=0,
                                                         **options),
    "channels": lambda **options: fl_core.analyze_channels(
        "demo:tiny_vgg", fl_core.channel_data("demo:tiny_vgg", "crops", 16, 8), layer="features.14",
        lesion_kinds=["mean"], cluster_seeds=2, **options,
        pruning=fl_core.PruningSettings(criteria=["local", "l1"], fractions=[0.5], finetune_steps=0)),
    "report": lambda **options: fl_core.build_report("demo:tiny_vgg", "bundled", max_images=3, seeds=1, k=4,
                                                     restarts=1, max_eval_images=4, **options),
    "survey": lambda **options: fl_core.analyze_survey(["demo:tiny_vgg", depthwise_net()], family="weights",
                                                       **options),
}
"""A tiny run of each family: ``EXAMPLES[name](device=..., progress=...)`` (keywords its entry point takes)."""

FAMILY_NAMES = list(FAMILIES)


def settings_class(family: Family) -> type | None:
    return family.settings_class()


def test_every_family_has_an_example_a_public_entry_point_and_its_command() -> None:
    from fl_core.cli import build_parser

    assert set(EXAMPLES) == set(FAMILIES)
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, family in FAMILIES.items():
        assert {target.split(":")[1] for target in family.names()} <= set(fl_core.__all__), name
        assert (name in commands) is (family.command is not None), name
    assert "analyze_survey" in fl_core.__all__ and "survey" in commands


def test_the_public_api_the_survey_and_the_report_derive_from_the_registry() -> None:
    from fl_core.report.build import SECTIONS
    from fl_core.survey.analysis import COLUMNS
    from fl_core.survey.settings import FAMILIES as SURVEYED
    from fl_core.survey.settings import SurveySettings

    assert set(SURVEYED) == set(COLUMNS) == {name for name, f in FAMILIES.items() if f.survey is not None}
    assert next(f for f in settings_fields(SurveySettings) if f.name == "family").choices == SURVEYED
    sections = [f.report[0] for f in FAMILIES.values() if f.report is not None]
    assert [name for name in SECTIONS if name in sections] == sections


def bad_values(field: Any) -> list[Any]:
    """Values ``field`` refuses: past each bound, of the wrong type, a string for a tuple."""
    kind = field.item if field.kind is tuple else field.kind
    wrong: list[Any] = []
    if kind in (int, float):
        step = 1 if kind is int else 0.5
        wrong += [kind(field.minimum) - step] if field.minimum is not None else []
        wrong += [kind(field.maximum) + step] if field.maximum is not None else []
        wrong += ["8", True] + ([2.5] if kind is int else [])
    elif kind is str and field.choices is not None:
        wrong.append("no such choice")
    if field.kind is tuple:
        return ["ab", *[(value,) for value in wrong]]
    return wrong


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_settings_refuse_every_out_of_range_or_mistyped_value_by_name(name: str) -> None:
    cls = settings_class(FAMILIES[name])
    if cls is None:
        pytest.skip(f"{name} has no settings")
    checked = 0
    for field in own_fields(cls):
        for value in bad_values(field):
            with pytest.raises(ArgumentError, match=rf"^{field.name} (must|takes)") as refused:
                cls(**{field.name: value})
            assert isinstance(refused.value, TypeError) and isinstance(refused.value, ValueError)
            checked += 1
        assert cls(**{field.name: field.default}) == cls()  # the default passes its own rule
    assert checked or not any(f.kind in (int, float, tuple) for f in own_fields(cls)), name


def overrides_type(family: Family) -> type | None:
    """The TypedDict of the entry point's ``**overrides`` (``Unpack[<Family>Overrides]``), or ``None``."""
    keywords = [p for p in inspect.signature(family.entry_point()).parameters.values()
                if p.kind is inspect.Parameter.VAR_KEYWORD]
    if not keywords:
        return None
    annotation = keywords[0].annotation
    assert isinstance(annotation, str) and annotation.startswith("Unpack["), (family.name, annotation)
    return getattr(sys.modules[family.settings.split(":")[0]], annotation[len("Unpack["):-1])


def expected_override(hint: Any) -> Any:
    """The override type of a field's type: a tuple also as a list."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        return tuple[args[0], ...] | list[args[0]]
    if type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return expected_override(inner) | None
    return hint


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_keyword_overrides_are_typed_like_the_settings(name: str) -> None:
    family = FAMILIES[name]
    typed = overrides_type(family)
    if typed is None:
        pytest.skip(f"{name} takes no setting overrides")
    cls = family.settings_class()
    hints = {f.name: hint for klass in (cls, *[f.kind for f in own_fields(cls) if f.nested])
             for f, hint in ((f, typing.get_type_hints(klass)[f.name]) for f in dataclasses.fields(klass))}
    names = {f.name for f in settings_fields(cls)} | {f.name for f in dataclasses.fields(cls)}
    assert set(typing.get_type_hints(typed)) == names
    for key, hint in typing.get_type_hints(typed).items():
        assert hint == expected_override(hints[key]), (key, hint)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_an_unknown_or_missing_device_is_refused(name: str) -> None:
    if not FAMILIES[name].takes("device"):
        pytest.skip(f"{name} runs on the CPU only")
    missing = [device for device in ("cuda", "mps") if device not in fl_core.backend.available_devices()]
    for device in ("bogus", *missing):
        with pytest.raises(ArgumentError, match=r"^device .*cpu") as refused:
            EXAMPLES[name](device=device, progress=False)
        assert repr(device) in str(refused.value), name


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def family_result(request: pytest.FixtureRequest) -> tuple[str, Any, list[tuple[float, str]]]:
    """``(name, result, progress calls)`` of each family's tiny run (on the CPU)."""
    name, seen = request.param, []
    family = FAMILIES[name]
    options = {key: value for key, value in (("device", "cpu"), ("progress", lambda f, m: seen.append((f, m))))
               if family.takes(key)}
    return name, EXAMPLES[name](**options), seen


@pytest.mark.slow
def test_the_result_is_the_registered_class_a_table_and_draws_every_plot_kind(family_result) -> None:
    """Every kind of ``plot_kinds()`` draws a figure with no further argument, the default first."""
    name, result, _ = family_result
    assert isinstance(result, FAMILIES[name].result_class())
    frame = result.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) >= 1 and len(frame.columns) >= 1, name
    assert isinstance(result.plot(), go.Figure), name
    for kind in result.plot_kinds():
        assert isinstance(result.plot(kind), go.Figure), (name, kind)


@pytest.mark.slow
def test_the_result_saves_and_loads_back_equal_and_drawing_the_same(family_result, tmp_path: Path) -> None:
    """``result.save(path)`` then ``fl_core.load_result(path)`` (and the class's own ``load``): the same class, the same
    ``to_dict()`` and table, and the same default figure."""
    name, result, _ = family_result
    path = tmp_path / f"{name}.flr"
    result.save(path)
    loaded = fl_core.load_result(path)
    assert type(loaded) is type(result) and loaded.to_dict() == result.to_dict(), name
    pd.testing.assert_frame_equal(loaded.to_frame(), result.to_frame())
    assert type(result).load(path).to_dict() == result.to_dict()
    if result.plot_kinds() and name != "report":  # (a report's figures embed timings of the drawing)
        assert loaded.plot().to_json() == result.plot().to_json(), name


@pytest.mark.slow
def test_progress_is_reported_from_0_to_1(family_result) -> None:
    name, _, seen = family_result
    if not FAMILIES[name].takes("progress"):
        pytest.skip(f"{name} reports no progress")
    assert seen and all(0.0 <= fraction <= 1.0 for fraction, _ in seen), name
    assert seen[-1][0] == pytest.approx(1.0) or name in ("rescore", "layersweep", "train"), (name, seen[-3:])


# ------------------------------------------------------------------------------------------------ type checks

CORRECT_SCRIPT = """\
from fl_core import MasterKeySettings, analyze_energy, analyze_master_keys, analyze_survey, load_model

model = load_model("demo:tiny_vgg")
energy = analyze_energy([model, "demo:tiny_vgg_init"], "bundled", seeds=3, device="cpu", progress=False)
keys = analyze_master_keys("demo:ppocrv6_det_small_dw7", settings=MasterKeySettings(k=8), stages=[1, 2])
print(energy.to_frame().head(), keys.k, keys.plot(), analyze_survey(["demo:tiny_vgg"], family="weights").rows)
"""
WRONG_SCRIPT = """\
from fl_core import analyze_master_keys

print(analyze_master_keys("demo:ppocrv6_det_small_dw7", k="8").k)
"""
MYPY_CONFIG = """\
[mypy]
strict = True

[mypy-fl_core.*]
follow_imports = silent

[mypy-torch.*,torchvision.*,timm.*,numpy.*,pandas.*,scipy.*,plotly.*,PIL.*,sklearn.*,skimage.*,onnx.*]
follow_imports = skip
"""
"""``mypy --strict`` as on an installed wheel: fl_core's own modules followed silently, the user's script checked;
the large libraries under them skipped (their types become ``Any``: 13 s instead of 110 s, and FilterLens's own
signatures are what the test is about)."""


@pytest.mark.slow
def test_mypy_strict_passes_a_correct_script_and_flags_a_mistyped_setting(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG)
    env = {**os.environ, "MYPYPATH": str(REPO)}

    def mypy(script: str) -> subprocess.CompletedProcess:
        (tmp_path / "script.py").write_text(script)
        return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir",
                               str(tmp_path / "cache"), "script.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)

    correct = mypy(CORRECT_SCRIPT)
    assert correct.returncode == 0, correct.stdout
    wrong = mypy(WRONG_SCRIPT)
    assert wrong.returncode == 1 and 'Argument "k" to "analyze_master_keys" has incompatible type "str"' in wrong.stdout

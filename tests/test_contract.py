"""The contract every registered analysis family passes, parametrised over the registry (scikit-learn's
``parametrize_with_checks`` as the model): the one call shape; settings that refuse out-of-range and mistyped values
with an ArgumentError and keyword overrides typed like them; an unknown or missing device refused; progress reported;
a result of the registered class that saves and loads back equal, draws every kind it lists and is one long table led
by the model's label and spec with its numbers as numbers; survey columns exactly as registered; the command's
``--json``; the report's section.

Each family runs once on a tiny input: ``EXAMPLES[name]`` where a family needs one of its own, else its entry point on
the demo model (:func:`example`): a family registered in :mod:`fl_core.families` is checked without an edit here. A
new check over every family is one more test taking ``family_result`` or ``family_name``."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
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
from fl_core.errors import AnalysisError, ArgumentError
from fl_core.families import FAMILIES, Family, report_sections
from fl_core.io.images import bundled_images
from fl_core.results import MODEL_COLUMNS
from fl_core.settings import own_fields, settings_fields

from .conftest import REPO

BANK = "demo:ppocrv6_det_small_dw7"
MODEL = "demo:tiny_vgg"
"""The model of a family's example and command where it names none of its own."""


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
    "inspect": lambda **options: fl_core.inspect_models(MODEL, **options),
    "energy": lambda **options: fl_core.analyze_energy(MODEL, photos(), seeds=2, **options),
    "whitening": lambda **options: fl_core.analyze_whitening(MODEL, photos(), max_distance=4, seeds=2, **options),
    "train": tiny_run,
    "masterkeys": lambda **options: fl_core.analyze_master_keys(BANK, k=4, restarts=1, sweep=[2, 4], **options),
    "scalespace": lambda **options: fl_core.analyze_scale_space(method="B", **options),
    "weights": lambda **options: fl_core.weight_statistics("demo:tiny_vgg", **options),
    "rescore": lambda **options: fl_core.analyze_rescore(depthwise_net(), photos(4), replacements=["B"], batch_size=4,
                                                 workers=0, **options),
    "layersweep": lambda **options: fl_core.sweep_layers(depthwise_net(), photos(4), batch_size=4, workers=0,
                                                         **options),
    "channels": lambda **options: fl_core.analyze_channels(
        MODEL, fl_core.channel_data(MODEL, "crops", 16, 8), layer="features.14",
        lesion_kinds=["mean"], cluster_seeds=2, **options,
        pruning=fl_core.PruningSettings(criteria=["local", "l1"], fractions=[0.5], finetune_steps=0)),
    "report": lambda **options: fl_core.build_report(MODEL, "bundled", max_images=3, seeds=1, k=4,
                                                     restarts=1, max_eval_images=4, **options),
    "survey": lambda **options: fl_core.analyze_survey([MODEL, depthwise_net()], family="weights", **options),
}
"""The tiny runs of the families that need inputs of their own: ``EXAMPLES[name](device=..., progress=...)``."""
COMMANDS: dict[str, list[str]] = {
    "energy": ["--model", MODEL, "--seeds", "2", "--max-images", "2"],
    "whitening": ["--model", MODEL, "--max-distance", "4", "--seeds", "2", "--max-images", "2"],
    "train": ["--width", "4", "--body-widths", "4", "4", "--steps", "4", "--batch-size", "16", "--crops-per-image",
              "4", "--snapshots", "2", "--no-checkpoints"],
    "masterkeys": ["--model", BANK, "--k", "4", "--restarts", "1"],
    "scalespace": ["--method", "B"],
    "rescore": ["--model", MODEL, "--max-images", "2", "--batch-size", "2", "--workers", "0"],  # scored alone
    "channels": ["--model", MODEL, "--layer", "features.14", "--calibration", "16", "--evaluation", "8", "--lesions",
                 "mean", "--criteria", "--cluster-seeds", "2"],
    "report": ["--model", MODEL, "--max-images", "2", "--seeds", "1", "--k", "4", "--restarts", "1",
               "--max-eval-images", "2"],
    "survey": ["--family", "weights", "--model", MODEL, "--workers", "1"],
}
"""The options of the commands that need their own for a tiny run (others: ``--model demo:tiny_vgg``)."""

FAMILY_NAMES = list(FAMILIES)
SLOW_TO_REFUSE = ("channels",)
"""The examples that compute for over a second of CPU before their entry point checks the device (channel data)."""
SHAPED = [name for name, family in FAMILIES.items() if family.call_shape]


def example(name: str) -> Callable[..., Any]:
    """The family's tiny run: its own in :data:`EXAMPLES`, else its entry point on :data:`MODEL` with its default
    settings (and three bundled photos where it reads images)."""
    if name in EXAMPLES:
        return EXAMPLES[name]
    family = FAMILIES[name]
    data = photos() if family.takes_images() else None
    return lambda **options: family.entry_point()(MODEL, data, **options)


def settings_class(family: Family) -> type | None:
    return family.settings_class()


def test_the_registry_reaches_the_api_the_command_line_the_survey_and_the_report() -> None:
    from fl_core.cli import build_parser
    from fl_core.report.build import SECTIONS
    from fl_core.report.html import HOW_TO_READ
    from fl_core.survey.analysis import COLUMNS
    from fl_core.survey.settings import FAMILIES as SURVEYED
    from fl_core.survey.settings import SurveySettings

    assert set(EXAMPLES) <= set(FAMILIES) and set(COMMANDS) <= set(FAMILIES)
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, family in FAMILIES.items():
        assert {target.split(":")[1] for target in family.names()} <= set(fl_core.__all__), name
        assert (name in commands) is (family.command is not None), name
    assert set(SURVEYED) == set(COLUMNS) == {name for name, f in FAMILIES.items() if f.survey is not None}
    family_field = next(f for f in settings_fields(SurveySettings) if f.name == "family")
    assert family_field.choices == SURVEYED and all(f"{name} (" in family_field.help for name in SURVEYED)
    sections = [f.report[0] for f in FAMILIES.values() if f.report is not None]
    assert [name for name in SECTIONS if name in sections] == sections
    for section, family in report_sections().items():
        assert family.how_to_read and HOW_TO_READ[section] == family.how_to_read, family.name


@pytest.mark.parametrize("name", SHAPED)
def test_the_entry_point_has_the_one_call_shape(name: str) -> None:
    """``function(models_or_model, data=None, settings=None, *, device=None, progress=None, **overrides)``."""
    family = FAMILIES[name]
    params = list(inspect.signature(family.entry_point()).parameters.values())
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, name
    assert [p.name for p in params[1:3]] == ["data", "settings"] and params[1].default is params[2].default is None
    keywords = {p.name: p for p in params}
    assert keywords["device"].kind is keywords["progress"].kind is inspect.Parameter.KEYWORD_ONLY, name
    assert keywords["device"].default is keywords["progress"].default is None, name
    assert params[-1].kind is inspect.Parameter.VAR_KEYWORD, name  # setting overrides
    assert family.settings is not None and family.settings.split(":")[1] in str(params[2].annotation), name


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


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_TO_REFUSE else name
                                  for name in FAMILY_NAMES])
def test_an_unknown_or_missing_device_is_refused(name: str) -> None:
    if not FAMILIES[name].takes("device"):
        pytest.skip(f"{name} runs on the CPU only")
    missing = [device for device in ("cuda", "mps") if device not in fl_core.compute.device.available_devices()]
    for device in ("bogus", *missing):
        with pytest.raises(ArgumentError, match=r"^device .*cpu") as refused:
            example(name)(device=device, progress=False)
        assert repr(device) in str(refused.value), name


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def family_result(request: pytest.FixtureRequest) -> tuple[str, Any, list[tuple[float, str]]]:
    """``(name, result, progress calls)`` of each family's tiny run (on the CPU)."""
    name, seen = request.param, []
    family = FAMILIES[name]
    options = {key: value for key, value in (("device", "cpu"), ("progress", lambda f, m: seen.append((f, m))))
               if family.takes(key)}
    return name, example(name)(**options), seen


WIDE = re.compile(r"^(.+?)_?(\d+)$")
"""A column named like one of a numbered set (``key_1`` … ``key_8``): a wide table."""


def number_columns_as_objects(frame: pd.DataFrame) -> list[str]:
    """The columns that hold numbers as Python objects, or sizes as text, instead of a numeric dtype."""
    wrong = []
    for column in frame.columns:
        values = frame[column].dropna()
        if values.size and not pd.api.types.is_numeric_dtype(frame[column]) and all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            wrong.append(column)
        elif values.size and pd.api.types.is_string_dtype(frame[column]) and values.map(
                lambda v: bool(re.fullmatch(r"\d+\s*[×x]\s*\d+", str(v)))).all():
            wrong.append(column)  # sizes written as text ("7×7")
    return wrong


@pytest.mark.slow
def test_the_result_is_the_registered_class_and_one_long_table_led_by_the_model(family_result) -> None:
    """``to_frame()``: at least a row, ``model`` and ``spec`` first (text on every row), numbers as numbers, no
    numbered columns of one quantity (``key_1`` … ``key_8``: a long table has a ``key`` column instead)."""
    name, result, _ = family_result
    assert isinstance(result, FAMILIES[name].result_class())
    frame = result.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) >= 1, name
    assert tuple(frame.columns[:2]) == MODEL_COLUMNS, (name, list(frame.columns[:4]))
    assert frame["model"].map(lambda v: isinstance(v, str) and v != "").all(), name
    assert frame["spec"].map(lambda v: isinstance(v, str)).all(), name
    assert number_columns_as_objects(frame) == [], name
    numbered: dict[str, list[str]] = {}
    for column in frame.columns:
        if match := WIDE.match(str(column)):
            numbered.setdefault(match.group(1), []).append(column)
    wide = {stem: columns for stem, columns in numbered.items() if len(columns) >= 3}
    assert wide == {}, (name, wide)


@pytest.mark.slow
def test_every_plot_kind_listed_draws(family_result) -> None:
    """Every kind the result lists draws a figure with no further argument (none listed that cannot be drawn), the
    default first."""
    name, result, _ = family_result
    kinds = result.plot_kinds()
    if not kinds and not result.figure_kinds():
        pytest.skip(f"{name} draws no figure")
    assert kinds and isinstance(result.plot(), go.Figure), name
    assert result.plot().to_json() == result.plot(kinds[0]).to_json() or \
        name == "report", name  # (a report's figures embed timings of the drawing)
    for kind in kinds:
        assert isinstance(result.plot(kind), go.Figure), (name, kind)  # with no further argument
    refused = set(result.figure_kinds()) - set(kinds)
    for kind in refused:  # a kind a result does not list says why it cannot draw it
        with pytest.raises(AnalysisError):
            result.plot(kind)


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


SURVEYED = [name for name, family in FAMILIES.items() if family.survey is not None]


@pytest.mark.slow
@pytest.mark.parametrize("name", SURVEYED)
def test_the_survey_measure_returns_exactly_its_registered_columns(name: str) -> None:
    from fl_core.survey.analysis import survey_row
    from fl_core.survey.settings import SurveySettings

    spec = BANK if name == "masterkeys" else MODEL
    row = survey_row(spec, SurveySettings(family=name, max_images=2, seeds=2, distance=4))
    assert row.error is None, row.error
    assert list(row.values) == list(FAMILIES[name].survey.columns), name
    assert all(isinstance(value, int | float) and not isinstance(value, bool) for value in row.values.values())


def test_a_measure_returning_a_misspelled_column_fails_every_row(monkeypatch) -> None:
    from fl_core.survey import analysis
    from fl_core.survey.analysis import survey_row
    from fl_core.survey.settings import SurveySettings

    def misspelled(loaded, settings, device) -> dict[str, float]:
        return {"convolutions": 1, "filters": 2, "dead_shares": 0.0, "duplicate_share": 0.0, "non_finite": 0,
                "norm_mean": 1.0}

    monkeypatch.setattr(analysis, "resolve", lambda target: misspelled)
    row = survey_row(MODEL, SurveySettings(family="weights"))
    assert row.values == {} and "missing: ['dead_share']; not declared: ['dead_shares']" in row.error


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, family in FAMILIES.items() if family.command])
def test_the_command_writes_its_result_as_json(name: str, tmp_path: Path) -> None:
    from fl_core.cli import main

    out = tmp_path / f"{name}.json"
    extra = ["--html", str(tmp_path / "report.html")] if name == "report" else []
    extra += ["--out", str(tmp_path / "run")] if name == "train" else []
    argv = [name, *COMMANDS.get(name, ["--model", MODEL]), *extra, "--json", str(out), "--quiet"]
    assert main(argv) == 0, argv
    assert isinstance(json.loads(out.read_text()), dict)


@pytest.mark.slow
def test_every_registered_report_section_is_in_the_report(family_result) -> None:
    """Each family's section: a key of the JSON (its result, or ``None`` with the reason in ``skipped``) and a section
    of the HTML with its title and its "how to read"."""
    name, report, _ = family_result
    if name != "report":
        pytest.skip("the report's own result holds the sections")
    import html

    from fl_core.report.build import SECTIONS
    from fl_core.report.html import report_html
    data = report.to_dict()
    page = report_html(report)
    for section, family in report_sections().items():
        assert section in data and (data[section] is not None or section in report.skipped), section
        assert f'<section id="{section}"><h2>{html.escape(SECTIONS[section])}</h2>' in page, section
        assert html.escape(family.how_to_read) in page, section


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

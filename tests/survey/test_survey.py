"""Surveys: the model list (patterns, files, folders, limits), each family's row against the analysis it summarises,
errors as rows, the table and the figure."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl_core.errors import ArgumentError, DataError, ModelSpecError
from fl_core.firstlayer.energy import EnergySettings, analyze_energy
from fl_core.firstlayer.whitening import WhiteningSettings, analyze_whitening
from fl_core.io.checkpoints import save_state_dict
from fl_core.io.images import open_images
from fl_core.io.models import load_model
from fl_core.survey.analysis import (
    COLUMNS,
    HEADLINES,
    SurveyResult,
    SurveyRow,
    SurveySettings,
    analyze_survey,
    model_family,
    survey_row,
)
from fl_core.survey.models import expand_spec, specs_in_text, survey_models
from fl_core.survey.plots import PANEL_TITLE_CHARS


def test_a_timm_pattern_is_every_matching_architecture_and_pretrained_keeps_those_with_weights() -> None:
    import timm

    atto = expand_spec("timm:convnext_at*")
    assert atto == [f"timm:{name}" for name in sorted(timm.list_models("convnext_at*"))] and len(atto) >= 3
    pretrained = expand_spec("timm:convnext_at*@pretrained")
    assert pretrained and all(spec.endswith("@pretrained") for spec in pretrained)
    assert {spec.removesuffix("@pretrained") for spec in pretrained} <= set(atto)
    assert expand_spec("torchvision:vgg1?") == ["torchvision:vgg11", "torchvision:vgg13", "torchvision:vgg16",
                                                "torchvision:vgg19"]
    assert expand_spec(" demo:tiny_vgg ") == ["demo:tiny_vgg"]  # not a pattern: as it is
    with pytest.raises(ModelSpecError, match="No timm architecture matches"):
        expand_spec("timm:no_such_net_*")
    with pytest.raises(ModelSpecError, match="timm:, torchvision: and cifar:"):
        expand_spec("weights:/data/*.pt")
    assert expand_spec("cifar:resnet*")[:3] == ["cifar:resnet20", "cifar:resnet32", "cifar:resnet44"]
    assert expand_spec("cifar:resnet5?") == ["cifar:resnet56"]


def test_models_come_from_specs_files_and_folders_once_each_in_order(tmp_path) -> None:
    listing = tmp_path / "models.txt"
    listing.write_text("# my study\ndemo:tiny_vgg_init\n\ndemo:tiny_vgg   # trained\n")
    assert specs_in_text(listing.read_text()) == ["demo:tiny_vgg_init", "demo:tiny_vgg"]
    folder = tmp_path / "ckpts"
    folder.mkdir()
    for name in ("ckpt_10.safetensors", "ckpt_2.safetensors", "notes.txt"):
        (folder / name).write_bytes(b"")
    specs = survey_models(["demo:tiny_vgg"], [listing], [folder], limit=10)
    assert specs == ("demo:tiny_vgg", "demo:tiny_vgg_init", f"weights:{folder / 'ckpt_2.safetensors'}",
                     f"weights:{folder / 'ckpt_10.safetensors'}")
    with pytest.raises(DataError, match="more than its limit of 3"):
        survey_models(["demo:tiny_vgg"], [listing], [folder], limit=3)
    with pytest.raises(DataError, match="at least one model"):
        survey_models([], limit=3)
    with pytest.raises(DataError, match="Cannot read"):
        survey_models([], [tmp_path / "missing.txt"], limit=3)


def test_model_families_are_registry_stems_or_sources() -> None:
    specs = ("timm:convnext_atto", "timm:mobilenetv3_large_100@pretrained", "torchvision:resnet18=/x.pt",
             "timm:inception_v3", "weights:/x.pt", "demo:tiny_vgg", "demo:ppocrv6_det_small_dw7", "nonsense")
    assert [model_family(spec) for spec in specs] == ["convnext", "mobilenetv3", "resnet", "inception", "weights",
                                                       "small_vgg", "weights", "unknown"]
    # a demo is coloured as the architecture it is built on, not as a family of its own
    assert model_family("demo:squeezenet1_0") == model_family("torchvision:squeezenet1_0") == "squeezenet"


@pytest.mark.slow
def test_an_energy_row_holds_the_numbers_of_the_energy_analysis() -> None:
    settings = SurveySettings(family="energy", seeds=3)
    row = survey_row("demo:tiny_vgg", settings)
    model = analyze_energy([load_model("demo:tiny_vgg")], open_images("bundled"), EnergySettings(seeds=3)).models[0]
    assert row.error is None and row.worker == "local" and row.seconds > 0
    assert row.values == pytest.approx({"theory_r": model.theory.r, "theory_r_log": model.theory.r_log,
                                        "eta_t": model.theory.eta_t, "random_init_r": model.random_init.mean,
                                        "filters": 32.0})
    assert set(row.values) == set(COLUMNS["energy"])


@pytest.mark.slow
def test_a_whitening_row_reads_every_curve_at_the_chosen_distance() -> None:
    loaded = load_model("demo:tiny_vgg")
    row = survey_row("demo:tiny_vgg", SurveySettings(family="whitening", distance=6, seeds=2))
    result = analyze_whitening([loaded], open_images("bundled"), WhiteningSettings(max_distance=6, seeds=2))
    at = list(result.distances).index(6)
    curves = result.curves
    assert row.values == pytest.approx({"whitening": curves["demo:tiny_vgg"][at], "rgb": curves["rgb"][at],
                                        "zca": curves["zca"][at], "random": curves["random"][at]})
    assert row.values["zca"] < row.values["rgb"]  # the whitening bank decorrelates its input


@pytest.mark.slow
def test_a_masterkey_row_gives_the_share_of_each_key() -> None:
    row = survey_row("demo:ppocrv6_det_small_dw7", SurveySettings(family="masterkeys"))
    shares = [row.values[f"key_{k}"] for k in range(1, 9)]
    assert row.error is None and row.values["kernel_size"] == 7 and row.values["filters"] == 384
    assert sum(shares) == pytest.approx(1.0) and 0 < row.values["median_abs_cosine"] <= 1
    no_depthwise = survey_row("demo:tiny_vgg", SurveySettings(family="masterkeys"))
    assert no_depthwise.values == {} and "depthwise" in no_depthwise.error


def test_a_weights_row_counts_dead_and_duplicate_filters(tmp_path) -> None:
    torch.manual_seed(3)
    weight = torch.randn(8, 3, 3, 3)
    weight[6:] = 0  # two dead filters
    weight[5] = weight[4]  # two filters that copy each other
    path = tmp_path / "bank.safetensors"
    save_state_dict({"conv.weight": weight}, path)
    row = survey_row(f"weights:{path}", SurveySettings(family="weights"))
    assert row.values["convolutions"] == 1 and row.values["filters"] == 8 and row.values["non_finite"] == 0
    assert row.values["dead_share"] == pytest.approx(2 / 8) and row.values["duplicate_share"] == pytest.approx(2 / 8)
    assert row.values["norm_mean"] == pytest.approx(float(weight.flatten(1).norm(dim=1).mean()))


def test_one_bad_model_is_a_row_with_its_error_and_the_survey_goes_on(tmp_path) -> None:
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint")
    result = analyze_survey([f"weights:{broken}", "demo:tiny_vgg"], settings=SurveySettings(family="weights"))
    bad, good = result.rows
    assert bad.error and bad.values == {} and bad.label == f"weights:{broken}"
    assert good.error is None and good.values["filters"] > 0
    assert result.failed == (bad,) and result.workers == ("local",)
    frame = result.to_frame()
    assert list(frame.columns[:6]) == ["model", "spec", "model_family", "worker", "seconds", "error"]
    assert list(frame.columns[6:]) == list(COLUMNS["weights"]) and np.isnan(frame.loc[0, "filters"])
    assert result.to_dict()["rows"][1]["values"]["filters"] == good.values["filters"]


def test_the_figure_shows_the_headline_numbers_of_every_model_coloured_by_family() -> None:
    rows = (SurveyRow("timm:resnet18", "resnet18", "resnet", {"theory_r": 0.2, "random_init_r": 0.3}),
            SurveyRow("timm:resnet50", "resnet50", "resnet", {"theory_r": 0.4, "random_init_r": 0.3}),
            SurveyRow("timm:convnext_atto", "convnext_atto", "convnext", {"theory_r": 0.1, "random_init_r": 0.2}),
            SurveyRow("weights:/x.pt", "weights:/x.pt", "weights", error="No checkpoint file"))
    fig = SurveyResult(SurveySettings(), rows, 1.0).plot()
    assert fig.layout.title.text == "energy survey of 4 models (1 failed)"
    assert len(fig.data) == 2 * len(HEADLINES["energy"])  # one trace per family per panel; failed rows left out
    resnets = [trace for trace in fig.data if trace.name == "resnet"]
    assert [list(trace.x) for trace in resnets] == [[0.2, 0.4], [0.3, 0.3]]
    assert resnets[0].marker.color == resnets[1].marker.color != fig.data[1].marker.color
    assert sum(trace.showlegend for trace in fig.data) == 2
    panel_titles = [annotation.text for annotation in fig.layout.annotations]
    assert len(panel_titles) == 2 and panel_titles[0].startswith("Pearson r")  # side by side on a projector:
    assert all(len(line) <= PANEL_TITLE_CHARS for title in panel_titles for line in title.split("<br>"))  # no overlap


def test_a_list_of_bad_names_is_refused_in_one_line_before_any_worker_starts(capsys, monkeypatch) -> None:
    """800 names no registry has: the command's one-line error and exit status 2, no cluster, no Dask log."""
    from fl_core.cli import main
    from fl_core.survey import engine

    monkeypatch.setattr(engine, "survey_client", lambda *args: pytest.fail("a cluster was started"))
    names = [argument for index in range(800) for argument in ("--model", f"timm:no_such_net_{index}")]
    assert main(["survey", "--max-models", "1000", "--quiet", *names]) == 2
    out, err = capsys.readouterr()
    assert not out and err == ("error: 800 of the 800 models cannot be surveyed. The first: timm has no architecture "
                               "'no_such_net_0'. See timm.list_models().\n")


def test_duplicates_are_dropped_before_patterns_expand_and_the_count_is_bounded_as_it_grows(monkeypatch) -> None:
    from fl_core.survey import models

    expanded = []
    real = models.expand_spec
    monkeypatch.setattr(models, "expand_spec", lambda spec: expanded.append(spec) or real(spec))
    assert survey_models(["timm:convnext_at*"] * 5000 + ["demo:tiny_vgg"] * 5000, limit=50) == (
        *expand_spec("timm:convnext_at*"), "demo:tiny_vgg")
    assert expanded == ["timm:convnext_at*", "demo:tiny_vgg"]
    expanded.clear()
    with pytest.raises(DataError, match="more than its limit of 3"):
        survey_models(["timm:resnet*", *(f"demo:tiny_vgg_{index}" for index in range(5000))], limit=3)
    assert expanded == ["timm:resnet*"]  # refused as soon as the list passed the limit


@pytest.mark.slow
def test_the_command_on_its_embedded_cluster_prints_its_rows_not_dasks_log(tmp_path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "fl_core", "survey", "--family", "weights", "--model", "demo:tiny_vgg",
                           "--workers", "1", "--quiet"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("tiny_vgg: dead_share 0.000") and "1 models in" in done.stdout
    assert not [line for line in done.stderr.splitlines() if "INFO" in line or "UserWarning" in line], done.stderr


@pytest.mark.slow
def test_the_embedded_cluster_starts_under_a_main_script_that_cannot_run_again(tmp_path, monkeypatch) -> None:
    """A Streamlit page run in this process leaves itself as ``__main__``; spawned workers must not run it."""
    import os
    import sys
    import types

    from fl_core.survey.engine import survey_client

    page = tmp_path / "page.py"
    page.write_text("raise SystemExit('the page ran again in a worker')\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(page)
    monkeypatch.setitem(sys.modules, "__main__", main)
    environment = dict(os.environ)
    with survey_client(None, 1) as client:
        assert len(client.sync(client.scheduler.identity, n_workers=-1)["workers"]) == 1  # not the client's cache
    assert sys.modules["__main__"] is main
    assert dict(os.environ) == environment  # the nannies' malloc settings for the workers do not stay behind


@pytest.mark.slow
def test_a_survey_takes_a_tensor_batch_as_every_family_takes_data() -> None:
    torch.manual_seed(0)
    batch = torch.rand(6, 3, 64, 64)
    survey = analyze_survey(["demo:tiny_vgg", "demo:tiny_vgg_init"], batch, family="energy", seeds=2, progress=False)
    direct = analyze_energy([load_model("demo:tiny_vgg")], batch, EnergySettings(seeds=2)).models[0]
    assert [row.error for row in survey.rows] == [None, None]
    assert survey.rows[0].values["theory_r"] == pytest.approx(direct.theory.r)
    limited = analyze_survey("demo:tiny_vgg", batch, family="whitening", distance=4, seeds=2, max_images=2,
                             progress=False)
    reference = analyze_whitening([load_model("demo:tiny_vgg")], batch[:2], WhiteningSettings(max_distance=4, seeds=2))
    at = list(reference.distances).index(4)
    assert limited.rows[0].values["whitening"] == pytest.approx(reference.curves["demo:tiny_vgg"][at])
    with pytest.warns(UserWarning, match="a masterkeys survey analyses the weights alone"):
        keys = analyze_survey("demo:ppocrv6_det_small_dw7", batch, family="masterkeys", progress=False)
    assert keys.rows[0].error is None
    with pytest.raises(ArgumentError, match=r"data must be an image source .*not int"):
        analyze_survey("demo:tiny_vgg", 42)

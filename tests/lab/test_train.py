"""Training Lab runs: determinism, the first layer moving toward the theory, frozen layers, cancelling, run folders
that the other pages load, demo registration, the ``train`` CLI and the background job."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from fl_core.cli import build_parser, main
from fl_core.cli.train import config_from_args
from fl_core.errors import AnalysisError, ArgumentError, DataError, ModelSpecError
from fl_core.io import DEMO_DIR
from fl_core.io.checkpoints import load_into, load_state_dict
from fl_core.io.models import load_model
from fl_core.io.nets import NETS, build_net
from fl_core.lab.claims import run_trajectory
from fl_core.lab.experiments import SUITES
from fl_core.lab.runs import (
    SHIPPED_RUNS_DIR,
    RunSettings,
    check_run_budget,
    list_runs,
    load_run,
    register_demo_runs,
    resolve_config,
    train_run,
)
from fl_core.lab.settings import SMALL_NETS
from fl_core.lab.train import TrainSettings
from fl_core.settings import replace_settings
from fl_ui.jobs import TrainingJob

TINY = RunSettings(width=8, body_widths=(8, 8), crops_per_image=20, snapshots=4,
                 train=TrainSettings(steps=30, batch_size=32, lr=0.5))
"""A tiny net on 220 crops: seconds per run, and the first layer still moves decisively."""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One tiny run saved with checkpoints (shared by the read-only tests below)."""
    return train_run(TINY, tmp_path_factory.mktemp("runs") / "tiny")


def test_the_light_settings_name_every_small_net() -> None:
    assert tuple(NETS) == SMALL_NETS


@pytest.mark.slow
def test_training_is_deterministic_under_a_seed() -> None:
    short = replace_settings(TINY, {"steps": 6, "snapshots": 3, "labels": "random"})
    first, again = train_run(short), train_run(short)
    assert first.steps == again.steps == [0, 1, 6]
    for step in first.steps:
        np.testing.assert_array_equal(again.snapshots[step], first.snapshots[step])
    assert again.history.train_loss == first.history.train_loss
    assert again.history.val_accuracy == first.history.val_accuracy
    other = train_run(replace_settings(short, {"seed": 1, "steps": 1}))
    assert not np.array_equal(other.snapshots[0], first.snapshots[0])


@pytest.mark.slow
def test_a_short_run_moves_the_profile_away_from_init_toward_the_theory(saved) -> None:
    assert saved.steps == [0, 1, 5, 30]
    traj = run_trajectory(saved)
    assert traj.raw_r[-1] > traj.raw_r[0] + 0.3  # the raw weights' fit rises …
    assert traj.raw_r[-1] > 0.8
    assert traj.vs_init[-1] < 0.6  # … as the profile leaves the (flat) initial one
    assert np.all(traj.r[1:] > 0.9)  # the update w_t − w_0 follows the theory from the first steps


@pytest.mark.slow
def test_a_frozen_first_layer_stays_at_its_initialization(tmp_path) -> None:
    run = train_run(replace_settings(TINY, {"freeze_first": True, "steps": 10}), tmp_path / "frozen")
    for step in run.steps:
        np.testing.assert_array_equal(run.snapshots[step], run.init_weights)
    init, final = (load_state_dict(tmp_path / "frozen" / f"{w}.safetensors").tensors for w in ("init", "final"))
    assert torch.equal(init["features.0.weight"], final["features.0.weight"])
    assert not torch.equal(init["features.4.weight"], final["features.4.weight"])  # the rest did train
    assert np.isnan(run_trajectory(run).r).all()  # nothing moved: no w − w₀ profile to fit


@pytest.mark.slow
def test_appendix_d_runs_train_on_the_manipulated_input_and_energy_labels() -> None:
    d2 = train_run(replace_settings(TINY, {"steps": 2, "snapshots": 2, "alpha": 3.0, "alpha_component": 4}))
    assert d2.arch_kwargs["first_stride"] == 3 and d2.arch_kwargs["first_padding"] == 0  # it sees the tiles
    predicted = d2.reference_pca.with_scaled_component(3, 3.0)
    np.testing.assert_allclose(d2.pca.lambdas, predicted.lambdas, rtol=1e-4)  # the theory's modified spectrum
    assert run_trajectory(d2).reference_r is not None
    d1 = train_run(replace_settings(TINY, {"steps": 2, "snapshots": 2, "labels": "energy", "label_component": 15}))
    assert len(d1.classes) == 10 and d1.provenance["chance_accuracy"] == pytest.approx(0.1, abs=0.01)
    assert len(d1.provenance["energy_decile_cuts"]) == 9


@pytest.mark.slow
def test_cancelling_keeps_what_was_trained(tmp_path) -> None:
    calls, messages = [], []
    run = train_run(replace_settings(TINY, {"steps": 200}), tmp_path / "cancelled",
                    should_stop=lambda: calls.append(1) or len(calls) >= 4,
                    progress=lambda f, m: messages.append((f, m)))
    # polled once per logging interval (every 2 of 200 steps, or a second), not every step: the 4th poll by step 8
    assert run.history.stopped_early and run.steps[-1] <= 8 and run.history.steps[-1] == run.steps[-1]
    assert len(calls) == 4
    assert load_run(tmp_path / "cancelled").history.stopped_early
    assert any("step 2/200" in m for _, m in messages) and messages[-1][0] == 1.0


@pytest.mark.slow
def test_run_folders_round_trip_and_open_in_the_other_pages(saved) -> None:
    loaded = load_run(saved.path)
    assert loaded.config == TINY and loaded.classes == saved.classes
    assert loaded.history.val_accuracy == saved.history.val_accuracy
    for step in saved.steps:
        np.testing.assert_array_equal(loaded.snapshots[step], saved.snapshots[step])
    np.testing.assert_allclose(loaded.pca.lambdas, saved.pca.lambdas)
    spec, overrides = loaded.weights_spec()
    model = load_model(spec, input_overrides=overrides)
    assert model.weights_only and model.input_config.input_size == 32
    np.testing.assert_array_equal(model.state_dict["features.0.weight"].numpy(), saved.final_weights)
    net = build_net(loaded.config.arch, **loaded.arch_kwargs)
    load_into(net, load_state_dict(loaded.checkpoint("init")).tensors, "init")  # strict: same architecture
    np.testing.assert_array_equal(net.features[0].weight.detach().numpy(), saved.init_weights)
    document = json.loads((loaded.checkpoint("final").parent / "run.json").read_text())
    assert document["format"] == "filterlens-run/1" and document["provenance"]["trained_steps"] == 30


@pytest.mark.slow
def test_demo_registration_adds_lab_entries_and_keeps_the_others(saved, tmp_path) -> None:
    manifest = tmp_path / "manifest.json"
    shutil.copy(DEMO_DIR / "manifest.json", manifest)
    before = {e["name"]: e for e in json.loads(manifest.read_text())["models"] if not e["name"].startswith("lab_")}
    named = dataclasses.replace(saved, name="lab_tiny")
    assert register_demo_runs([named], manifest) == ["lab_tiny", "lab_tiny_init"]
    entries = {e["name"]: e for e in json.loads(manifest.read_text())["models"]}
    assert {k: v for k, v in entries.items() if k in before} == before  # tiny_vgg entries untouched
    assert entries["lab_tiny"]["init"] == "lab_tiny_init" and entries["lab_tiny_init"]["init"] is None
    assert (tmp_path / entries["lab_tiny"]["file"]).resolve() == saved.checkpoint("final").resolve()
    net = build_net(entries["lab_tiny"]["arch"], **entries["lab_tiny"]["arch_kwargs"])
    load_into(net, load_state_dict(tmp_path / entries["lab_tiny"]["file"]).tensors, "lab_tiny")
    with pytest.raises(DataError):
        register_demo_runs([saved], manifest)  # only lab_* names are written


def test_shipped_runs_are_registered_as_demo_models() -> None:
    run = load_run(SHIPPED_RUNS_DIR / "lab_vgg_true_s0")
    demo = load_model("demo:lab_vgg_true_s0")
    assert demo.init_spec == "demo:lab_vgg_true_s0_init" and not demo.random_init
    np.testing.assert_array_equal(demo.state_dict["features.0.weight"].numpy(), run.final_weights)
    assert load_model("demo:lab_vgg_true_s0_init").random_init
    assert demo.input_config == run.input_config


def test_shipped_run_folders_read_back_the_optimizer_they_were_trained_with() -> None:
    suite = {item.name: item.config for item in SUITES["paper"]}
    for folder in list_runs(SHIPPED_RUNS_DIR):
        stored = json.loads((folder / "run.json").read_text())["config"]
        run = load_run(folder)
        assert run.config.train == run.history.config  # steps, lr, momentum, seed, … and the derived schedule
        assert json.loads(json.dumps(run.config.to_dict())) == stored  # the same flat keys and values
        assert run.config == suite[run.name]  # make_shipped_runs.py would resume it, not retrain it
    assert (RunSettings().train.momentum, RunSettings().train.lr, RunSettings().train.steps) == (0.0, 0.2, 400)


def test_run_configs_round_trip_through_their_flat_json() -> None:
    config = replace_settings(TINY, {"seed": 3, "momentum": 0.5, "weight_decay": 1e-4, "freeze_first": True,
                                     "labels": "energy", "label_component": 2, "max_images": 7})
    document = json.loads(json.dumps(config.to_dict()))
    assert "train" not in document and {"seed", "momentum", "eval_every"} - set(document) == {"eval_every"}
    assert RunSettings.from_dict({**document, "a_key_of_a_later_version": 1}) == config
    assert config.train.eval_every == 10 and config.train.snapshot_steps == config.snapshot_steps() == (0, 1, 5, 30)
    longer = replace_settings(config, {"steps": 400})
    assert longer.train.eval_every == 20 and longer.train.snapshot_steps[-1] == 400  # the schedule follows the steps
    with pytest.raises(ArgumentError, match=r"lr must be at least 1e-06 and at most 10\.0, not 0\.0"):
        replace_settings(TINY, {"lr": 0.0})


@pytest.mark.slow
def test_timm_architectures_train_with_their_own_first_layer() -> None:
    config = resolve_config(replace_settings(TINY, {"arch": "timm:resnet10t", "steps": 2, "batch_size": 8,
                                                    "snapshots": 2}))
    assert (config.width, config.first_kernel) == (24, 3)  # its stem, not the small-net defaults
    run = train_run(config)
    assert run.first_layer == "conv1.0" and run.init_weights.shape == (24, 3, 3, 3) and run.pca.dim == 27
    with pytest.raises(ModelSpecError, match="32×32"):
        resolve_config(replace_settings(TINY, {"arch": "timm:inception_v3"}))
    with pytest.raises(ModelSpecError):
        RunSettings(arch="timm:resnet18", alpha=2.0)


@pytest.mark.slow
def test_a_run_over_a_budget_is_refused_before_its_network_is_built(monkeypatch, tmp_path) -> None:
    """Issue 33: a ViT-Huge run grew its worker by 4 GB in 2 minutes, a width-256 net at batch 4096 by 5.5 GB in 36 s;
    each budget names its limit, and nothing is written."""
    with pytest.raises(ModelSpecError, match=r"630 million parameters, over the 250 million .*FL_MAX_PARAMS"):
        train_run(RunSettings(arch="timm:vit_huge_patch14_224"), tmp_path / "vit")
    with pytest.raises(AnalysisError, match=r"batch size 4,096 would take about 19\.\d GiB, over the 1\.0 GiB .*"
                                            "FL_ANALYSIS_MEMORY_MB"):
        train_run(RunSettings(width=256, train=TrainSettings(batch_size=4096)), tmp_path / "wide")
    with pytest.raises(AnalysisError, match=r"20,000 steps at batch size 128 would cost 284\.\d trillion "
                                            r"multiply-adds, over the 100 trillion .*FL_TRAINING_TMAC"):
        train_run(RunSettings(arch="timm:resnet18", train=TrainSettings(steps=20_000)), tmp_path / "long")
    assert not list(tmp_path.iterdir())
    check_run_budget(RunSettings())  # the page's default run: 1.4 trillion multiply-adds, about 150 MB
    monkeypatch.setenv("FL_TRAINING_TMAC", "1")
    with pytest.raises(AnalysisError, match=r"1\.4 trillion multiply-adds, over the 1 trillion"):
        check_run_budget(RunSettings())


@pytest.mark.slow
def test_cli_trains_a_run_folder_and_reports_json(tmp_path, capsys) -> None:
    out = tmp_path / "cli"
    args = ["train", "--width", "8", "--body-widths", "8", "8", "--steps", "6", "--batch-size", "16",
            "--crops-per-image", "20", "--snapshots", "3", "--labels", "random", "--out", str(out), "--json",
            str(tmp_path / "r.json"), "--quiet", "--no-checkpoints"]
    assert main(args) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    entry = report["runs"][0]
    assert entry["config"]["labels"] == "random" and entry["path"] == str(out)
    assert [row["step"] for row in entry["trajectory"]] == [0, 1, 6]
    assert {c["key"] for c in report["claims"]["claims"]} >= {"seeds", "true_vs_random", "theory_fit"}
    assert load_run(out).checkpoint("final") is None and "theory fit r =" in capsys.readouterr().out
    assert main(["train", "--arch", "not_a_net", "--out", str(tmp_path / "bad"), "--quiet"]) == 2


def test_cli_keeps_every_documented_training_flag() -> None:
    args = build_parser().parse_args([
        "train", "--images", "/data/tree", "--max-images", "5", "--crops-per-image", "20", "--arch", "small_resnet",
        "--width", "16", "--body-widths", "8", "12", "--first-kernel", "5", "--freeze-first", "--labels", "energy",
        "--label-component", "2", "--alpha", "1.0", "--alpha-component", "3", "--seed", "4", "--steps", "50",
        "--batch-size", "64", "--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.001", "--snapshots", "5"])
    assert config_from_args(args) == RunSettings(
        images="/data/tree", max_images=5, crops_per_image=20, arch="small_resnet", width=16, body_widths=(8, 12),
        first_kernel=5, labels="energy", label_component=2, alpha_component=3, snapshots=5,
        train=TrainSettings(steps=50, batch_size=64, lr=0.1, momentum=0.9, weight_decay=0.001, seed=4,
                          freeze_first=True))
    assert config_from_args(build_parser().parse_args(["train"])) == RunSettings()  # the defaults are the class's
    for bad in (["--first-kernel", "40"], ["--labels", "nope"], ["--steps", "0"], ["--snapshots", "1"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["train", *bad])
    with pytest.raises(ModelSpecError, match="First-layer kernel 4: choose 3, 5, 7"):  # a timm net may have it
        config_from_args(build_parser().parse_args(["train", "--first-kernel", "4"]))


@pytest.mark.slow
def test_a_background_job_reports_live_snapshots_and_can_be_cancelled(tmp_path) -> None:
    job = TrainingJob(replace_settings(TINY, {"steps": 5, "snapshots": 3}), tmp_path / "job").start()
    status = job.wait(timeout=600)
    assert status.state == "done" and status.run.path == str(tmp_path / "job") and status.fraction == 1.0
    assert sorted(status.snapshots) == status.run.steps and status.pca is not None
    slow = TrainingJob(replace_settings(TINY, {"steps": 20_000}), tmp_path / "slow").start()
    slow.cancel()
    status = slow.wait(timeout=600)
    assert status.state == "cancelled" and status.error is None


@pytest.mark.slow
def test_the_trainer_reads_the_device_once_per_logging_interval(monkeypatch) -> None:
    """Between logging intervals (every 3 of 300 steps here) nothing waits for the device, and the stop check is
    polled once per interval, not per step."""
    import fl_core.lab.train as train

    reads = []
    for name in ("item", "tolist", "__int__", "__float__", "__bool__", "cpu", "numpy"):
        method = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _m=method, _n=name, **k: reads.append(_n) or
                            _m(self, *a, **k))
    monkeypatch.setattr(train, "evaluate", lambda *args: (0.0, 0.0))  # (the validation pass reads on purpose)
    monkeypatch.setattr(train, "LOG_SECONDS", float("inf"))  # intervals by steps only, however loaded the machine
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 3, 8, 8, generator=generator), torch.randint(0, 4, (64,), generator=generator)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 4))
    polls = []
    history = train.train_classifier(model, x, y, x, y, lambda b: b, model[0],
                                     TrainSettings(steps=300, batch_size=16, eval_every=1000),
                                     should_stop=lambda: polls.append(1) and False)
    assert len(polls) == 100 and reads == ["tolist"] * 100 and history.steps == [300]

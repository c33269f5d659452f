"""The command line: JSON keys scripts rely on (docs/cli.md, "JSON output"), CSV output, one-line errors with exit
status 2."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fl_core.cli import main

from .conftest import RESNET20_SPEC


def run_cli(*args: str) -> int:
    return main([*args, "--quiet"])


@pytest.mark.slow
def test_energy_json_has_the_contract_keys(tmp_path: Path) -> None:
    out, table = tmp_path / "energy.json", tmp_path / "energy.csv"
    assert run_cli("energy", "--model", "demo:tiny_vgg", "--model", "demo:tiny_vgg_init", "--subtract-init",
                   "--seeds", "4", "--json", str(out), "--csv", str(table)) == 0
    payload = json.loads(out.read_text())
    assert {"lambdas", "models", "correlation"} <= set(payload)
    first = payload["models"][0]
    assert {"spec", "layer", "profile", "theory", "random_init"} <= set(first)
    assert set(first["theory"]) == {"eta_t", "r", "r_log", "affine"} and {"mean", "sd"} <= set(first["random_init"])
    assert len(first["profile"]) == len(payload["lambdas"]) == 27
    assert first["init_subtracted"] == "demo:tiny_vgg_init" and payload["models"][1]["init_subtracted"] is None
    assert len(payload["correlation"]) == 2 and payload["correlation"][0][0] == pytest.approx(1.0)
    assert len(pd.read_csv(table)) == 2 * 27


@pytest.mark.slow
def test_whitening_json_has_the_contract_keys(tmp_path: Path) -> None:
    out = tmp_path / "whitening.json"
    assert run_cli("whitening", "--model", "demo:tiny_vgg", "--max-distance", "6", "--json", str(out)) == 0
    payload = json.loads(out.read_text())
    assert payload["distances"] == list(range(7))
    assert set(payload["curves"]) == {"rgb", "zca", "random", "demo:tiny_vgg"}
    assert all(len(curve) == 7 for curve in payload["curves"].values())


def command_options(command: str, *options: str):
    """The options of one command (its own module's ``add_arguments``), parsed."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser(prog=command)
    importlib.import_module(f"fl_core.cli.{command}").add_arguments(parser)
    required = ["--html", "r.html"] if command == "report" else []
    return parser.parse_args(["--model", "demo:tiny_vgg", *required, *options])


@pytest.mark.parametrize(("command", "options", "given"), [
    ("energy", [], {}),
    ("energy", ["--layer", "features.4", "--seeds", "3"], {"layer": "features.4", "seeds": 3}),
    ("whitening", [], {}),
    ("whitening", ["--max-distance", "6", "--seeds", "12"], {"max_distance": 6, "seeds": 12}),
    ("report", [], {}),
    ("report", ["--images", "/data/val", "--max-images", "40", "--k", "6", "--method", "D1", "--channel-layer",
                "features.4", "--n-calibration", "32", "--trajectory-distance", "5", "--seed", "3"],
     {"images": "/data/val", "max_images": 40, "k": 6, "method": "D1", "channel_layer": "features.4",
      "n_calibration": 32, "trajectory_distance": 5, "seed": 3}),
])
def test_options_are_the_settings_fields(command: str, options: list[str], given: dict) -> None:
    """No option: the settings class's own defaults; the documented flags set the fields they name."""
    from fl_core.firstlayer.energy import EnergySettings
    from fl_core.firstlayer.whitening import WhiteningSettings
    from fl_core.report.build import ReportSettings
    from fl_core.settings import settings_from_args

    cls = {"energy": EnergySettings, "whitening": WhiteningSettings, "report": ReportSettings}[command]
    assert settings_from_args(cls, command_options(command, *options)) == cls(**given)


def test_first_layer_seeds_below_one_are_refused(capsys) -> None:
    for command in ("energy", "whitening"):
        with pytest.raises(SystemExit) as refused:
            command_options(command, "--seeds", "0")
        assert refused.value.code == 2 and "--seeds must be at least 1" in capsys.readouterr().err


def test_inspect_with_preprocessing_overrides(tmp_path: Path, resnet20, capsys) -> None:
    out = tmp_path / "inspect.json"
    assert run_cli("inspect", "--model", RESNET20_SPEC, "--input-size", "32", "--mean", "0.49", "0.48", "0.45",
                   "--json", str(out)) == 0
    model = json.loads(out.read_text())["models"][0]
    assert model["input_config"]["input_size"] == 32 and model["input_config"]["mean"] == [0.49, 0.48, 0.45]
    assert model["layers"][0]["kind"] == "first"
    printed = capsys.readouterr().out
    assert "stripped the 'module.' prefix" in printed
    assert "preprocessing 32 px, cropped from 36 px, bilinear, mean 0.49 0.48 0.45" in printed
    assert "FilterLens's default for files that do not record theirs" in printed and "input size, mean set by you" in \
        printed


@pytest.mark.slow
def test_bad_input_gives_one_line_and_exit_status_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "fl_core", "energy", "--model", "weights:/no/such/file.pt",
                           "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: No checkpoint file")


@pytest.mark.slow
def test_dash_writes_json_or_csv_to_stdout_and_the_summary_to_stderr(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    command = ["whitening", "--model", "demo:tiny_vgg", "--max-distance", "6"]
    assert run_cli(*command, "--json", "file.json", "--csv", "file.csv") == 0
    summary = capsys.readouterr().out
    assert run_cli(*command, "--json", "-") == 0
    piped = capsys.readouterr()
    assert json.loads(piped.out) == json.loads((tmp_path / "file.json").read_text())
    assert piped.err.strip() == summary.strip() and summary.strip()
    assert run_cli(*command, "--csv", "-") == 0
    assert capsys.readouterr().out == (tmp_path / "file.csv").read_bytes().decode()
    assert not (tmp_path / "-").exists()
    with pytest.raises(SystemExit) as refused:
        run_cli(*command, "--json", "-", "--csv", "-")
    assert refused.value.code == 2 and "only one output" in capsys.readouterr().err


def test_channels_options_give_the_settings_class_defaults_and_read_every_documented_flag() -> None:
    from fl_core.channelaxes.analysis import ChannelSettings
    from fl_core.channelaxes.layerstats import AxisSettings
    from fl_core.channelaxes.pruning import PruningSettings
    from fl_core.cli import build_parser
    from fl_core.cli.channels import channel_settings, several_layers

    parser = build_parser()
    assert channel_settings(parser.parse_args(["channels", "--model", "demo:tiny_vgg"])) == ChannelSettings(
        pruning=PruningSettings())
    args = parser.parse_args([
        "channels", "--model", "demo:tiny_vgg", "--layer", "features.7", "--seed", "3", "--k", "4", "--shrinkage",
        "0.01", "--ridge", "0.1", "--cluster-k", "3", "--cluster-seeds", "2", "--lesions", "mean", "replace",
        "--criteria", "l1", "random", "--fractions", "0.5", "--finetune-steps", "0", "--finetune-lr", "0.01",
        "--no-mean-compensation", "--batch-size", "8", "--memory-mb", "64", "--flops-targets", "0.1", "0.3",
        "--recovery-steps", "5"])
    assert channel_settings(args) == ChannelSettings(
        layer="features.7", axes=AxisSettings(k=4, shrinkage=0.01, ridge=0.1, seed=3), lesion_kinds=("mean", "replace"),
        cluster_k=3, cluster_seeds=2, batch_size=8, memory_mb=64,
        pruning=PruningSettings(criteria=("l1", "random"), fractions=(0.5,), finetune_steps=0, finetune_lr=0.01,
                                compensate_mean=False, seed=3, flops_targets=(0.1, 0.3), recovery_steps=5))
    assert several_layers(args)  # layers pruned together run as a sweep (its JSON's network_pruning)
    no_pruning = parser.parse_args(["channels", "--model", "demo:tiny_vgg", "--criteria", "--lesions"])
    assert channel_settings(no_pruning).pruning is None and channel_settings(no_pruning).lesion_kinds == ()
    with pytest.raises(SystemExit):
        parser.parse_args(["channels", "--model", "demo:tiny_vgg", "--criteria", "magic"])


@pytest.mark.slow
def test_channels_json_has_the_contract_keys(tmp_path: Path) -> None:
    out = tmp_path / "channels.json"
    assert run_cli("channels", "--model", "demo:tiny_vgg", "--layer", "features.14", "--calibration", "32",
                   "--evaluation", "16", "--lesions", "mean", "--criteria", "local", "l1", "--fractions", "0.5",
                   "--finetune-steps", "0", "--cluster-seeds", "2", "--json", str(out)) == 0
    payload = json.loads(out.read_text())
    assert payload["layer"] == "features.14" and len(payload["channels"]) == 128
    assert {"index", "input_capture", "peer_overlap", "peer_r2", "task_info", "target_excess", "lesion_dloss",
            "replacement_dloss"} <= set(payload["channels"][0])
    assert -1 <= payload["spearman"] <= 1 and "ari" in payload
    assert set(payload["pruning"]) == {"local", "l1"}
    assert {"flops_removed", "accuracy", "auc"} <= set(payload["pruning"]["l1"])


HELP_SECONDS = 1.0
"""The most ``--help`` may take (issue 35: TensorBoard, timm's scripts and Jupyter answer in well under a second)."""
HEAVY = ("torch", "torchvision", "timm", "numpy", "pandas", "scipy", "torch_pruning", "plotly", "streamlit")


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["energy", "--help"], ["channels", "--help"], ["train", "--help"],
                                  ["env", "--help"], ["energy", "--model", "demo:tiny_vgg", "--seeds", "0"]])
def test_help_and_a_refused_option_answer_at_once_without_the_analyses(argv: list[str]) -> None:
    """In a fresh interpreter: no torch, numpy or pandas loaded, and within :data:`HELP_SECONDS` of the processor's
    time (the child's own user + system seconds, the best of three: a machine shared with other jobs stretches the
    wall-clock time, not the work)."""
    code = (f"import sys\nfrom fl_core.cli import main\nstatus = 0\ntry:\n    main(sys.argv[1:])\n"
            f"except SystemExit as done:\n    status = done.code\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}), file=sys.stderr)\n"
            f"sys.exit(status)")
    seconds = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        assert done.returncode == (0 if "--help" in argv else 2), done.stderr
        assert done.stderr.strip().endswith("[]"), done.stderr  # nothing heavy was imported
    assert min(seconds) < HELP_SECONDS, seconds

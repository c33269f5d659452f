"""A layer's channel axes over a plain folder of one run's checkpoints (``channels --model cifar:resnet20=DIR``): one
snapshot per checkpoint in the order of the epochs they record, each row what ``snapshot_axes`` measures on that
checkpoint, and the folder refused where the spec's other doors refuse it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_core.channelaxes.calibration import channel_data
from fl_core.channelaxes.settings import AxisSettings, ChannelSettings
from fl_core.channelaxes.training import snapshot_axes
from fl_core.cli import main
from fl_core.compute.device import resolve_device
from fl_core.io.checkpoints import save_state_dict
from fl_core.io.cifar import CIFAR10_CLASSES, cifar_resnet
from fl_core.io.models import load_model

from ..cifar_files import write_cifar
from .test_axes_over_training import _close

LAYER = "layer2.0.conv1"
EPOCHS = {"ckpt_a.pth": 30, "ckpt_b.pth": 0, "ckpt_c.safetensors": 10}
"""File names whose natural order (a, b, c) is not the training order the epochs record (b, c, a)."""
OPTIONS = ["--layer", LAYER, "--calibration", "24", "--evaluation", "8", "--bootstrap", "20", "--permutations", "50",
           "--device", "cpu", "--quiet"]
SETTINGS = ChannelSettings(axes=AxisSettings(bootstrap=20, permutations=50))


def save_checkpoint(model: torch.nn.Module, path: Path, epoch: int) -> None:
    """As the common trainers save: a torch file ``{'epoch', 'state_dict' (DataParallel's ``module.`` prefix),
    'best_prec1'}``, or safetensors with the epoch in its metadata."""
    tensors = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    if path.suffix == ".safetensors":
        save_state_dict(tensors, path, {"epoch": str(epoch)})
    else:
        torch.save({"epoch": epoch, "state_dict": {f"module.{k}": v for k, v in tensors.items()}, "best_prec1": 9.5},
                   path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Three checkpoints of a CIFAR ResNet-20: its random init moved further from it at each later epoch."""
    folder = tmp_path_factory.mktemp("resnet20_run")
    torch.manual_seed(0)
    model = cifar_resnet("resnet20")
    start = {k: v.clone() for k, v in model.state_dict().items()}
    for name, epoch in EPOCHS.items():
        with torch.no_grad():
            for key, param in model.named_parameters():
                param.copy_(start[key] + 0.02 * epoch / 30 * torch.randn_like(param))
        save_checkpoint(model, folder / name, epoch)
    return folder


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> str:
    """60 labelled 32-px images in CIFAR-10's own format."""
    pixels = np.random.default_rng(0).integers(0, 256, (60, 32, 32, 3), dtype=np.uint8)
    found = write_cifar(tmp_path_factory.mktemp("cifar"), "cifar10", list(CIFAR10_CLASSES),
                        (pixels, [i % 10 for i in range(60)]))
    return f"cifar10:{found}"


def direct_snapshot(path: Path, images: str, step: int) -> dict:
    """:func:`snapshot_axes` on one checkpoint loaded on its own, with the options' images and settings."""
    loaded = load_model(f"cifar:resnet20={path}")
    row = snapshot_axes(loaded.model, LAYER, channel_data(loaded, images, 24, 8), SETTINGS, step=step,
                        device=resolve_device("cpu")).to_dict()
    row.pop("seconds")
    return row


@pytest.mark.slow
def test_each_checkpoint_is_a_snapshot_at_its_recorded_epoch_measured_as_snapshot_axes_measures_it(
        folder, images, tmp_path, capsys) -> None:
    out = tmp_path / "axes.json"
    assert main(["channels", "--model", f"cifar:resnet20={folder}", "--data", images, *OPTIONS,
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    measured = json.loads(out.read_text())
    assert measured["layer"] == LAYER and [s["step"] for s in measured["snapshots"]] == [0, 10, 30]
    for again, (name, epoch) in zip(measured["snapshots"], sorted(EPOCHS.items(), key=lambda item: item[1]),
                                    strict=True):
        again.pop("seconds")
        assert again["n_images"] == 24 and _close(again, direct_snapshot(folder / name, images, epoch)), name
    claims = [line.split(".")[0] for line in map(str.strip, printed.splitlines()) if " -> " in line]
    assert claims == ["1", "2", "5"], printed


@pytest.mark.slow
def test_a_folder_without_recorded_epochs_is_in_the_natural_order_of_its_names_at_their_index(
        folder, images, tmp_path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for i, name in enumerate(("epoch_10.safetensors", "epoch_2.safetensors")):  # natural order: 2, then 10
        save_state_dict(load_model(f"cifar:resnet20={folder / sorted(EPOCHS)[i]}").state_dict, plain / name)
    out = tmp_path / "axes.json"
    assert main(["channels", "--model", f"cifar:resnet20={plain}", "--data", images, *OPTIONS,
                 "--json", str(out)]) == 0
    first, second = json.loads(out.read_text())["snapshots"]
    assert (first["step"], second["step"]) == (0, 1) and first["spearman"] != second["spearman"]
    first.pop("seconds")
    assert _close(first, direct_snapshot(plain / "epoch_2.safetensors", images, 0))


@pytest.mark.slow
def test_the_bundled_crops_labelled_by_each_checkpoints_decisions_are_refused(folder, capsys) -> None:
    assert main(["channels", "--model", f"cifar:resnet20={folder}", *OPTIONS]) == 2
    assert "changes over training" in capsys.readouterr().err


def test_a_folder_without_checkpoints_and_a_missing_file_keep_their_messages(tmp_path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["channels", "--model", f"cifar:resnet20={empty}", *OPTIONS]) == 2
    assert "holds no checkpoint files" in capsys.readouterr().err
    assert main(["inspect", "--model", f"cifar:resnet20={empty}"]) == 2
    assert "is a folder, not a checkpoint file" in capsys.readouterr().err
    assert main(["channels", "--model", f"cifar:resnet20={empty / 'gone.pth'}", *OPTIONS]) == 2
    assert "No checkpoint file at" in capsys.readouterr().err


@pytest.mark.slow
def test_a_checkpoint_file_is_still_one_model(folder, capsys) -> None:
    assert main(["inspect", "--model", f"cifar:resnet20={folder / 'ckpt_b.pth'}"]) == 0
    assert "resnet20" in capsys.readouterr().out


def test_a_folder_outside_the_data_roots_is_refused_before_it_is_listed(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "shared").mkdir(), (tmp_path / "private").mkdir()
    monkeypatch.setenv("FL_DATA_ROOTS", str(tmp_path / "shared"))
    assert main(["channels", "--model", f"cifar:resnet20={tmp_path / 'private'}", *OPTIONS]) == 2
    assert "is outside the folders this server shares" in capsys.readouterr().err

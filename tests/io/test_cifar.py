"""CIFAR ResNets as full networks: ``cifar:resnetNN[=PATH]``, the published checkpoint layouts, the real ResNet-20."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fl_core.channelaxes.site import default_channel_layer
from fl_core.errors import CheckpointError, ModelSpecError
from fl_core.io.cifar import CIFAR10_CLASSES, cifar_resnet, read_cifar_layout
from fl_core.io.classes import map_tree_classes
from fl_core.io.images import folder_images, iter_input_batches
from fl_core.io.layers import conv_inventory
from fl_core.io.models import load_model
from fl_core.io.preprocessing import IMAGENET_MEAN
from tests.conftest import CHECKPOINTS, REPO, require_fixture

RESNET20_FILE = CHECKPOINTS / "resnet20_cifar10.th"


def save_akamaster(model: torch.nn.Module, path: Path) -> Path:
    """A network saved as akamaster's trainer saves it: ``{'state_dict': ..., 'best_prec1': ...}``, DataParallel's
    ``module.`` prefix, the classifier named ``linear``, no BatchNorm counters."""
    tensors = {f"module.{key.replace('fc.', 'linear.')}": value for key, value in model.state_dict().items()
               if not key.endswith("num_batches_tracked")}
    torch.save({"state_dict": tensors, "best_prec1": 12.5}, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("name", "parameters"), [("resnet20", 269_722), ("resnet56", 853_018),
                                                  ("resnet110", 1_727_962)])
def test_architectures_have_the_papers_sizes(name: str, parameters: int) -> None:
    loaded = load_model(f"cifar:{name}")
    assert sum(p.numel() for p in loaded.model.parameters()) == parameters  # He et al. 2016, Table 6: 0.27M/0.85M/1.7M
    assert loaded.random_init and "random init" in loaded.label
    assert loaded.input_config.input_size == 32 and loaded.input_config.crop_pct == 1.0
    assert loaded.model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.slow
def test_random_init_is_the_same_network_every_time() -> None:
    torch.manual_seed(123)
    first = load_model("cifar:resnet20").model.conv1.weight
    torch.manual_seed(456)
    assert torch.equal(first, load_model("cifar:resnet20").model.conv1.weight)


def test_option_a_shortcut_subsamples_and_pads_channels() -> None:
    block = cifar_resnet("resnet20").layer2[0].shortcut
    x = torch.randn(1, 16, 8, 8)
    out = block(x)
    assert out.shape == (1, 32, 4, 4)
    assert torch.equal(out[:, 8:24], x[:, :, ::2, ::2])
    assert not out[:, :8].any() and not out[:, 24:].any()


@pytest.mark.slow
def test_real_resnet20_loads_strictly_and_classifies_cifar_like_photos(cifar_like_tree: Path) -> None:
    checkpoint = require_fixture(RESNET20_FILE)
    loaded = load_model(f"cifar:resnet20={checkpoint}")
    assert not loaded.weights_only and loaded.class_names == CIFAR10_CLASSES
    assert loaded.input_config.mean == IMAGENET_MEAN  # akamaster normalized CIFAR with ImageNet's statistics
    assert any("'module.'" in note for note in loaded.notes) and any("'linear.'" in note for note in loaded.notes)
    images = folder_images(cifar_like_tree)
    mapping = map_tree_classes(images.classes, loaded.num_classes, loaded.class_names)
    correct = 0
    with torch.no_grad():
        for x, y in iter_input_batches(images, loaded.input_config):
            correct += int((loaded.model(x).argmax(1) == torch.as_tensor(mapping.label_map)[y]).sum())
    assert len(images) == 42
    assert correct / len(images) > 0.6  # measured 0.79 (33 of 42); chance 0.1


def test_checkpoint_of_another_depth_names_the_right_spec(tmp_path: Path) -> None:
    path = save_akamaster(cifar_resnet("resnet20"), tmp_path / "r20.th")
    with pytest.raises(CheckpointError, match=r"cifar:resnet20=PATH"):
        load_model(f"cifar:resnet56={path}")


def test_not_a_cifar_resnet_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "vgg.pt"
    torch.save({"features.0.weight": torch.randn(8, 3, 3, 3)}, path)
    with pytest.raises(CheckpointError, match=r"not a CIFAR ResNet.*weights:PATH"):
        load_model(f"cifar:resnet20={path}")


@pytest.mark.parametrize("spec", ["cifar:resnet21", "cifar:vgg16", "cifar:resnet20@pretrained"])
def test_unknown_names_and_pretrained_are_refused(spec: str) -> None:
    with pytest.raises(ModelSpecError, match=r"cifar:|CIFAR ResNet"):
        load_model(spec)


@pytest.mark.slow
def test_option_b_layout_with_fc_head_and_cifar_statistics(tmp_path: Path) -> None:
    """chenyaofo/pytorch-cifar-models: 'fc' classifier, option-B shortcuts named 'downsample', CIFAR-100 head."""
    source = cifar_resnet("resnet32", num_classes=100, shortcut="B")
    tensors = {key.replace(".shortcut.", ".downsample."): value for key, value in source.state_dict().items()}
    torch.save(tensors, tmp_path / "cifar100_resnet32.pt")
    loaded = load_model(f"cifar:resnet32={tmp_path / 'cifar100_resnet32.pt'}")
    assert loaded.num_classes == 100 and loaded.class_names is None
    assert loaded.input_config.mean == (0.5071, 0.4865, 0.4409)
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(loaded.model(x), source.eval()(x))


def test_layout_reading_finds_depth_from_the_keys() -> None:
    layout = read_cifar_layout(cifar_resnet("resnet44").state_dict())
    assert layout is not None and layout.name == "resnet44" and layout.blocks == 7 and layout.shortcut == "A"
    assert read_cifar_layout({"conv1.weight": torch.zeros(64, 3, 7, 7), "fc.weight": torch.zeros(10, 512)}) is None


@pytest.mark.slow
def test_channels_command_runs_on_a_resnet56_checkpoint(tmp_path: Path) -> None:
    """The bar: ``channels`` on a ResNet-56 in akamaster's layout, as a full network, exits 0 with its defaults; and
    every Torch-Pruning criterion prunes through its zero-padding shortcuts (BatchNorm |γ| and Taylor are skipped, with
    their reasons: every γ of a fresh network is 1, and its loss on crops labelled by its own decisions is 0, so are
    the Taylor scores)."""
    torch.manual_seed(1)
    path = save_akamaster(cifar_resnet("resnet56"), tmp_path / "resnet56.th")
    command = [sys.executable, "-m", "fl_core", "channels", "--model", f"cifar:resnet56={path}", "--quiet"]
    every = ["local", "target", "l1", "l2", "bn_gamma", "fpgm", "taylor", "random"]
    runs = {name: (tmp_path / f"{name}.json", options) for name, options in (
        ("defaults", []),
        ("every criterion", ["--calibration", "32", "--evaluation", "16", "--fractions", "0.5", "--finetune-steps",
                             "1", "--criteria", *every]))}
    for out, options in runs.values():
        run = subprocess.run([*command, *options, "--json", str(out)], capture_output=True, text=True, timeout=900,
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert run.returncode == 0, run.stderr
        assert run.stderr.startswith("expected: about ")  # the estimate, before the run
    defaults = json.loads(runs["defaults"][0].read_text())
    default = default_channel_layer(conv_inventory(load_model(f"cifar:resnet56={path}")))  # the documented rule
    assert defaults["layer"] == default == "layer3.8.conv2" and len(defaults["channels"]) == 64
    assert (defaults["n_calibration"], defaults["n_evaluation"]) == (256, 64)
    assert set(defaults["pruning"]) == {"local", "target", "l1", "random"}
    result = json.loads(runs["every criterion"][0].read_text())
    assert set(result["pruning"]) == set(every) - {"bn_gamma", "taylor"}
    assert all(len(curve["accuracy"]) == 2 for curve in result["pruning"].values())  # intact, half the channels


def test_weights_only_cifar_file_is_pointed_to_its_cifar_spec(tmp_path: Path) -> None:
    path = save_akamaster(cifar_resnet("resnet32"), tmp_path / "r32.th")
    loaded = load_model(f"weights:{path}")
    assert "cifar:resnet32=PATH" in loaded.runnable_advice()
    with pytest.raises(ModelSpecError, match=r"weights-only.*cifar:resnet32=PATH"):
        loaded.copy_model()


def test_weights_only_advice_elsewhere_names_the_registries(tmp_path: Path) -> None:
    torch.save({"features.0.weight": torch.randn(8, 3, 3, 3)}, tmp_path / "vgg.pt")
    advice = load_model(f"weights:{tmp_path / 'vgg.pt'}").runnable_advice()
    assert "timm:NAME=PATH" in advice and "from_module" in advice and "cifar:resnet" in advice


@pytest.mark.slow
def test_report_on_the_real_resnet20_as_a_full_network(cifar_like_tree: Path) -> None:
    """Accuracy and channel axes run; master keys say plainly that a CIFAR ResNet has no depthwise filters."""
    from fl_core.report.build import build_report

    report = build_report(f"cifar:resnet20={require_fixture(RESNET20_FILE)}", data=str(cifar_like_tree))
    assert report.accuracy is not None and report.accuracy.top1 > 0.6
    assert report.channels is not None and "channels" not in report.skipped
    assert "no depthwise convolution" in report.skipped["masterkeys"]

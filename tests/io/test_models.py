"""Model specs: parsing, registry models, files with architectures, weights-only, demos, preprocessing."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest
import torch

from fl_core.errors import ArgumentError, CheckpointError, ModelSpecError, WeightsUnavailableError
from fl_core.io import registries
from fl_core.io.checkpoints import save_state_dict
from fl_core.io.demos import demo_manifest
from fl_core.io.models import load_model
from fl_core.io.preprocessing import InputConfig
from fl_core.io.specs import ModelSpec

from ..conftest import CHECKPOINTS


@pytest.mark.parametrize(("spec", "expected"), [
    ("timm:resnet18", ModelSpec("timm", "resnet18")),
    ("timm:resnet18@pretrained", ModelSpec("timm", "resnet18", pretrained=True)),
    ("torchvision:squeezenet1_0=/x/y.pt", ModelSpec("torchvision", "squeezenet1_0", path="/x/y.pt")),
    ("weights:/tmp/a b.safetensors", ModelSpec("weights", "a b.safetensors", path="/tmp/a b.safetensors")),
    ("demo:tiny_vgg", ModelSpec("demo", "tiny_vgg")),
])
def test_spec_parsing_round_trips(spec: str, expected: ModelSpec) -> None:
    parsed = ModelSpec.parse(spec)
    assert parsed == expected
    assert str(parsed) == spec


@pytest.mark.parametrize("spec", ["resnet18", "keras:resnet", "timm:", "timm:resnet18@latest", "timm:x="])
def test_bad_specs_explain_the_forms(spec: str) -> None:
    with pytest.raises(ModelSpecError):
        ModelSpec.parse(spec)


@pytest.mark.slow
def test_timm_random_init_is_labelled_and_has_its_own_preprocessing() -> None:
    loaded = load_model("timm:resnet18")
    assert loaded.random_init and "random init" in loaded.label
    cfg = loaded.input_config  # resnet18.a1_in1k at its test size (tests/masterkeys/test_rescore_preprocessing.py)
    assert (cfg.interpolation, cfg.input_size, cfg.crop_pct) == ("bicubic", 288, pytest.approx(1.0))
    assert not loaded.model.training and not any(p.requires_grad for p in loaded.model.parameters())


def test_torchvision_config_comes_from_the_weights_preset() -> None:
    cfg = load_model("torchvision:resnet18").input_config
    assert (cfg.input_size, cfg.resize_size, cfg.interpolation) == (224, 256, "bilinear")


def test_unknown_architecture_suggests_close_names() -> None:
    with pytest.raises(ModelSpecError, match="resnet"):
        load_model("timm:resnet_does_not_exist")


def test_pretrained_without_network_fails_fast_with_advice(monkeypatch) -> None:
    monkeypatch.setattr(registries, "_reachable", lambda *a, **k: False)
    start = time.perf_counter()
    with pytest.raises(WeightsUnavailableError, match=r"timm:resnet18=PATH"):
        load_model("timm:resnet18@pretrained")
    assert time.perf_counter() - start < 20


@pytest.mark.slow
def test_architecture_plus_file_infers_a_finetuned_head(tmp_path: Path) -> None:
    source = load_model("timm:resnet18").copy_model()
    source.reset_classifier(7)
    save_state_dict(source.state_dict(), tmp_path / "ft.safetensors")
    loaded = load_model(f"timm:resnet18={tmp_path / 'ft.safetensors'}")
    assert loaded.num_classes == 7 and not loaded.random_init
    assert torch.equal(loaded.state_dict["conv1.weight"], source.state_dict()["conv1.weight"])


@pytest.mark.slow
def test_wrong_architecture_is_refused_with_the_mismatch(tmp_path: Path) -> None:
    save_state_dict(load_model("timm:resnet18").state_dict, tmp_path / "r18.safetensors")
    with pytest.raises(CheckpointError, match="does not fit torchvision:squeezenet1_0"):
        load_model(f"torchvision:squeezenet1_0={tmp_path / 'r18.safetensors'}")


def test_weights_only_works_for_an_unknown_architecture(tmp_path: Path) -> None:
    state = {"stem.conv.weight": torch.randn(8, 3, 5, 5), "blocks.0.dw.weight": torch.randn(8, 1, 3, 3),
             "head.fc.weight": torch.randn(4, 8)}
    save_state_dict(state, tmp_path / "mystery.safetensors")
    loaded = load_model(f"weights:{tmp_path / 'mystery.safetensors'}", input_overrides={"input_size": 64})
    assert loaded.weights_only and loaded.model is None
    assert loaded.input_config.input_size == 64
    with pytest.raises(ModelSpecError, match="weights-only"):
        loaded.copy_model()


@pytest.mark.slow
def test_real_squeezenet_loads_with_standard_preprocessing(squeezenet) -> None:
    assert squeezenet.num_classes == 1000 and not squeezenet.random_init
    assert squeezenet.input_config.mean == pytest.approx((0.485, 0.456, 0.406))


def test_demo_manifest_records_how_each_checkpoint_was_made(demo) -> None:
    trained, init = demo
    entry = demo_manifest()["tiny_vgg"]
    assert entry.provenance["script"] == "scripts/make_demo_checkpoints.py"
    assert entry.provenance["val_accuracy"] > 0.5 > demo_manifest()["tiny_vgg_init"].provenance["val_accuracy"]
    assert trained.init_spec == "demo:tiny_vgg_init" and init.random_init and not trained.random_init
    assert trained.class_names and len(trained.class_names) == trained.num_classes == 11


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet1_0", "mobilenet_v2"])
def test_shipped_imagenet_demos_are_the_licensed_fixtures_with_their_preprocessing(name: str) -> None:
    entry = demo_manifest()[name]
    loaded = load_model(f"demo:{name}")
    assert loaded.num_classes == 1000 and len(loaded.class_names) == 1000 and not loaded.random_init
    assert loaded.init_spec == entry.arch == f"torchvision:{name}"  # the registry's random init as the baseline
    assert loaded.sha256 == entry.provenance["asset_sha256"]
    assert entry.provenance["licence"].split()[0] in {"BSD", "Apache-2.0"}
    expected_mean = (0.5, 0.5, 0.5) if name == "mobilenet_v2" else (0.485, 0.456, 0.406)
    assert loaded.input_config.mean == pytest.approx(expected_mean)
    fixture = CHECKPOINTS / entry.provenance["source_file"]
    if fixture.is_file():  # the shipped tensors are the fixture's, unchanged
        original = torch.load(fixture, map_location="cpu", weights_only=True)
        assert all(torch.equal(original[k].float(), v) for k, v in loaded.state_dict.items() if k in original)


def test_input_config_validation_and_overrides() -> None:
    with pytest.raises(ArgumentError, match="input_size must be at least 8 and at most 4,096, not 2"):
        InputConfig(input_size=2)
    with pytest.raises(ArgumentError, match=r"std must be at least 0\.0001"):
        InputConfig(std=(0.0, 1.0, 1.0))
    with pytest.raises(ArgumentError, match="mean takes 3 values, not 2"):
        InputConfig(mean=(0.5, 0.5))
    cfg = InputConfig().with_overrides(input_size=32, crop_pct=None, mean=[0.5, 0.5, 0.5])
    assert (cfg.input_size, cfg.crop_pct, cfg.mean) == (32, 0.875, (0.5, 0.5, 0.5))
    assert hash(cfg) == hash(InputConfig(input_size=32, mean=(0.5, 0.5, 0.5)))


CIFAR_OVERRIDES = {"input_size": 32, "crop_pct": 1.0, "interpolation": "bicubic", "mean": (0.4914, 0.4822, 0.4465),
                   "std": (0.247, 0.2435, 0.2616), "crop_mode": "squash"}


def test_override_text_round_trips_and_reads_urls_already_shared() -> None:
    text = InputConfig.overrides_to_text(CIFAR_OVERRIDES)
    assert text == "size=32;crop=1;interp=bicubic;mean=0.4914/0.4822/0.4465;std=0.247/0.2435/0.2616;mode=squash"
    assert InputConfig.overrides_from_text(text) == CIFAR_OVERRIDES
    shared = "size=32;crop=1;mean=0.49/0.48/0.45;std=0.25/0.24/0.26"  # a link written before the codec moved here
    assert InputConfig().with_overrides(**InputConfig.overrides_from_text(shared)) == InputConfig(
        input_size=32, crop_pct=1.0, mean=(0.49, 0.48, 0.45), std=(0.25, 0.24, 0.26))
    edited = "size=big;zoom=2;mean=0.5/0.5;crop=0.9;;std=1/1/1/1"  # unknown keys and malformed values are ignored
    assert InputConfig.overrides_from_text(edited) == {"crop_pct": 0.9}


def test_cli_and_form_overrides_become_one_hashable_key() -> None:
    from fl_core.cli import add_model_arguments, input_overrides

    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    args = parser.parse_args(["--model", "demo:tiny_vgg", "--input-size", "32", "--mean", "0.5", "0.5", "0.5"])
    key = input_overrides(args)
    assert key == (("input_size", 32), ("mean", (0.5, 0.5, 0.5))) and hash(key)
    assert key == InputConfig.overrides({"mean": [0.5, 0.5, 0.5], "input_size": 32, "std": None})
    form = {"input_size": 224, "crop_pct": 1.0, "interpolation": "bilinear", "mean": (0.5, 0.5, 0.5)}
    assert InputConfig().changed_fields(form) == {"crop_pct": 1.0, "mean": (0.5, 0.5, 0.5)}
    with pytest.raises(ModelSpecError, match="zoom"):
        InputConfig().with_overrides(zoom=2)


def test_fixture_cifar_weights_are_described(resnet20) -> None:
    info = resnet20.describe()
    assert info["parameters"] == 269_722  # the count stated in the fixture's README
    assert info["weights_only"] and (CHECKPOINTS / "resnet20_cifar10.th").name in info["spec"]


@pytest.mark.slow
def test_random_init_is_the_same_network_every_time_and_leaves_the_global_seed_alone() -> None:
    """A registry architecture without weights is built from a fixed seed: two loads (two users, two processes, a CLI
    rerun) give the same filters, and building it does not consume the caller's random stream."""
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    first = load_model("timm:resnet18").state_dict
    assert torch.equal(torch.rand(1), expected_next)
    second = load_model("timm:resnet18")
    assert second.state_dict is not first and all(torch.equal(first[k], v) for k, v in second.state_dict.items())
    assert not torch.equal(first["conv1.weight"], torch.zeros_like(first["conv1.weight"]))


@pytest.mark.slow
def test_each_model_says_where_its_preprocessing_came_from(tmp_path: Path) -> None:
    torch.save({"conv.weight": torch.randn(4, 3, 3, 3)}, tmp_path / "w.pt")
    sources = {"demo:tiny_vgg": "from the demo's manifest", "torchvision:squeezenet1_0": "torchvision's evaluation "
               "transform of squeezenet1_0's default weights", "cifar:resnet20": "32 px, no crop",
               f"weights:{tmp_path / 'w.pt'}": "FilterLens's default for files that do not record theirs"}
    for spec, words in sources.items():
        assert words in load_model(spec).preprocessing_text(), spec
    changed = load_model(f"weights:{tmp_path / 'w.pt'}", input_overrides={"mean": (0.5,) * 3, "std": (0.5,) * 3})
    assert changed.preprocessing_text().endswith("; mean, std set by you") and changed.user_file
    assert "mean 0.5 0.5 0.5" in changed.describe()["preprocessing"]
    assert not load_model("demo:tiny_vgg").user_file

"""Safe checkpoint loading: formats, unwrapping, refusal of hostile or broken files, mismatch explanations."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

from fl_core.errors import CheckpointError
from fl_core.io.checkpoints import load_into, load_state_dict, match_state_dict, save_state_dict

from ..conftest import CHECKPOINTS


def small_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))


def _state() -> dict[str, torch.Tensor]:
    return {"conv.weight": torch.randn(4, 3, 3, 3), "conv.bias": torch.randn(4)}


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".bin", ".th"])
def test_torch_formats_round_trip(tmp_path: Path, suffix: str) -> None:
    state = _state()
    path = tmp_path / f"w{suffix}"
    torch.save(state, path)
    loaded = load_state_dict(path)
    assert set(loaded.tensors) == set(state)
    assert torch.equal(loaded.tensors["conv.weight"], state["conv.weight"])
    assert len(loaded.sha256) == 64


def test_safetensors_round_trip(tmp_path: Path) -> None:
    state = _state()
    save_state_dict(state, tmp_path / "w.safetensors")
    loaded = load_state_dict(tmp_path / "w.safetensors")
    assert torch.equal(loaded.tensors["conv.bias"], state["conv.bias"])


@pytest.mark.parametrize("wrapper", ["state_dict", "model", "model_ema"])
def test_nested_containers_and_module_prefix_are_unwrapped(tmp_path: Path, wrapper: str) -> None:
    state = {f"module.{k}": v for k, v in _state().items()}
    torch.save({wrapper: state, "epoch": 12, "best_acc": 91.5}, tmp_path / "ckpt.pth")
    loaded = load_state_dict(tmp_path / "ckpt.pth")
    assert set(loaded.tensors) == {"conv.weight", "conv.bias"}
    assert any(wrapper in note for note in loaded.notes)
    assert any("module." in note for note in loaded.notes)


def test_prefer_ema_picks_the_ema_weights(tmp_path: Path) -> None:
    raw, ema = _state(), {k: v + 1 for k, v in _state().items()}
    torch.save({"model": raw, "model_ema": ema}, tmp_path / "both.pth")
    assert torch.equal(load_state_dict(tmp_path / "both.pth").tensors["conv.bias"], raw["conv.bias"])
    assert torch.equal(load_state_dict(tmp_path / "both.pth", prefer_ema=True).tensors["conv.bias"],
                       ema["conv.bias"])


class _Payload:
    """Unpickling this would write a sentinel file: the loader must refuse before that happens."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self):
        return (Path.write_text, (self.sentinel, "pwned"))


def test_hostile_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel.txt"
    path = tmp_path / "evil.pt"
    torch.save({"weight": torch.zeros(2, 3, 3, 3), "payload": _Payload(sentinel)}, path)
    with pytest.raises(CheckpointError, match="never does that"):
        load_state_dict(path)
    assert not sentinel.exists()
    raw = tmp_path / "evil_raw.pth"
    raw.write_bytes(pickle.dumps(_Payload(sentinel)))
    with pytest.raises(CheckpointError):
        load_state_dict(raw)
    assert not sentinel.exists()


def test_truncated_and_empty_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.pt"
    torch.save(_state(), path)
    data = path.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"damaged|truncated|corrupt"):
        load_state_dict(tmp_path / "cut.pt")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        load_state_dict(tmp_path / "empty.pt")
    save_state_dict(_state(), tmp_path / "w.safetensors")
    blob = (tmp_path / "w.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(blob[:-20])
    with pytest.raises(CheckpointError, match=r"truncated|corrupt"):
        load_state_dict(tmp_path / "cut.safetensors")


def test_size_cap_and_unknown_suffix(tmp_path: Path) -> None:
    torch.save(_state(), tmp_path / "w.pt")
    with pytest.raises(CheckpointError, match="limit"):
        load_state_dict(tmp_path / "w.pt", max_bytes=100)
    (tmp_path / "w.exe").write_bytes(b"MZ")
    with pytest.raises(CheckpointError, match="unsupported file type"):
        load_state_dict(tmp_path / "w.exe")


def test_nan_and_integer_weights_are_refused(tmp_path: Path) -> None:
    torch.save({"conv.weight": torch.full((2, 3, 3, 3), float("nan"))}, tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match="NaN"):
        load_state_dict(tmp_path / "nan.pt")
    torch.save({"conv.weight": torch.ones(2, 3, 3, 3, dtype=torch.int8)}, tmp_path / "int.pt")
    with pytest.raises(CheckpointError, match="quantized"):
        load_state_dict(tmp_path / "int.pt")


def test_model_object_instead_of_state_dict_is_explained(tmp_path: Path) -> None:
    torch.save([torch.zeros(1), torch.zeros(2)], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="not a state dict"):
        load_state_dict(tmp_path / "list.pt")


def test_mismatch_is_explained_in_plain_words() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 2, 1))
    state = {"0.weight": torch.zeros(4, 3, 5, 5), "0.bias": torch.zeros(4), "extra.weight": torch.zeros(1)}
    match = match_state_dict(model, state)
    assert match.missing == ("1.weight", "1.bias")
    assert match.unexpected == ("extra.weight",)
    assert match.shape_conflicts == (("0.weight", (4, 3, 5, 5), (4, 3, 3, 3)),)
    with pytest.raises(CheckpointError) as info:
        load_into(model, state, "timm:toy")
    message = str(info.value)
    assert "2 weight(s) the model needs are not in the file" in message
    assert "0.weight: file 4×3×5×5, model 4×3×3×3" in message
    assert "weights:PATH" in message


def test_real_legacy_cifar_checkpoint(resnet20) -> None:
    """akamaster's ResNet-20: legacy (non-zip) format, saved on a GPU, nested and wrapped in DataParallel."""
    raw = load_state_dict(CHECKPOINTS / "resnet20_cifar10.th")
    assert raw.sha256.startswith("12fca82f")
    assert len(raw.tensors) == 97 and "conv1.weight" in raw.tensors
    assert all(t.device.type == "cpu" for t in raw.tensors.values())

"""The ``onnx:PATH`` source: conv weights from initializers, Constant, Identity and DequantizeLinear nodes, groups from
the Conv nodes, bounded input; and the spec end to end through the CLI."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from fl_core.cli import main
from fl_core.errors import CheckpointError, ModelSpecError
from fl_core.io.layers import conv_inventory, first_conv_name
from fl_core.io.models import load_model
from fl_core.io.onnx_weights import read_onnx_convs
from fl_core.io.specs import ModelSpec
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_ui.testing import page_app, shown

from ..app_pages import app_pages
from ..conftest import REPO, TINY_MODELS

RNG = np.random.default_rng(0)
STEM = RNG.standard_normal((6, 3, 5, 5)).astype(np.float32)        # initializer, sees the image
DEPTHWISE = RNG.standard_normal((6, 1, 3, 3)).astype(np.float32)   # Constant node, group 6
GROUPED = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32)     # Identity -> initializer, group 2
QUANTIZED = np.arange(-24, 30, dtype=np.int8).reshape(6, 1, 3, 3)  # DequantizeLinear, per output channel
SCALE = np.array([0.5, 0.25, 1.0, 2.0, 0.125, 1.5], dtype=np.float32)
ZERO = np.array([0, 1, -2, 3, 0, -1], dtype=np.int8)
BIAS = np.arange(6, dtype=np.float32)


def conv(name: str, data: str, weight: str, out: str, *, group: int = 1, kernel: int = 3, bias: str | None = None):
    inputs = [data, weight] + ([bias] if bias else [])
    return helper.make_node("Conv", inputs, [out], name=name, group=group, kernel_shape=[kernel, kernel],
                            pads=[kernel // 2] * 4)


def tiny_graph() -> onnx.ModelProto:
    """x → stem (initializer + bias) → ReLU → depthwise (Constant) → grouped (Identity) → depthwise (dequantized)
    → a conv whose weight is a graph input (not stored, so not read)."""
    nodes = [
        conv("stem", "x", "stem.weight", "a", kernel=5, bias="stem.bias"),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Constant", [], ["dw_const"], value=numpy_helper.from_array(DEPTHWISE, "dw_const")),
        conv("dw", "b", "dw_const", "c", group=6),
        helper.make_node("Identity", ["grouped_init"], ["grouped_shared"]),
        conv("grouped", "c", "grouped_shared", "d", group=2),
        helper.make_node("DequantizeLinear", ["q.weight", "q.scale", "q.zero"], ["q_deq"], axis=0),
        conv("quant", "d", "q_deq", "e", group=6),
        conv("runtime", "e", "w_input", "y", kernel=1),
    ]
    inits = [numpy_helper.from_array(STEM, "stem.weight"), numpy_helper.from_array(BIAS, "stem.bias"),
             numpy_helper.from_array(GROUPED, "grouped_init"), numpy_helper.from_array(QUANTIZED, "q.weight"),
             numpy_helper.from_array(SCALE, "q.scale"), numpy_helper.from_array(ZERO, "q.zero")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16]),
                                              helper.make_tensor_value_info("w_input", TensorProto.FLOAT,
                                                                            [6, 6, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture()
def tiny_onnx(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_graph(), str(path))
    return path


def test_weights_come_from_initializers_constants_identity_and_dequantize(tiny_onnx: Path) -> None:
    read = read_onnx_convs(tiny_onnx)
    assert [lay.name for lay in read.layers] == ["stem", "dw_const", "grouped_shared", "q_deq"]
    assert torch.equal(read.tensors["stem.weight"], torch.from_numpy(STEM))
    assert torch.equal(read.tensors["stem.bias"], torch.from_numpy(BIAS))
    assert torch.equal(read.tensors["dw_const.weight"], torch.from_numpy(DEPTHWISE))
    assert torch.equal(read.tensors["grouped_shared.weight"], torch.from_numpy(GROUPED))
    # channel 1: q = -15 … -7, zero point 1, scale 0.25 → (-16 … -8) / 4 = -4 … -2
    assert read.tensors["q_deq.weight"][1].flatten().tolist() == [v / 4 for v in range(-16, -7)]
    expected = np.stack([(QUANTIZED[c].astype(float) - ZERO[c]) * SCALE[c] for c in range(6)])
    assert np.allclose(read.tensors["q_deq.weight"].numpy(), expected)
    assert any("runtime" in note and "graph input" in note for note in read.notes)


def test_groups_and_kinds_come_from_the_conv_nodes(tiny_onnx: Path) -> None:
    layers = {lay.name: lay for lay in read_onnx_convs(tiny_onnx).layers}
    assert layers["stem"].kind == "first" and layers["stem"].kernel_size == (5, 5)
    assert (layers["dw_const"].kind, layers["dw_const"].groups, layers["dw_const"].in_channels) == ("depthwise", 6, 6)
    # a weight of shape (6, 3, 3, 3) alone reads as a regular conv of 3 inputs; the node says group 2 of 6 inputs
    assert (layers["grouped_shared"].kind, layers["grouped_shared"].groups, layers["grouped_shared"].in_channels) == \
        ("grouped", 2, 6)
    assert layers["q_deq"].kind == "depthwise" and layers["stem"].padding == (2, 2)


def test_onnx_spec_loads_weights_only_with_the_declared_inventory(tiny_onnx: Path) -> None:
    spec = f"onnx:{tiny_onnx}"
    assert str(ModelSpec.parse(spec)) == spec
    loaded = load_model(spec)
    assert loaded.weights_only and first_conv_name(loaded) == "stem"
    assert [lay.groups for lay in conv_inventory(loaded)] == [1, 6, 2, 6]
    bank = depthwise_bank(loaded)
    assert [lay.name for lay in bank.layers] == ["dw_const", "q_deq"] and bank.kernel_sizes == {3: 12}
    with pytest.raises(ModelSpecError, match=r"cannot run ONNX graphs.*PyTorch weights with its architecture"):
        loaded.copy_model()


def test_oversize_garbage_and_misnamed_files_are_refused(tiny_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="limit"):
        read_onnx_convs(tiny_onnx, max_bytes=tiny_onnx.stat().st_size - 1)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="could not be read as an ONNX model"):
        read_onnx_convs(garbage)
    misnamed = tmp_path / "model.pt"
    misnamed.write_bytes(tiny_onnx.read_bytes())
    with pytest.raises(CheckpointError, match=r"reads \.onnx files"):
        read_onnx_convs(misnamed)


def test_a_dequantize_node_with_the_wrong_number_of_scales_is_refused(tmp_path: Path) -> None:
    model = tiny_graph()
    scale = next(t for t in model.graph.initializer if t.name == "q.scale")
    scale.CopyFrom(numpy_helper.from_array(SCALE[:5], "q.scale"))
    path = tmp_path / "bad_scale.onnx"
    onnx.save(model, str(path))
    with pytest.raises(CheckpointError, match="5 scales or zero points for axis 0"):
        read_onnx_convs(path)


def test_external_data_is_refused_without_opening_it(tmp_path: Path) -> None:
    model = tiny_graph()
    path = tmp_path / "external.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
              size_threshold=0)
    (tmp_path / "weights.bin").unlink()  # were it opened, the error would be a missing file
    with pytest.raises(CheckpointError, match="external data"):
        read_onnx_convs(path)


@pytest.mark.slow
def test_onnx_spec_end_to_end_through_the_cli(tiny_onnx: Path, tmp_path: Path) -> None:
    keys, energy = tmp_path / "masterkeys.json", tmp_path / "energy.json"
    assert main(["masterkeys", "--model", f"onnx:{tiny_onnx}", "--k", "2", "--restarts", "2", "--json", str(keys),
                 "--quiet"]) == 0
    payload = json.loads(keys.read_text())
    assert payload["n_filters"] == 12 and sum(payload["published_assignment"]["counts"]) == 12
    assert main(["energy", "--model", f"onnx:{tiny_onnx}", "--seeds", "2", "--json", str(energy), "--quiet"]) == 0
    model = json.loads(energy.read_text())["models"][0]
    assert model["layer"] == "stem" and len(model["profile"]) == 3 * 5 * 5


def _upload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str = ""):
    """The default page with the tiny ONNX model uploaded through the sidebar's real flow."""
    uploads, model = tmp_path / "uploads", tmp_path / "mine.onnx"
    onnx.save(tiny_graph(), str(model))
    monkeypatch.setenv("FL_UPLOAD_DIR", str(uploads))
    monkeypatch.chdir(REPO)
    app = page_app(app_pages()[0].path, models=TINY_MODELS).run()
    app.file_uploader(key="ckpt_upload").set_value((model.name, model.read_bytes(), "application/octet-stream"))
    app.text_input(key="ckpt_arch").set_value(arch)
    app.button(key="ckpt_add").click().run()
    return app, uploads


@pytest.mark.slow
def test_an_onnx_upload_becomes_an_onnx_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app, uploads = _upload(tmp_path, monkeypatch)
    assert not app.exception and not app.sidebar.error, [shown(e) for e in app.sidebar.error]
    [path] = uploads.glob("*/*")
    assert path.name == "mine.onnx" and app.session_state["selection"].specs[-1] == f"onnx:{path}"


@pytest.mark.slow
def test_an_onnx_upload_with_an_architecture_is_refused_and_removed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    app, uploads = _upload(tmp_path, monkeypatch, arch="timm:resnet18")
    assert [shown(e) for e in app.sidebar.error if "mine.onnx is an ONNX model" in shown(e)]
    assert list(uploads.iterdir()) == []


@pytest.mark.slow
def test_a_damaged_onnx_upload_gets_one_clear_error_and_is_removed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    uploads = tmp_path / "uploads"
    monkeypatch.setenv("FL_UPLOAD_DIR", str(uploads))
    monkeypatch.chdir(REPO)
    app = page_app(app_pages()[0].path, models=TINY_MODELS).run()
    app.file_uploader(key="ckpt_upload").set_value(("broken.onnx", b"\x08\x07" + b"\xff" * 200, "application/x"))
    app.button(key="ckpt_add").click().run()
    assert [shown(e) for e in app.sidebar.error] == [
        "broken.onnx could not be read as an ONNX model: the file is damaged, truncated or not ONNX (DecodeError). "
        "Export it again."]
    assert list(uploads.iterdir()) == []


def test_a_torch_export_reads_back_as_its_batchnorm_folded_weights(tmp_path: Path) -> None:
    """torch's exporter folds eval-mode BatchNorm into the convs: W' = W · γ / √(σ² + ε) per output channel."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                              torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 5, padding=2, groups=8, bias=False),
                              torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).eval()
    for bn in (net[1], net[4]):
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 2.0)
    path = tmp_path / "exported.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(net, (torch.zeros(1, 3, 16, 16),), str(path), dynamo=False)
    read = read_onnx_convs(path)
    assert [lay.kind for lay in read.layers] == ["first", "depthwise", "pointwise"]
    depthwise = read.layers[1]
    assert (depthwise.groups, depthwise.kernel_size, depthwise.padding) == (8, (5, 5), (2, 2))
    bn = net[4]
    folded = net[3].weight * (bn.weight / torch.sqrt(bn.running_var + bn.eps))[:, None, None, None]
    assert torch.allclose(read.tensors[depthwise.weight_key], folded.detach(), atol=1e-6)

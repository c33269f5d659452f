"""Hostile and malformed checkpoint uploads.

A corpus built here: pickles whose loading would run code (``__reduce__`` payloads that write a sentinel file),
truncated and empty files, wrong extensions, non-tensor objects, integer and NaN/inf tensors, absurd shapes,
safetensors with corrupt headers, zip archives with bad members, oversized files, and files small on disk but costly
to open (built by ``tests/test_bounded_inputs.py``). Every one must be refused
with a clear :class:`~fl_core.errors.CheckpointError` naming the file, the sentinel must never appear, and the app
must keep serving after each refused upload (checked through the sidebar's real upload flow in AppTest).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import shlex
import struct
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save as safetensors_bytes
from streamlit.testing.v1 import AppTest
from torch import nn

from fl_core.errors import CheckpointError, DataError
from fl_core.io.checkpoints import CHECKPOINT_SUFFIXES, load_state_dict
from fl_core.io.images import MAX_IMAGE_PIXELS, save_uploaded_images
from fl_ui.testing import page_app, shown

from . import test_bounded_inputs as bounded
from .app_pages import app_pages
from .conftest import CHECKPOINTS, REPO, require_fixture

CAP_MB = 2
"""The size cap used throughout (``FL_MAX_CHECKPOINT_MB`` / ``max_bytes``): above the 1.1 MB demo checkpoints."""


class Payload:
    """Unpickling this calls ``func(*args)``: the code a hostile checkpoint would run."""

    def __init__(self, func: Callable, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


def _writer(kind: str, sentinel: Path) -> Payload:
    """A payload that writes ``sentinel`` through ``exec``, ``eval``, ``os.system`` or ``Path.write_text``."""
    code = f"open({str(sentinel)!r}, 'w').write('pwned')"
    return {"exec": Payload(exec, code), "eval": Payload(eval, code),
            "system": Payload(os.system, f"echo pwned > {shlex.quote(str(sentinel))}"),
            "write_text": Payload(Path.write_text, sentinel, "pwned")}[kind]


def _weights() -> dict[str, torch.Tensor]:
    """A small, valid conv state dict (what the hostile files hide behind)."""
    return {"conv.weight": torch.randn(4, 3, 3, 3), "conv.bias": torch.randn(4)}


def _torch_bytes(obj: object, legacy: bool = False) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer, _use_new_zipfile_serialization=not legacy)
    return buffer.getvalue()


def _safetensors_raw(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


def _rezip(source: bytes, *, drop: str | None = None, extra: dict[str, bytes] | None = None,
           compression: int = zipfile.ZIP_STORED) -> bytes:
    """A copy of a zip checkpoint without the member ending in ``drop`` and with ``extra`` members added."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(source)) as src, zipfile.ZipFile(out, "w", compression=compression) as dst:
        for info in src.infolist():
            if drop is None or not info.filename.endswith(drop):
                dst.writestr(info.filename, src.read(info))
        for name, payload in (extra or {}).items():
            dst.writestr(name, payload)
    return out.getvalue()


def _corrupt_member(source: bytes, member: str) -> bytes:
    """Flip one byte inside a stored member's data, so its CRC no longer matches."""
    with zipfile.ZipFile(io.BytesIO(source)) as archive:
        info = archive.getinfo(next(n for n in archive.namelist() if n.endswith(member)))
    header = source[info.header_offset: info.header_offset + 30]
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    data = bytearray(source)
    data[start] ^= 0xFF
    return bytes(data)


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


@dataclass(frozen=True)
class Hostile:
    """One corpus entry: the uploaded name, what is wrong with it, how to build it, what the refusal must say."""

    name: str
    category: str
    build: Callable[[Path], bytes]
    refusal: str
    runs_code: bool = False


def _payload_entry(name: str, kind: str, wrap: Callable[[Payload], object], legacy: bool = False) -> Hostile:
    return Hostile(name, "code execution", lambda s: _torch_bytes(wrap(_writer(kind, s)), legacy=legacy),
                   "never does that", runs_code=True)


CORPUS: tuple[Hostile, ...] = (
    # pickles whose loading would run code
    _payload_entry("exec_beside_weights.pt", "exec", lambda p: {**_weights(), "hook": p}),
    _payload_entry("eval_in_nested_state_dict.pth", "eval", lambda p: {"state_dict": {**_weights(), "x": p}}),
    _payload_entry("os_system_legacy_format.th", "system", lambda p: {"model": p}, legacy=True),
    _payload_entry("write_text_top_level.bin", "write_text", lambda p: p),
    _payload_entry("numpy_object_array.pt", "exec", lambda p: {**_weights(), "arr": np.array([p], dtype=object)}),
    Hostile("raw_pickle_protocol2.pt", "code execution", lambda s: pickle.dumps(_writer("exec", s), protocol=2),
            "never does that|could not be read", runs_code=True),
    Hostile("raw_pickle_protocol5.pth", "code execution",
            lambda s: pickle.dumps({"w": _writer("system", s)}, protocol=5), "never does that|could not be read",
            runs_code=True),
    Hostile("pickle_disguised.safetensors", "code execution", lambda s: pickle.dumps(_writer("exec", s)),
            "not a valid safetensors", runs_code=True),
    Hostile("whole_module_object.pt", "non-tensor objects", lambda s: _torch_bytes(nn.Conv2d(3, 4, 3)),
            "never does that"),
    # truncated and empty files
    Hostile("truncated_zip.pt", "truncated", lambda s: _half(_torch_bytes(_weights())), "damaged, truncated"),
    Hostile("truncated_legacy.th", "truncated", lambda s: _half(_torch_bytes(_weights(), legacy=True)),
            "damaged, truncated"),
    Hostile("truncated.safetensors", "truncated", lambda s: _half(safetensors_bytes(_weights())),
            "truncated or corrupt|corrupt safetensors"),
    Hostile("empty.pt", "empty", lambda s: b"", "is empty"),
    Hostile("empty.safetensors", "empty", lambda s: b"", "is empty"),
    # wrong extensions and wrong content
    Hostile("weights.pkl", "wrong extension", lambda s: _torch_bytes(_weights()), "unsupported file type"),
    Hostile("weights.zip", "wrong extension", lambda s: _torch_bytes(_weights()), "unsupported file type"),
    Hostile("weights.npy", "wrong extension", lambda s: _torch_bytes(_weights()), "unsupported file type"),
    Hostile("photo_renamed.pt", "wrong content", lambda s: b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,
            "damaged, truncated or not a checkpoint"),
    Hostile("notes_renamed.pth", "wrong content", lambda s: b"epoch 12, best accuracy 91.5%\n" * 20,
            "damaged, truncated or not a checkpoint"),
    # containers without usable tensors
    Hostile("list_of_tensors.pt", "non-tensor objects", lambda s: _torch_bytes(list(_weights().values())),
            "holds a list, not a state dict"),
    Hostile("only_numbers.pt", "non-tensor objects", lambda s: _torch_bytes({"epoch": 12, "best_acc1": 91.5}),
            "contains no tensors"),
    Hostile("a_string.pth", "non-tensor objects", lambda s: _torch_bytes("model.state_dict()"),
            "holds a str, not a state dict"),
    # integer, quantized, float8, NaN and inf tensors
    Hostile("int8_weights.pt", "bad values", lambda s: _torch_bytes({"conv.weight": torch.ones(4, 3, 3, 3,
                                                                                                dtype=torch.int8)}),
            "quantized"),
    Hostile("quantized_tensor.pt", "bad values",
            lambda s: _torch_bytes({"conv.weight": torch.quantize_per_tensor(torch.rand(4, 3, 3, 3), 0.1, 0,
                                                                              torch.qint8)}), "quantized"),
    Hostile("float8_weights.pt", "bad values",
            lambda s: _torch_bytes({"conv.weight": torch.rand(4, 3, 3, 3).to(torch.float8_e4m3fn)}), "float32 first"),
    Hostile("nan_weights.pt", "bad values",
            lambda s: _torch_bytes({**_weights(), "conv.weight": torch.full((4, 3, 3, 3), float("nan"))}),
            "NaN or infinite"),
    Hostile("inf_weights.safetensors", "bad values",
            lambda s: safetensors_bytes({**_weights(), "conv.bias": torch.tensor([1.0, float("inf"), 0, 0])}),
            "NaN or infinite"),
    Hostile("complex_weights.pt", "bad values",
            lambda s: _torch_bytes({"conv.weight": torch.randn(4, 3, 3, 3, dtype=torch.complex64)}), "complex"),
    # absurd shapes and storage
    Hostile("nine_dims.pt", "absurd shape", lambda s: _torch_bytes({"w": torch.zeros([1] * 9)}), "unusable shape"),
    Hostile("zero_size.pt", "absurd shape", lambda s: _torch_bytes({"conv.weight": torch.zeros(0, 3, 3, 3)}),
            "unusable shape"),
    Hostile("broadcast_view_1_6e9.pt", "absurd shape",
            lambda s: _torch_bytes({"conv.weight": torch.zeros(1).expand(40_000, 40_000)}), "broadcast view"),
    Hostile("sparse.pt", "absurd shape", lambda s: _torch_bytes({"conv.weight": torch.eye(8).to_sparse()}),
            "not a dense tensor"),
    Hostile("meta_device.pt", "absurd shape",
            lambda s: _torch_bytes({"conv.weight": torch.empty(64, 3, 7, 7, device="meta")}), "holds no values"),
    # safetensors with corrupt headers
    Hostile("header_longer_than_file.safetensors", "corrupt safetensors header",
            lambda s: struct.pack("<Q", 2**40) + b"{}", "truncated or corrupt"),
    Hostile("header_not_json.safetensors", "corrupt safetensors header",
            lambda s: _safetensors_raw(b"{this is not json}", b"\0" * 16), "corrupt safetensors"),
    Hostile("header_offsets_past_end.safetensors", "corrupt safetensors header",
            lambda s: _safetensors_raw(json.dumps({"w": {"dtype": "F32", "shape": [1000, 1000],
                                                         "data_offsets": [0, 4_000_000]}}).encode(), b"\0" * 64),
            "corrupt safetensors"),
    Hostile("header_unknown_dtype.safetensors", "corrupt safetensors header",
            lambda s: _safetensors_raw(json.dumps({"w": {"dtype": "X99", "shape": [4],
                                                         "data_offsets": [0, 16]}}).encode(), b"\0" * 16),
            "corrupt safetensors"),
    # zip archives with bad members
    Hostile("zip_without_data_pkl.pt", "bad zip member",
            lambda s: _rezip(_torch_bytes(_weights()), drop="data.pkl", extra={"readme.txt": b"hi"}),
            "not a PyTorch checkpoint"),
    Hostile("zip_path_traversal.pth", "bad zip member",
            lambda s: _rezip(_torch_bytes(_weights()), extra={"../../etc/cron.d/evil": b"* * * * * root id"}),
            "outside the archive"),
    Hostile("zip_absolute_member.pt", "bad zip member",
            lambda s: _rezip(_torch_bytes(_weights()), extra={"/tmp/evil": b"x"}), "outside the archive"),
    Hostile("zip_corrupt_member_crc.pt", "bad zip member",
            lambda s: _corrupt_member(_torch_bytes(_weights()), "data/0"), "is corrupt"),
    Hostile("zip_missing_storage.pt", "bad zip member", lambda s: _rezip(_torch_bytes(_weights()), drop="data/0"),
            "damaged, truncated"),
    Hostile("zip_bomb.pt", "bad zip member",
            lambda s: _rezip(_torch_bytes(_weights()), extra={"archive/data/99": b"\0" * (5 * CAP_MB * 2**20)},
                             compression=zipfile.ZIP_DEFLATED), "unpacks to"),
    # oversized
    Hostile("oversized.pt", "oversized", lambda s: _torch_bytes({"conv.weight": torch.randn(CAP_MB * 2**18 + 1)}),
            "over the 2 MiB limit"),
    # small on disk, costly to open (tests/test_bounded_inputs.py measures their refusal)
    Hostile("zip_deflated_zeros_1_5GB.pt", "costly to open",
            lambda s: bounded.deflated_zeros_checkpoint(1_500_000_000), "is compressed"),
    Hostile("zip_overlapping_records.pt", "costly to open", lambda s: bounded.overlapping_records_checkpoint(),
            "records claim"),
    Hostile("zip_claims_a_million_records.pt", "costly to open", lambda s: bounded.million_records_checkpoint(),
            "1,000,000 archive records"),
    Hostile("zip_directory_lies.pt", "costly to open", lambda s: bounded.lying_directory_checkpoint(10_000),
            "central directory does not match"),
    Hostile("too_many_tensors.safetensors", "costly to open", lambda s: bounded.many_entries_safetensors(),
            "tensor entries, over the limit"),
    Hostile("views_claim_16x.pt", "costly to open", lambda s: bounded.many_views_checkpoint(),
            "claim 16 MiB of values"),
    Hostile("float64_beyond_float32.pt", "bad values",
            lambda s: bounded.torch_file(bounded.conv_state(torch.full((8, 3, 3, 3), 1e308, dtype=torch.float64))),
            "beyond float32's range"),
    Hostile("nested_17_deep.pth", "non-tensor objects",
            lambda s: bounded.torch_file(bounded.nested(bounded.conv_state(), 17)), "more than 16 levels deep"),
)
CATEGORIES = ("code execution", "truncated", "empty", "wrong extension", "wrong content", "non-tensor objects",
              "bad values", "absurd shape", "corrupt safetensors header", "bad zip member", "oversized",
              "costly to open")


@pytest.fixture
def sentinel(tmp_path: Path) -> Path:
    return tmp_path / "SENTINEL-code-ran"


def _write(entry: Hostile, folder: Path, sentinel: Path) -> Path:
    path = folder / entry.name
    path.write_bytes(entry.build(sentinel))
    return path


def _assert_clear_refusal(message: str, entry: Hostile) -> None:
    """Names the file, says what is wrong (the expected reason) and carries no traceback."""
    assert entry.name.split(".")[0] in message, message
    assert re.search(entry.refusal, message, flags=re.IGNORECASE), (entry.refusal, message)
    assert "Traceback" not in message and 'File "' not in message and len(message) < 600, message


def test_corpus_covers_every_kind_of_hostile_upload() -> None:
    assert {e.category for e in CORPUS} == set(CATEGORIES)
    assert len({e.name for e in CORPUS}) == len(CORPUS) >= 40
    print(f"\nhostile corpus: {len(CORPUS)} files")
    for entry in CORPUS:
        print(f"  {entry.category:28s} {entry.name}")


@pytest.mark.parametrize("entry", [e for e in CORPUS if e.runs_code], ids=lambda e: e.name)
def test_payloads_are_live_when_loaded_unsafely(entry: Hostile, tmp_path: Path) -> None:
    """Control: full unpickling of these files really runs the payload, so refusing them matters."""
    control = tmp_path / "control-sentinel"
    data = entry.build(control)
    with contextlib.suppress(Exception):  # the legacy reader runs the payload before it notices a bad header
        torch.load(io.BytesIO(data), weights_only=False)
    assert control.read_text().strip() == "pwned"


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e.name)
def test_every_hostile_file_is_refused_and_nothing_runs(entry: Hostile, tmp_path: Path, sentinel: Path) -> None:
    path = _write(entry, tmp_path, sentinel)
    with pytest.raises(CheckpointError) as refused:
        load_state_dict(path, max_bytes=CAP_MB * 2**20)
    _assert_clear_refusal(str(refused.value), entry)
    assert not sentinel.exists()


def test_good_files_still_load_under_the_same_rules(tmp_path: Path) -> None:
    """The hardening keeps real checkpoints working: every format, views of shared storage, float16."""
    base = torch.randn(8, 3, 3, 3)
    state = {"conv.weight": base, "tied.weight": base[:4], "half.weight": base.half(), "bn.num_batches_tracked":
             torch.tensor(7), "position_ids": torch.arange(5).expand(1, -1)}
    for name, data in (("ok.pt", _torch_bytes(state)), ("ok_legacy.th", _torch_bytes(state, legacy=True)),
                       ("ok.safetensors", safetensors_bytes({k: v.clone() for k, v in state.items()}))):
        (tmp_path / name).write_bytes(data)
        loaded = load_state_dict(tmp_path / name, max_bytes=CAP_MB * 2**20)
        assert torch.equal(loaded.tensors["tied.weight"], base[:4])
    real = CHECKPOINTS / "resnet20_cifar10.th"
    if real.exists():
        assert len(load_state_dict(real).tensors) == 97


def _open_app() -> AppTest:
    """A new browser session: the default page behind the real sidebar, with the demo model."""
    app = page_app(app_pages()[0].path, models="demo:tiny_vgg").run()
    assert not app.exception and app.file_uploader(key="ckpt_upload")
    return app


def _upload(app: AppTest, name: str, data: bytes) -> None:
    """Choose a file in the sidebar's "Upload a checkpoint" form and press "Add upload"."""
    app.file_uploader(key="ckpt_upload").set_value((name, data, "application/octet-stream"))
    app.button(key="ckpt_add").click().run()


def _refusal_problems(app: AppTest, entry: Hostile, uploads: Path, selection: list[str], plots: int) -> list[str]:
    """What is wrong with how the app handled a refused upload (empty when it shows one clear error and goes on)."""
    errors = [shown(e) for e in app.sidebar.error]
    if app.exception or len(errors) != 1:
        return [f"{entry.name}: exception {[e.value for e in app.exception]}, errors {errors}"]
    problems = []
    try:
        _assert_clear_refusal(errors[0], entry)
    except AssertionError as err:
        problems.append(f"{entry.name}: unclear message: {err}")
    if list(app.session_state["model_picker"]) != selection:
        problems.append(f"{entry.name}: the selection changed to {app.session_state['model_picker']}")
    if len(app.get("plotly_chart")) != plots:
        problems.append(f"{entry.name}: the page shows {len(app.get('plotly_chart'))} plots, not {plots}")
    return problems


@pytest.mark.slow
def test_app_refuses_each_upload_keeps_the_selection_and_keeps_serving(tmp_path: Path, sentinel: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every corpus file through the sidebar's real upload flow: one clear error, nothing stored, nothing run,
    the selection and the page's plots unchanged. Wrong extensions are stopped earlier by Streamlit's own
    extension check (the browser's file chooser offers only checkpoint types); a new session then serves normally."""
    uploads = tmp_path / "uploads"
    monkeypatch.setenv("FL_UPLOAD_DIR", str(uploads))
    monkeypatch.setenv("FL_MAX_CHECKPOINT_MB", str(CAP_MB))
    monkeypatch.chdir(REPO)  # Streamlit reads .streamlit/config.toml from the working directory
    app = _open_app()
    selection, plots = list(app.session_state["model_picker"]), len(app.get("plotly_chart"))
    assert plots >= 1
    problems = []
    for entry in CORPUS:
        _upload(app, entry.name, entry.build(sentinel))
        if Path(entry.name).suffix in CHECKPOINT_SUFFIXES:
            problems += _refusal_problems(app, entry, uploads, selection, plots)
        else:  # Streamlit's extension check fails the run; the message is redacted (client.showErrorDetails)
            if len(app.exception) != 1 or "redacted" not in app.exception[0].message:
                problems.append(f"{entry.name}: Streamlit did not stop the wrong extension with a redacted error")
            app = _open_app()
        if list(uploads.iterdir()):
            problems.append(f"{entry.name}: the refused file was kept: {[p.name for p in uploads.iterdir()]}")
        if sentinel.exists():
            problems.append(f"{entry.name}: THE PAYLOAD RAN")
    assert not problems, "\n".join(problems)
    real = CHECKPOINTS / "resnet20_cifar10.th"
    if real.exists():  # after all that, a real checkpoint is still accepted and selected
        _upload(app, real.name, real.read_bytes())
        assert not app.exception and not app.sidebar.error
        assert len(app.session_state["model_picker"]) == len(selection) + 1
        assert [p.name for p in uploads.glob("*/*")] == [real.name]  # kept under its own name


def _png_bomb(side: int) -> bytes:
    """A valid greyscale PNG of side × side black pixels: kilobytes on disk, side² bytes once decoded."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = zlib.compress(b"\0" * ((side + 1) * side), 9)
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def _png(side: int = 16) -> bytes:
    buffer = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (side, side), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


HOSTILE_IMAGES = {
    "decompression_bomb.png": (lambda: _png_bomb(9_000), "pixel limit"),  # 81 Mpx: PIL alone would only warn
    "text_renamed.jpg": (lambda: b"not an image at all\n" * 50, "not a readable image"),
    "truncated.png": (lambda: _png(64)[:60], "not a readable image"),
    "empty.png": (lambda: b"", "not a readable image"),
    "strip_1x65535.png": (lambda: bounded.black_png(1, 65_535), "more elongated than 16:1"),  # 12.7 GB once scaled
    "bomb_beyond_pillow.png": (lambda: bounded.black_png(12_000, 12_000), "pixel limit"),  # PIL's own error before
}


@pytest.mark.parametrize("name", HOSTILE_IMAGES)
def test_hostile_image_uploads_are_refused_before_decoding(name: str, tmp_path: Path) -> None:
    build, refusal = HOSTILE_IMAGES[name]
    data = build()
    assert len(data) < 200_000
    with pytest.raises(DataError, match=refusal) as refused:
        save_uploaded_images([("ok.png", _png()), (name, data)], tmp_path / "images")
    assert name in str(refused.value)


def test_the_bomb_is_in_the_range_pil_alone_would_decode() -> None:
    """PIL raises only above twice its limit (it merely warns below): FilterLens refuses the whole range."""
    assert MAX_IMAGE_PIXELS < 9_000**2 < 2 * MAX_IMAGE_PIXELS


@pytest.mark.slow
def test_app_refuses_a_bad_image_upload_and_keeps_the_image_source(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.chdir(REPO)
    app = _open_app()
    app.radio(key="img_choice").set_value("upload images").run()
    for name, (build, refusal) in HOSTILE_IMAGES.items():
        app.file_uploader(key="img_upload").set_value([(name, build(), "image/png")]).run()
        assert not app.exception
        assert [re.search(refusal, shown(e)) is not None for e in app.sidebar.error] == [True], name
        assert app.session_state["selection"].images == "bundled"
    app.file_uploader(key="img_upload").set_value([("red.png", _png(), "image/png")]).run()
    assert not app.exception and not app.sidebar.error
    assert Path(app.session_state["selection"].images).name.startswith("images-")
    assert [shown(e) for e in app.main.error] == [  # a flat image is accepted, and the page says why it shows nothing
        "The patches do not vary (the images are flat colour): pick images with texture."]


def test_a_shared_server_refuses_paths_outside_its_data_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """Hostile links and typed paths: with ``FL_DATA_ROOTS`` set, server files outside it, and the upload folder's
    listing (other users' uploads), are refused; the shared data folder still works."""
    real = require_fixture(CHECKPOINTS / "resnet20_cifar10.th")
    shared, uploads = tmp_path / "imagenet", tmp_path / "uploads"
    (shared / "n01440764").mkdir(parents=True)
    (shared / "n01440764" / "fish.png").write_bytes(_png(40))
    (uploads / "images-0123").mkdir(parents=True)
    (uploads / "images-0123" / "someone_elses_photo.png").write_bytes(_png(40))
    monkeypatch.setenv("FL_UPLOAD_DIR", str(uploads))
    monkeypatch.setenv("FL_DATA_ROOTS", str(shared))
    monkeypatch.chdir(REPO)
    app = page_app(app_pages()[0].path, models=f"demo:tiny_vgg,weights:{real}", images=str(uploads)).run()
    errors = [shown(e) for e in app.sidebar.error]
    assert not app.exception and len(errors) == 2 and all("outside the folders this server shares" in e
                                                          for e in errors), errors
    assert app.session_state["selection"].specs == ("demo:tiny_vgg",)
    assert app.session_state["selection"].images == "bundled" and "weights:" not in app.query_params["models"]

    app.text_input(key="reg_name").input(f"resnet18={real}")
    app.button(key="reg_add").click().run()
    assert any("outside the folders" in shown(e) for e in app.sidebar.error)
    assert app.session_state["selection"].specs == ("demo:tiny_vgg",)

    app.radio(key="img_choice").set_value("folder on the server").run()
    app.text_input(key="img_folder").input("/etc").run()
    assert any("/etc is outside" in shown(e) for e in app.sidebar.error)
    app.text_input(key="img_folder").input(str(shared)).run()
    assert not app.exception and app.session_state["selection"].images == str(shared)


# ------------------------------------------------------------------------------- one user cannot hold the server


class _Rerun(Exception):
    """What Streamlit raises in a waiting session's thread at its next progress update when its user clicks."""


def test_a_shared_computation_shows_who_waits_and_a_waiter_can_leave() -> None:
    """Sessions waiting for another session's computation see whose it is, for how long and how many wait, and how
    to stop waiting; the computing session sees how many wait for it; a waiter that leaves (a rerun at its next
    progress update) is no longer counted, and the others still get the value."""
    import threading

    from fl_core.compute.progress import report
    from fl_ui.memo import memoize

    gate, started = threading.Event(), threading.Event()

    @memoize(max_entries=2)
    def energy_profile_of(x: int, progress=None) -> int:
        started.set()
        while not gate.wait(0.05):
            report(progress, 0.5, "patch statistics")
        return x * 2

    owner_said, waiter_said, results = [], [[], []], {}

    def owner() -> None:
        results["owner"] = energy_profile_of(4, progress=lambda f, m: owner_said.append(m))

    def waiter(index: int, leave: bool) -> None:
        def progress(fraction: float, message: str) -> None:
            waiter_said[index].append(message)
            if leave and len(waiter_said[index]) > 3:
                raise _Rerun

        try:
            results[index] = energy_profile_of(4, progress=progress)
        except _Rerun:
            results[index] = "left"

    threads = [threading.Thread(target=owner)]
    threads[0].start()
    started.wait(5)
    threads += [threading.Thread(target=waiter, args=(i, i == 1)) for i in range(2)]
    for thread in threads[1:]:
        thread.start()
    threads[2].join(10)  # the second waiter has left
    time.sleep(0.6)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert results == {"owner": 8, 0: 8, 1: "left"}
    assert any("another session's energy profile of (patch statistics; running" in m and "2 sessions waiting" in m
               and "press any button to stop waiting" in m for m in waiter_said[0])
    assert any(m.endswith("(2 other sessions waiting)") for m in owner_said)
    assert owner_said[-1].endswith("(1 other session waiting)")  # the one that left is no longer counted


@pytest.mark.slow
def test_costly_uploads_get_the_budget_refusal_on_the_pages_and_wide_layers_still_draw(tmp_path: Path) -> None:
    """A 101×101 first kernel on Energy Profiles and Whitening: the budget's one-line refusal (no exception box, no
    generic error); a 12,000-filter first layer on Whitening: its 16 activation maps are drawn (only those are
    computed) beside the curves."""
    kernel_101, wide = tmp_path / "kernel_101.safetensors", tmp_path / "wide.safetensors"
    kernel_101.write_bytes(bounded.conv_file(8, 101))
    wide.write_bytes(bounded.conv_file(12_000, 3))
    for page in ("views/energy_profiles.py", "views/whitening.py"):
        app = page_app(page, models=f"weights:{kernel_101}").run()
        errors = [shown(e) for e in app.error]
        assert not app.exception and len(errors) == 1, (page, errors)
        assert "refused before computing" in errors[0] and "Pick a layer with a smaller kernel" in errors[0]
    app = page_app("views/whitening.py", models=f"weights:{wide}").run()
    assert not app.exception and not app.error, [shown(e) for e in app.error]
    assert len(app.get("plotly_chart")) >= 2

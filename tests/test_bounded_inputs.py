"""Every input is bounded before it costs.

Hostile images and checkpoints that are small on disk but would cost gigabytes or minutes to open (a 1×65,535 PNG,
a zip record of deflated zeros claiming 3.5 GB, a header claiming more tensors than any model has, ...) are built
here, in a temporary folder, and must be refused from their headers with one line that says what to do, within
seconds and a few hundred MB: through the library and through the CLI (exit status 2, one line on stderr), measured
in a subprocess. Degenerate weights (all zero, beyond float32's range, nested too deep) get clear errors instead of
NaN, and legitimate inputs near the bounds still work. ``bench/bench_refusals.py`` measures the same corpus.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file
from torchvision.transforms import v2 as T

from fl_core.compute.budgets import analysis_budget, check_patch_statistics, check_whitening
from fl_core.errors import AnalysisError, ArgumentError, CheckpointError, DataError, FilterLensError, ModelSpecError
from fl_core.firstlayer.energy import energy_profile, fit_linear_theory
from fl_core.firstlayer.whitening import bank_autocorrelation
from fl_core.io import DEMO_DIR
from fl_core.io.archives import MAX_PICKLE_BYTES, MAX_TENSORS
from fl_core.io.checkpoints import MAX_NESTING_DEPTH, load_state_dict
from fl_core.io.images import (
    MAX_ASPECT_RATIO,
    decode_rgb,
    jpeg_scans,
    save_uploaded_images,
    scaled_input,
    scaled_size,
)
from fl_core.io.models import load_model
from fl_core.io.preprocessing import InputConfig

from .conftest import CHECKPOINTS, REPO, require_fixture

REFUSAL_SECONDS = 5.0
"""Most a refusal may take, measured inside the process (imports excluded)."""
REFUSAL_MIB = 256
"""Most a refusal may add to the process's peak memory over its resident size after the CLI's imports."""

# ------------------------------------------------------------------------------------------------- file builders


def deflated_zeros(n_bytes: int, block: int = 2**20) -> bytes:
    """A raw deflate stream of ``n_bytes`` zero bytes, made in O(n / 1000) work: after a full flush the compressor
    starts afresh, so every 1 MiB block of zeros compresses to the same ~1 KB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    unit = compressor.compress(bytes(block)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return unit * (n_bytes // block) + compressor.compress(bytes(n_bytes % block)) + compressor.flush()


def crc32_of_zeros(n_bytes: int, chunk: int = 2**24) -> int:
    zeros, crc = bytes(chunk), 0
    for _ in range(n_bytes // chunk):
        crc = zlib.crc32(zeros, crc)
    return zlib.crc32(bytes(n_bytes % chunk), crc)


def black_png(width: int, height: int) -> bytes:
    """A valid 8-bit greyscale PNG of black pixels: its rows (a filter byte and ``width`` zeros each) are all zero
    bytes, so the image data is :func:`deflated_zeros` in a zlib wrapper (Adler-32 of n zeros: (n mod 65521)·2¹⁶ + 1).
    A few hundred bytes for a 1×65,535 strip, ~140 KB for 144 million pixels."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    n = (width + 1) * height
    rows = b"\x78\xda" + deflated_zeros(n) + struct.pack(">I", ((n % 65521) << 16) | 1)
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def textured_png(width: int, height: int, seed: int = 0) -> bytes:
    """A smooth random RGB image (texture for patch statistics)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(height // 8, 2), max(width // 8, 2), 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(small).resize((width, height), Image.BILINEAR).save(buffer, format="PNG")
    return buffer.getvalue()


@dataclass(frozen=True)
class ZipRecord:
    """One zip record as it is written: ``data`` as stored, and the unpacked ``size`` and ``crc`` it declares."""

    name: str
    data: bytes
    method: int = zipfile.ZIP_STORED
    size: int | None = None
    crc: int | None = None

    @property
    def unpacked_size(self) -> int:
        return len(self.data) if self.size is None else self.size

    @property
    def unpacked_crc(self) -> int:
        return zlib.crc32(self.data) if self.crc is None else self.crc


def zip_bytes(records: Sequence[ZipRecord], *, aliases: dict[str, str] | None = None,
              claimed_entries: int | None = None) -> bytes:
    """A zip archive written by hand, so that it can lie: ``aliases`` adds directory entries (new name -> existing
    name) pointing at an existing record's bytes; ``claimed_entries`` overrides the end record's entry count."""
    out, directory, offsets = bytearray(), bytearray(), {}

    def directory_entry(name: str, record: ZipRecord, offset: int) -> bytes:
        encoded = name.encode()
        return struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, record.method, 0, 0, record.unpacked_crc,
                           len(record.data), record.unpacked_size, len(encoded), 0, 0, 0, 0, 0, offset) + encoded

    for record in records:
        offsets[record.name] = len(out)
        encoded = record.name.encode()
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, record.method, 0, 0, record.unpacked_crc,
                           len(record.data), record.unpacked_size, len(encoded), 0) + encoded + record.data
        directory += directory_entry(record.name, record, offsets[record.name])
    by_name = {r.name: r for r in records}
    for alias, target in (aliases or {}).items():
        directory += directory_entry(alias, by_name[target], offsets[target])
    entries = len(records) + len(aliases or {}) if claimed_entries is None else claimed_entries
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, min(entries, 0xFFFF), min(entries, 0xFFFF),
                      len(directory), len(out), 0)
    if entries > 0xFFFF:  # the zip64 end record and its locator carry the real count
        zip64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, len(directory),
                            len(out))
        locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, len(out) + len(directory), 1)
        end = zip64 + locator + end
    return bytes(out + directory + end)


def torch_records(obj: object) -> list[ZipRecord]:
    """The records of ``torch.save(obj)``, as :class:`ZipRecord` (all stored, as PyTorch writes them)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with zipfile.ZipFile(buffer) as archive:
        return [ZipRecord(info.filename, archive.read(info)) for info in archive.infolist()]


def with_claimed_length(pickled: bytes, marker: int, claimed: int) -> bytes:
    """Rewrite a pickle so the tensor of ``marker`` elements (its storage size and its shape) claims ``claimed``."""
    old, new = b"J" + struct.pack("<i", marker), b"J" + struct.pack("<i", claimed)
    assert pickled.count(old) == 2, "the marker must appear as the storage size and in the shape"
    return pickled.replace(old, new)


def _with_claimed_length(records: list[ZipRecord], marker: int, claimed: int) -> list[ZipRecord]:
    return [ZipRecord(r.name, with_claimed_length(r.data, marker, claimed)) if r.name.endswith("data.pkl") else r
            for r in records]


def legacy_claim_checkpoint(claimed_elements: int = 2_000_000_000) -> bytes:
    """A legacy-format torch file whose pickle claims an 8 GB storage for a tensor it stores 0.5 MB of."""
    marker = 123_457
    buffer = io.BytesIO()
    torch.save({"conv.weight": torch.zeros(marker, 1, 1, 1)}, buffer, _use_new_zipfile_serialization=False)
    return with_claimed_length(buffer.getvalue(), marker, claimed_elements)


def deflated_zeros_checkpoint(claimed_bytes: int) -> bytes:
    """A valid torch checkpoint but for one thing: the record of its big tensor is deflated zeros that unpack to
    ``claimed_bytes`` (the pickle claims a float32 tensor of that size). A few MB on disk; PyTorch would inflate
    it in memory."""
    marker = 123_457
    state = {"conv1.weight": torch.randn(8, 3, 3, 3), "big.weight": torch.zeros(marker, 1, 1, 1)}
    records = _with_claimed_length(torch_records(state), marker, claimed_bytes // 4)
    storage = next(r.name for r in records if r.name.endswith("data/1"))
    bomb = ZipRecord(storage, deflated_zeros(claimed_bytes // 4 * 4), zipfile.ZIP_DEFLATED,
                     size=claimed_bytes // 4 * 4, crc=crc32_of_zeros(claimed_bytes // 4 * 4))
    return zip_bytes([bomb if r.name == storage else r for r in records])


def overlapping_records_checkpoint(copies: int = 40) -> bytes:
    """A torch checkpoint whose directory lists its 1 MB storage ``copies`` more times under other names: the
    records claim ``copies`` MB of a 1 MB file."""
    records = torch_records({"conv.weight": torch.randn(2**18 // 27, 3, 3, 3)})
    storage = next(r.name for r in records if r.name.endswith("data/0"))
    return zip_bytes(records, aliases={f"{storage}{i}": storage for i in range(copies)})


def million_records_checkpoint() -> bytes:
    """A small torch checkpoint whose end record (zip64) claims a million entries."""
    return zip_bytes(torch_records({"conv.weight": torch.randn(4, 3, 3, 3)}), claimed_entries=1_000_000)


def lying_directory_checkpoint(entries: int = 20_000) -> bytes:
    """A torch checkpoint with ``entries`` extra (empty) records whose end record claims only the real ones."""
    records = torch_records({"conv.weight": torch.randn(4, 3, 3, 3)})
    padding = [ZipRecord(f"archive/extra/{i}", b"") for i in range(entries)]
    return zip_bytes(records + padding, claimed_entries=len(records))


def big_pickle_checkpoint() -> bytes:
    """A torch zip whose data.pkl is just over :data:`MAX_PICKLE_BYTES` of no-op opcodes."""
    records = torch_records({"conv.weight": torch.randn(4, 3, 3, 3)})
    pickled = b"\x80\x02" + b"N" * MAX_PICKLE_BYTES + b"."
    return zip_bytes([ZipRecord(r.name, pickled) if r.name.endswith("data.pkl") else r for r in records])


def legacy_pickle_bomb() -> bytes:
    """A bare pickle (read as a legacy torch file) of 3 MiB of no-op opcodes: minutes in a Python unpickler."""
    return b"\x80\x02" + b"N" * (3 * 2**20) + b"."


def safetensors_raw(header: dict, data: bytes = b"", pad_to: int = 0) -> bytes:
    encoded = json.dumps(header).encode().ljust(pad_to)
    return struct.pack("<Q", len(encoded)) + encoded + data


def many_entries_safetensors(entries: int = MAX_TENSORS + 1) -> bytes:
    """A valid safetensors file of ``entries`` one-value tensors (~70 bytes of header each)."""
    header = {f"t{i}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(entries)}
    return safetensors_raw(header, bytes(4 * entries))


def big_header_safetensors() -> bytes:
    """A valid safetensors file of one tensor whose header is padded with spaces to 5 MiB."""
    header = {"conv.weight": {"dtype": "F32", "shape": [4, 3, 3, 3], "data_offsets": [0, 432]}}
    return safetensors_raw(header, bytes(432), pad_to=5 * 2**20)


def torch_file(obj: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def nested(state: dict, depth: int, key: str = "model") -> dict:
    for _ in range(depth):
        state = {key: state, "epoch": 3}
    return state


def conv_state(first: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {"conv1.weight": torch.randn(8, 3, 3, 3, generator=gen) if first is None else first,
            "conv2.weight": torch.randn(16, 8, 3, 3, generator=gen)}


def many_views_checkpoint(views: int = 16) -> bytes:
    """One 1 MiB storage seen through ``views`` full-size views: the tensors claim ``views`` MiB."""
    base = torch.randn(2**18)
    return torch_file({f"conv{i}.weight": base.view(2**10, 1, 16, 16) for i in range(views)})


# ------------------------------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class HostileInput:
    """One hostile input: its file name, its class, how to build it, what the refusal must say, and the CLI command
    that meets it (``{path}`` is the file, ``{folder}`` the folder holding it)."""

    name: str
    kind: str
    build: Callable[[], bytes]
    refusal: str
    command: tuple[str, ...]
    before: str = ""
    """What it cost before these bounds (measured on the main branch)."""


CHECK_FILE = ("inspect", "--model", "weights:{path}")
PROFILE_IMAGES = ("energy", "--model", "demo:tiny_vgg", "--images", "{folder}")
PROFILE_FILE = ("energy", "--model", "weights:{path}", "--images", "{folder}", "--max-images", "1")

HOSTILE: tuple[HostileInput, ...] = (
    HostileInput("strip_1x65535.png", "image: extreme aspect ratio", lambda: black_png(1, 65_535),
                 "more elongated than 16:1", PROFILE_IMAGES, "12.7 GB, MemoryError traceback"),
    HostileInput("strip_4000x1.png", "image: extreme aspect ratio", lambda: black_png(4000, 1),
                 "more elongated than 16:1", PROFILE_IMAGES, "> 90 s"),
    HostileInput("bomb_9000x9000.png", "image: decompression bomb", lambda: black_png(9000, 9000),
                 "over the 64,000,000-pixel limit", PROFILE_IMAGES),
    HostileInput("bomb_12000x12000.png", "image: bomb beyond Pillow's own limit", lambda: black_png(12_000, 12_000),
                 "over the 64,000,000-pixel limit", PROFILE_IMAGES, "Pillow's message, not ours"),
    HostileInput("photo_1000x1500.png", "image: too large at the model's scale", lambda: textured_png(1000, 1500),
                 "at the model's scale", (*PROFILE_IMAGES, "--input-size", "4096", "--crop-pct", "1")),
    HostileInput("photo_64x64.png", "input config: resize beyond the limit", lambda: textured_png(64, 64),
                 "over the 4096-pixel limit", (*PROFILE_IMAGES, "--input-size", "4096", "--crop-pct", "0.05")),
    HostileInput("deflated_zeros_3_5GB.pt", "zip: compressed record", lambda: deflated_zeros_checkpoint(3_500_000_000),
                 "is compressed", CHECK_FILE, "accepted: 40 s, 10 GB"),
    HostileInput("overlapping_records.pt", "zip: records overlap", overlapping_records_checkpoint,
                 r"claim 4\d MiB in a 1.0 MiB file", CHECK_FILE),
    HostileInput("million_records.pt", "zip: a million records claimed", million_records_checkpoint,
                 "holds 1,000,000 archive records", CHECK_FILE),
    HostileInput("directory_lies.pt", "zip: directory disagrees with end record", lying_directory_checkpoint,
                 "central directory does not match", CHECK_FILE),
    HostileInput("pickle_over_limit.pt", "zip: data.pkl over the limit", big_pickle_checkpoint,
                 "pickled part is over", CHECK_FILE),
    HostileInput("legacy_pickle_bomb.pth", "legacy: pickle over the limit", legacy_pickle_bomb,
                 "pickled part is over", CHECK_FILE),
    HostileInput("legacy_claims_8GB.th", "legacy: storage claims 8 GB", legacy_claim_checkpoint,
                 "could not be read as a PyTorch checkpoint", CHECK_FILE),
    HostileInput("many_entries.safetensors", "safetensors: too many tensors", many_entries_safetensors,
                 f"holds {MAX_TENSORS + 1:,} tensor entries", CHECK_FILE, "10⁶ entries: > 90 s"),
    HostileInput("big_header.safetensors", "safetensors: header over the limit", big_header_safetensors,
                 "header is 5.0 MiB", CHECK_FILE),
    HostileInput("many_views.pt", "views claim 16x the file", many_views_checkpoint,
                 "claim 16 MiB of values", CHECK_FILE),
    HostileInput("float64_1e308.pt", "weights beyond float32", lambda: torch_file(
        conv_state(torch.full((8, 3, 3, 3), 1e308, dtype=torch.float64))), "beyond float32's range", CHECK_FILE,
        "theory r = nan, exit 0"),
    HostileInput("nested_17_deep.pt", "nesting deeper than unwrapped", lambda: torch_file(nested(conv_state(), 17)),
                 "more than 16 levels deep", CHECK_FILE),
    HostileInput("zero_first_layer.pt", "all-zero filters", lambda: torch_file(conv_state(torch.zeros(8, 3, 3, 3))),
                 "layer conv1 of .* are all zero", PROFILE_FILE, "theory r = nan, exit 0"),
)


@functools.cache
def built(entry: HostileInput) -> bytes:
    """The bytes of ``entry``, built once per session (the 3.5 GB one takes a CRC over 3.5 GB of zeros)."""
    return entry.build()


def write_input(entry: HostileInput, root: Path) -> tuple[Path, list[str]]:
    """Write ``entry`` under ``root`` and return its path and CLI arguments. Image inputs get a folder of their own;
    checkpoints that are profiled get a folder with one textured photo."""
    folder = root / Path(entry.name).stem
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / entry.name
    path.write_bytes(built(entry))
    if "{path}" in " ".join(entry.command) and "{folder}" in " ".join(entry.command):
        images = root / f"{folder.name}_images"
        images.mkdir(exist_ok=True)
        (images / "photo.png").write_bytes(textured_png(96, 96))
        folder = images
    return path, [a.format(path=path, folder=folder) for a in entry.command]


# ------------------------------------------------------------------------------------------------- costly inputs


def conv_file(out_channels: int, kernel: int, in_channels: int = 3, extra: dict | None = None) -> bytes:
    """A safetensors file of one first convolution (and ``extra`` tensors): valid, a few MB at most."""
    gen = torch.Generator().manual_seed(0)
    return safetensors_bytes({"conv1.weight": torch.randn(out_channels, in_channels, kernel, kernel, generator=gen),
                              **(extra or {})})


def nested_tensor_checkpoint() -> bytes:
    """A torch checkpoint whose second entry is a nested tensor (a list of tensors of different shapes)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype API
        ragged = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)])
    return torch_file({"conv1.weight": torch.randn(8, 3, 3, 3), "ragged": ragged})


def onnx_conv(**attributes) -> bytes:
    """An ONNX model of one Conv node carrying ``attributes`` as given (e.g. empty ``strides``, a string ``group``)."""
    import onnx
    from onnx import helper, numpy_helper

    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv1", kernel_shape=[3, 3])
    for name, value in attributes.items():
        kind = onnx.AttributeProto.INTS if isinstance(value, list) else None
        node.attribute.append(helper.make_attribute(name, value, attr_type=kind))
    weight = numpy_helper.from_array(np.random.default_rng(0).normal(size=(8, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [weight])
    return helper.make_model(graph).SerializeToString()


def many_scans_jpeg(side: int = 4000, repeats: int = 2000) -> bytes:
    """A valid progressive JPEG of ``side``² noise-textured pixels whose smallest scan (a few dozen bytes: an AC
    refinement) is repeated ``repeats`` times: every scan is decoded over the whole image. Under 1 MB."""
    small = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    buffer = io.BytesIO()
    small.resize((side, side)).save(buffer, "JPEG", progressive=True, quality=50)
    data = buffer.getvalue()
    starts = [m.start() for m in re.finditer(rb"\xff\xda", data)]
    scans = [data[a:b] for a, b in zip(starts, [*starts[1:], len(data) - 2])]
    return data[:-2] + min(scans, key=len) * repeats + b"\xff\xd9"


def safetensors_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save(tensors)


PROFILE_SEEDS = (*PROFILE_FILE, "--seeds", "1000")

COSTLY: tuple[HostileInput, ...] = (
    HostileInput("kernel_101.safetensors", "layer: 101×101 first kernel (memory)", lambda: conv_file(8, 101),
                 r"patch covariance .* over the 1\.0 GiB", PROFILE_FILE, "energy: 8 GB, > 240 s"),
    HostileInput("kernel_21.safetensors", "layer: 21×21 first kernel (work)", lambda: conv_file(8, 21),
                 "billion multiply-adds", PROFILE_FILE, "energy: 199 s"),
    HostileInput("kernel_101_whitening.safetensors", "layer: 101×101 kernel, whitening", lambda: conv_file(8, 101),
                 r"over the 1\.0 GiB", ("whitening", "--model", "weights:{path}", "--images", "{folder}"), "8 GB"),
    HostileInput("channels_12000.safetensors", "layer: 12,000 filters × 1,000 seeds", lambda: conv_file(12_000, 3),
                 "random-init banks", PROFILE_SEEDS),
    HostileInput("scans_2000.jpg", "image: progressive JPEG of 2,000 scans", many_scans_jpeg, "pixel-scans",
                 PROFILE_IMAGES, "159 s (a 1 MB file)"),
    HostileInput("vit_giant.txt", "registry: 1.0 billion parameters", lambda: b"", "1,013 million parameters",
                 ("inspect", "--model", "timm:vit_giant_patch14_224"), "4.8 GB, 68 s"),
    HostileInput("nested_tensor.pt", "checkpoint: a nested tensor", nested_tensor_checkpoint, "nested tensor",
                 CHECK_FILE, "traceback"),
    HostileInput("empty_strides.onnx", "ONNX: Conv with empty strides", lambda: onnx_conv(strides=[]),
                 r"strides=\[\]", ("inspect", "--model", "onnx:{path}"), "IndexError traceback"),
    HostileInput("empty_dilations.onnx", "ONNX: Conv with empty dilations", lambda: onnx_conv(dilations=[]),
                 r"dilations=\[\]", ("inspect", "--model", "onnx:{path}"), "IndexError traceback"),
    HostileInput("string_group.onnx", "ONNX: Conv with a string group", lambda: onnx_conv(group="two"),
                 "group=b'two'", ("inspect", "--model", "onnx:{path}"), "ValueError traceback"),
    HostileInput("long_spec.txt", "spec: 100,000 characters", lambda: b"", "100,008 characters",
                 ("inspect", "--model", "weights:" + "a" * 100_000), "traceback"),
    HostileInput("json_folder.txt", "output: --json names a folder", lambda: b"", "is a folder",
                 ("energy", "--model", "demo:tiny_vgg", "--json", "{folder}"), "IsADirectoryError traceback"),
    HostileInput("seeds.txt", "option: energy --seeds 1000000", lambda: b"", "at most 1,000",
                 ("energy", "--model", "demo:tiny_vgg", "--seeds", "1000000"), "killed at 300 s"),
    HostileInput("restarts.txt", "option: masterkeys --restarts 1e9", lambda: b"", "at most 100",
                 ("masterkeys", "--model", "demo:ppocrv6_det_small_dw7", "--restarts", "1000000000"),
                 "8.5 GB, traceback"),
    HostileInput("distance.txt", "option: whitening --max-distance 1e7", lambda: b"", "at most 1,024",
                 ("whitening", "--model", "demo:tiny_vgg", "--max-distance", "10000000"), "allocator traceback"),
    HostileInput("distance_1000.txt", "option: --max-distance beyond the images", lambda: b"",
                 "Lower the largest distance", ("whitening", "--model", "demo:tiny_vgg", "--max-distance", "1000"),
                 "14000: 6.8 GB"),
    HostileInput("train_vit_huge.txt", "training: a 630-million-parameter network", lambda: b"",
                 "630 million parameters", ("train", "--arch", "timm:vit_huge_patch14_224", "--out", "{folder}/run"),
                 "+4 GB in 2 min (issue 33)"),
    HostileInput("train_batch_4096.txt", "training: width 256 at batch 4096", lambda: b"",
                 r"batch size 4,096 would take about 19\.\d GiB", ("train", "--width", "256", "--batch-size", "4096",
                                                                  "--out", "{folder}/run"), "+5.5 GB in 36 s"),
    HostileInput("train_steps.txt", "training: 20,000 steps of a ResNet-18", lambda: b"", "FL_TRAINING_TMAC",
                 ("train", "--arch", "timm:resnet18", "--steps", "20000", "--out", "{folder}/run"), "hours"),
)
"""Valid inputs that describe far more work than any real network of their size (issue 25), and malformed ones that
ended in tracebacks: each refused before it costs, with one line."""


# ------------------------------------------------------------------------------------------------- measuring


MEASURE_CHILD = r"""
import contextlib, io, json, sys, time, traceback
from pathlib import Path

def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))

import fl_core.cli
import onnx, timm  # imported on first use by the ONNX reader and the registry loader
from fl_core.io.checkpoints import load_state_dict
for family in fl_core.cli.FAMILIES.values():  # every command's imports: what follows is the job's own cost
    family.entry_point()
for job in json.loads(sys.argv[1]):
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
    baseline, start, err, rc = kib("VmRSS"), time.perf_counter(), io.StringIO(), 0
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if "cli" in job:
                rc = fl_core.cli.main(job["cli"])
            else:
                load_state_dict(job["load"])
    except SystemExit as stop:  # argparse refusing an option: its one line is on the captured stderr
        rc = stop.code
    except BaseException:
        rc, err = -1, io.StringIO(traceback.format_exc())
    print(json.dumps({"rc": rc, "stderr": err.getvalue(), "seconds": time.perf_counter() - start,
                      "baseline_mib": baseline / 1024, "added_mib": (kib("VmHWM") - baseline) / 1024}), flush=True)
"""


@dataclass(frozen=True)
class Measurement:
    """One job run in a fresh interpreter after the CLI's imports: exit status, stderr, the job's own seconds, the
    resident size before it and how much its peak added (Linux ``VmHWM`` after resetting it)."""

    rc: int
    stderr: str
    seconds: float
    baseline_mib: float
    added_mib: float
    lines: list[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lines", self.stderr.strip().splitlines())


def measure_jobs(jobs: Sequence[dict], timeout: float = 600) -> list[Measurement]:
    """Run jobs (``{"cli": argv}`` or ``{"load": path}``) one after another in one subprocess, each measured."""
    out = subprocess.run([sys.executable, "-c", MEASURE_CHILD, json.dumps(jobs)], capture_output=True, text=True,
                         cwd=REPO, timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "default"})
    assert out.returncode == 0, out.stderr[-3000:]
    return [Measurement(**json.loads(line)) for line in out.stdout.splitlines() if line.startswith("{")]


def run_cli(argv: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m fl_core ARGV`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "fl_core", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


needs_proc = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak RSS is read from /proc")


# ------------------------------------------------------------------------------------------------- tests


@pytest.mark.slow
def test_hostile_files_are_small_on_disk(tmp_path: Path) -> None:
    for entry in HOSTILE:
        path, _ = write_input(entry, tmp_path)
        assert path.stat().st_size < 6 * 2**20, (entry.name, path.stat().st_size)


def test_the_builders_make_what_they_claim() -> None:
    """Controls: the bombs are real (valid files that unpack to what they claim)."""
    assert zlib.decompress(deflated_zeros(5 * 2**20 + 7), -15) == bytes(5 * 2**20 + 7)
    with Image.open(io.BytesIO(black_png(300, 200))) as image:
        assert image.size == (300, 200) and not np.asarray(image).any()
    assert len(black_png(1, 65_535)) < 400 and len(black_png(4000, 1)) < 200
    with zipfile.ZipFile(io.BytesIO(deflated_zeros_checkpoint(2**28))) as archive:
        big = next(i for i in archive.infolist() if i.compress_type == zipfile.ZIP_DEFLATED)
        assert big.file_size == 2**28 and archive.testzip() is None
    assert len(zipfile.ZipFile(io.BytesIO(lying_directory_checkpoint(50))).infolist()) > 50


@pytest.mark.slow
@pytest.mark.parametrize("entry", HOSTILE, ids=lambda e: e.name)
def test_each_hostile_input_is_refused_with_a_message_that_says_what_to_do(entry: HostileInput,
                                                                            tmp_path: Path) -> None:
    path, argv = write_input(entry, tmp_path)
    errors = (DataError, CheckpointError, AnalysisError, ModelSpecError)
    with pytest.raises(errors) as refused:
        if entry.kind.startswith(("image", "input config")):
            overrides = dict(zip(argv[5::2], argv[6::2]))  # --input-size/--crop-pct after the folder
            config = InputConfig(**{k.removeprefix("--").replace("-", "_"): float(v) if "crop" in k else int(v)
                                    for k, v in overrides.items()})
            scaled_input(decode_rgb(path), config)
        elif entry.name.startswith("zero_"):
            loaded = load_model(f"weights:{path}")
            energy_profile(loaded.state_dict["conv1.weight"], _pca(), name=f"layer conv1 of {loaded.label}")
        else:
            load_state_dict(path)
    message = str(refused.value)
    assert re.search(entry.refusal, message), (entry.refusal, message)
    assert "\n" not in message and "Traceback" not in message and len(message) < 600
    assert re.search(r"\b(Use|Save|Lower|Crop|Upload|Rescale|Check|Pick|Analyse|raise|Remove)\b", message), message


@pytest.mark.slow
@needs_proc
def test_every_refusal_through_the_cli_is_one_line_exit_2_fast_and_small(tmp_path: Path) -> None:
    """All of them through ``fl_core.cli.main`` in one subprocess, each measured after the CLI's imports."""
    argvs = [write_input(entry, tmp_path)[1] for entry in HOSTILE]
    results = measure_jobs([{"cli": [*argv, "--quiet"]} for argv in argvs])
    problems = []
    for entry, result in zip(HOSTILE, results):
        line = result.lines[0] if result.lines else ""
        if result.rc != 2 or len(result.lines) != 1 or not line.startswith("error: "):
            problems.append(f"{entry.name}: rc {result.rc}, stderr {result.stderr[-500:]!r}")
        elif not re.search(entry.refusal, line):
            problems.append(f"{entry.name}: {line}")
        if result.seconds > REFUSAL_SECONDS or result.added_mib > REFUSAL_MIB:
            problems.append(f"{entry.name}: {result.seconds:.1f} s, +{result.added_mib:.0f} MiB")
        print(f"{entry.name:28s} rc {result.rc} {result.seconds:5.2f} s +{result.added_mib:4.0f} MiB  {line[:70]}")
    assert len(results) == len(HOSTILE) and not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["strip_1x65535.png", "deflated_zeros_3_5GB.pt"])
def test_the_real_command_line_prints_one_line_and_exits_2(name: str, tmp_path: Path) -> None:
    entry = next(e for e in HOSTILE if e.name == name)
    _, argv = write_input(entry, tmp_path)
    done = run_cli([*argv, "--quiet"])
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error: "), done.stderr
    assert re.search(entry.refusal, done.stderr)


def test_uploaded_strips_and_bombs_are_refused_naming_the_file(tmp_path: Path) -> None:
    for name, data, refusal in (("strip.png", black_png(1, 65_535), "more elongated"),
                                ("tall.png", black_png(17, 17 * 17), "more elongated"),
                                ("bomb.png", black_png(12_000, 12_000), "pixel limit")):
        with pytest.raises(DataError, match=refusal) as refused:
            save_uploaded_images([(name, data)], tmp_path / "uploads")
        assert name in str(refused.value) and "DOS attack" not in str(refused.value)


def test_pillow_does_not_answer_for_us() -> None:
    """Above twice Pillow's default limit Pillow raised its own error; below it, it warned. One message: ours."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a DecompressionBombWarning would fail here
        with pytest.raises(DataError, match="over the 64,000,000-pixel limit"):
            decode_rgb(io.BytesIO(black_png(9000, 9000)))


def test_legitimate_wide_images_still_work(tmp_path: Path) -> None:
    """A 3:1 panorama and a 16:1 strip decode; at the model's scale the short side is the resize size."""
    config = InputConfig()
    for width, height in ((768, 256), (1600, 100), (100, 1600)):
        image = decode_rgb(io.BytesIO(textured_png(width, height)))
        x = scaled_input(image, config)
        assert tuple(x.shape[1:][::-1]) == scaled_size(width, height, config)
        assert min(x.shape[1:]) == config.resize_size
    with pytest.raises(DataError, match="more elongated"):
        decode_rgb(io.BytesIO(textured_png(17 * 40, 40)))
    assert MAX_ASPECT_RATIO == 16


@pytest.mark.parametrize("size", [(1, 16), (333, 250), (250, 333), (1000, 999), (4000, 251)])
def test_scaled_size_is_what_torchvision_produces(size: tuple[int, int]) -> None:
    config = InputConfig(input_size=224, crop_pct=0.9)
    image = Image.new("RGB", size)
    resized = T.Resize(config.resize_size, antialias=True)(image)
    assert resized.size == scaled_size(*size, config)


def test_input_config_bounds_the_resize() -> None:
    assert InputConfig(input_size=4096, crop_pct=1.0).resize_size == 4096
    with pytest.raises(ModelSpecError, match=r"raise the crop fraction to at least 0\.0547"):
        InputConfig(input_size=224, crop_pct=0.05)
    with pytest.raises(ArgumentError, match="mean must be a finite number, not nan"):
        InputConfig(mean=(0.5, float("nan"), 0.5))


@pytest.mark.slow
def test_panorama_profile_through_the_cli(tmp_path: Path) -> None:
    (tmp_path / "pano.png").write_bytes(textured_png(768, 256))
    done = run_cli(["energy", "--model", "demo:tiny_vgg", "--images", str(tmp_path), "--quiet",
                    "--json", str(tmp_path / "out.json")])
    assert done.returncode == 0, done.stderr
    assert np.isfinite(json.loads((tmp_path / "out.json").read_text())["models"][0]["theory"]["r"])


def _pca():
    from fl_core.firstlayer.patches import patch_pca

    gen = torch.Generator().manual_seed(0)
    smooth = torch.nn.functional.avg_pool2d(torch.randn(4, 3, 40, 40, generator=gen), 5, 1)
    return patch_pca([smooth], (3, 3), device="cpu")


def test_all_zero_filters_get_a_clear_error_not_nan() -> None:
    pca = _pca()
    zero = torch.zeros(8, 3, 3, 3)
    with pytest.raises(AnalysisError, match="The filters of layer conv1 of m are all zero"):
        energy_profile(zero, pca, name="layer conv1 of m")
    moved = torch.randn(8, 3, 3, 3)
    with pytest.raises(AnalysisError, match="equal the initialization"):
        energy_profile(moved, pca, init=moved.clone())
    with pytest.raises(AnalysisError, match="the same for all 27 patch components"):
        fit_linear_theory(np.ones(27), pca.lambdas)
    with pytest.raises(AnalysisError, match="cannot be compared"):
        fit_linear_theory(np.linspace(1, 0, 12), pca.lambdas)
    correlation = torch.randn(3, 3, 9, 9, dtype=torch.float64)
    with pytest.raises(AnalysisError, match="layer conv1 of m are all zero"):
        bank_autocorrelation(zero, correlation, 2, name="layer conv1 of m")


def test_zero_filters_through_energy_and_whitening(tmp_path: Path) -> None:
    """The whole analyses: a clear one-line error, never a NaN result."""
    from fl_core.firstlayer.energy import analyze_energy
    from fl_core.firstlayer.whitening import WhiteningSettings, analyze_whitening
    from fl_core.io.images import folder_images

    (tmp_path / "w.pt").write_bytes(torch_file(conv_state(torch.zeros(8, 3, 3, 3))))
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "photo.png").write_bytes(textured_png(96, 96))
    loaded = load_model(f"weights:{tmp_path / 'w.pt'}", input_overrides={"input_size": 32, "crop_pct": 1.0})
    images = folder_images(tmp_path / "images")
    with pytest.raises(AnalysisError, match=r"layer conv1 of w\.pt .* are all zero"):
        analyze_energy([loaded], images, device="cpu")
    with pytest.raises(AnalysisError, match=r"layer conv1 of w\.pt .* are all zero"):
        analyze_whitening([loaded], images, WhiteningSettings(max_distance=4, seeds=2), device="cpu")


def test_float64_beyond_float32_is_refused_but_large_finite_float64_loads(tmp_path: Path) -> None:
    (tmp_path / "huge.pt").write_bytes(torch_file(conv_state(torch.full((8, 3, 3, 3), -1e308, dtype=torch.float64))))
    with pytest.raises(CheckpointError, match="holds float64 values up to 1e\\+308, beyond float32's range"):
        load_state_dict(tmp_path / "huge.pt")
    (tmp_path / "big.pt").write_bytes(torch_file(conv_state(torch.full((8, 3, 3, 3), 1e30, dtype=torch.float64))))
    assert load_state_dict(tmp_path / "big.pt").tensors["conv1.weight"].dtype == torch.float64


@pytest.mark.parametrize("depth", [5, MAX_NESTING_DEPTH])
def test_deep_nesting_is_unwrapped(depth: int, tmp_path: Path) -> None:
    (tmp_path / "deep.pt").write_bytes(torch_file(nested(conv_state(), depth)))
    loaded = load_state_dict(tmp_path / "deep.pt")
    assert set(loaded.tensors) == {"conv1.weight", "conv2.weight"}
    assert loaded.notes.count("used the nested 'model' entry") == depth


def test_nesting_refusals_say_which_keys_how_deep_and_what_to_save(tmp_path: Path) -> None:
    (tmp_path / "too_deep.pt").write_bytes(torch_file(nested(conv_state(), MAX_NESTING_DEPTH + 1)))
    with pytest.raises(CheckpointError, match=r"more than 16 levels deep \('model' → 'model' → 'model' → 'model' →"
                                              r" …\).*torch.save\(model.state_dict\(\)"):
        load_state_dict(tmp_path / "too_deep.pt")
    (tmp_path / "odd_key.pt").write_bytes(torch_file({"checkpoint": {"weights": conv_state()}, "epoch": 2}))
    with pytest.raises(CheckpointError, match=r"under \['checkpoint'\]\['weights'\] \(2 levels down\).*"
                                              r"torch.save\(checkpoint\['checkpoint'\]\['weights'\]"):
        load_state_dict(tmp_path / "odd_key.pt")
    loop: dict = {"epoch": 1}
    loop["model"] = loop
    (tmp_path / "loop.pt").write_bytes(torch_file(loop))
    with pytest.raises(CheckpointError, match="contains no tensors"):
        load_state_dict(tmp_path / "loop.pt")


def test_a_mix_of_nested_keys_finds_the_tensors(tmp_path: Path) -> None:
    """A dead-end ``state_dict`` entry does not hide weights under ``model``→``module``."""
    (tmp_path / "mix.pt").write_bytes(torch_file({"state_dict": {"meta": {"lr": 0.1}},
                                                  "model": {"module": conv_state()}}))
    loaded = load_state_dict(tmp_path / "mix.pt")
    assert set(loaded.tensors) == {"conv1.weight", "conv2.weight"}


def test_real_checkpoints_still_load() -> None:
    expected = {"resnet20_cifar10.th": 97, "mobilenet_v2_imagenet.pt": 314, "squeezenet1_0_imagenet.pt": 52}
    for name, count in expected.items():
        require_fixture(CHECKPOINTS / name)
        assert len(load_state_dict(CHECKPOINTS / name).tensors) == count, name
    for demo in ("tiny_vgg", "tiny_vgg_init"):
        assert load_state_dict(DEMO_DIR / f"{demo}.safetensors").tensors


def test_a_state_dict_at_the_tensor_limit_loads(tmp_path: Path) -> None:
    save_file({f"t{i}": torch.zeros(1) for i in range(MAX_TENSORS)}, str(tmp_path / "limit.safetensors"))
    assert len(load_state_dict(tmp_path / "limit.safetensors").tensors) == MAX_TENSORS


@pytest.mark.slow
@needs_proc
def test_loading_holds_about_one_copy_of_the_file(tmp_path: Path) -> None:
    """A checkpoint of one big tensor (the worst case for temporaries): loading and validating it adds at most 1.5×
    the file to the peak (it was 2.8× for float32 and 3.5× for float16)."""
    gen = torch.Generator().manual_seed(0)
    big = {"conv1.weight": torch.randn(8, 3, 3, 3), "big.weight": torch.randn(2**25 // 9, 1, 3, 3, generator=gen)}
    save_file({k: v.half() for k, v in big.items()}, str(tmp_path / "half.safetensors"))
    save_file(big, str(tmp_path / "full.safetensors"))
    torch.save(big, tmp_path / "full.pt")
    paths = [tmp_path / "half.safetensors", tmp_path / "full.safetensors", tmp_path / "full.pt"]
    for path, result in zip(paths, measure_jobs([{"load": str(p)} for p in paths])):
        file_mib = path.stat().st_size / 2**20
        assert result.rc == 0, result.stderr
        assert result.added_mib < 1.5 * file_mib + 32, (path.name, file_mib, result.added_mib)


# ------------------------------------------------------------------------------------------------- costly inputs: tests


@pytest.mark.slow
def test_costly_files_are_small_on_disk(tmp_path: Path) -> None:
    for entry in COSTLY:
        path, _ = write_input(entry, tmp_path)
        assert path.stat().st_size < 2 * 2**20, (entry.name, path.stat().st_size)
    assert len(many_scans_jpeg()) < 2**20 and jpeg_scans(many_scans_jpeg()) == 2010


@pytest.mark.slow
@needs_proc
def test_every_costly_input_is_refused_by_the_cli_in_one_line_fast_and_small(tmp_path: Path) -> None:
    """The bar of issue 25 for the command line: exit 2, one line, within seconds and a few hundred MB."""
    argvs = [write_input(entry, tmp_path)[1] for entry in COSTLY]
    results = measure_jobs([{"cli": [*argv, "--quiet"]} for argv in argvs])
    problems = []
    for entry, result in zip(COSTLY, results):
        line = result.lines[0] if result.lines else ""
        if result.rc != 2 or len(result.lines) != 1 or not line.startswith("error: ") or "Traceback" in line:
            problems.append(f"{entry.name}: rc {result.rc}, stderr {result.stderr[-500:]!r}")
        elif not re.search(entry.refusal, line):
            problems.append(f"{entry.name}: {line}")
        if result.seconds > REFUSAL_SECONDS or result.added_mib > REFUSAL_MIB:
            problems.append(f"{entry.name}: {result.seconds:.1f} s, +{result.added_mib:.0f} MiB")
        print(f"{entry.name:34s} rc {result.rc} {result.seconds:5.2f} s +{result.added_mib:4.0f} MiB  {line[:70]}")
    assert len(results) == len(COSTLY) and not problems, "\n".join(problems)


def test_the_patch_budget_follows_the_kernel_and_the_admins_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """D = C·kh·kw: real first layers (AlexNet's 11×11, a ViT-B/16 patch embedding) pass at 1 GiB; a 101×101 kernel
    needs 5·8·D² = 35 GiB and is refused; a lower FL_ANALYSIS_MEMORY_MB refuses the 11×11 one too."""
    for kernel in (3, 7, 11, 16):
        check_patch_statistics(3, (kernel, kernel), 256)
    with pytest.raises(AnalysisError, match=r"34\.9 GiB, over the 1\.0 GiB .*D = 3·101·101 = 30,603"):
        check_patch_statistics(3, (101, 101), 256)
    with pytest.raises(AnalysisError, match="larger than the 32-pixel images"):
        check_patch_statistics(3, (33, 33), 32)
    monkeypatch.setenv("FL_ANALYSIS_MEMORY_MB", "4")
    with pytest.raises(AnalysisError, match=r"over the 4 MiB .*\(FL_ANALYSIS_MEMORY_MB\)"):
        check_patch_statistics(3, (11, 11), 256)
    monkeypatch.setenv("FL_ANALYSIS_MEMORY_MB", "lots")
    with pytest.raises(FilterLensError, match="FL_ANALYSIS_MEMORY_MB='lots' is not a number"):
        analysis_budget()


def test_the_work_budget_counts_patches_times_the_squared_dimension(monkeypatch: pytest.MonkeyPatch) -> None:
    """(side − k + 1)² patches of (D + 1)² multiply-adds each: 21×21 at 256 px is 98 billion, over 50."""
    with pytest.raises(AnalysisError, match="98 billion multiply-adds, over the 50 billion"):
        check_patch_statistics(3, (21, 21), 256)
    monkeypatch.setenv("FL_ANALYSIS_GMAC_PER_IMAGE", "200")
    check_patch_statistics(3, (21, 21), 256)


def test_whitening_distances_are_bounded_by_the_image_side() -> None:
    check_whitening(3, (3, 3), 20, 128)
    with pytest.raises(AnalysisError, match=r"they are 128 px\. Lower the largest distance to at most 125 px"):
        check_whitening(3, (3, 3), 126, 128)


def test_the_duplicate_filter_gram_is_streamed_and_exact() -> None:
    """Blocks of a few rows give the maxima of the whole cosine matrix (computed independently here)."""
    from fl_core.report.weightstats import max_peer_cosine

    gen = torch.Generator().manual_seed(0)
    filters = torch.randn(300, 4, generator=gen).double()
    filters[7] = -2.5 * filters[123]  # a copy, flipped and scaled
    units = filters / filters.norm(dim=1, keepdim=True)
    whole = (units @ units.T).abs().fill_diagonal_(0).max(dim=1).values
    for block_values in (300, 301 * 7, 10**6):
        assert torch.allclose(max_peer_cosine(filters, block_values), whole, atol=1e-12)
    assert max_peer_cosine(filters, 300)[[7, 123]].min() > 1 - 1e-12


@pytest.mark.slow
@needs_proc
def test_weight_statistics_of_a_30000_channel_layer_stay_small() -> None:
    """A 1×1 layer of 30,000 filters: its full Gram matrix would be 7.2 GB; streamed, the statistics add < 400 MB
    (about 210 measured: 33 MB blocks and their temporaries) and still find the planted copy."""
    script = r"""
import json, torch
from pathlib import Path
def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))
from fl_core.io.layers import ConvLayer
from fl_core.report.weightstats import layer_weight_statistics
weight = torch.randn(30_000, 16, 1, 1, generator=torch.Generator().manual_seed(0))
weight[5] = 3 * weight[29_999]
layer = ConvLayer("conv2", "pointwise", 30_000, 16, (1, 1), weight_key="conv2.weight")
Path("/proc/self/clear_refs").write_text("5")
base = kib("VmRSS")
stats = layer_weight_statistics(weight, layer)
print(json.dumps({"added_mib": (kib("VmHWM") - base) / 1024, "copies": stats.copies}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["copies"] >= 2 and measured["added_mib"] < 400, measured


def test_activation_maps_compute_only_the_filters_shown_and_refuse_beyond_the_budget(tmp_path: Path) -> None:
    from fl_core.firstlayer.whitening import activation_maps

    (tmp_path / "wide.safetensors").write_bytes(conv_file(12_000, 3))
    loaded = load_model(f"weights:{tmp_path / 'wide.safetensors'}")
    image = Image.open(io.BytesIO(textured_png(300, 200)))
    maps = activation_maps(loaded, image, "photo", count=16)
    assert maps.maps.shape == (16, 254, 382)
    with pytest.raises(AnalysisError, match=r"12,000 response maps .* over the 1\.0 GiB"):
        activation_maps(loaded, image, "photo")


@pytest.mark.slow
def test_registry_models_are_counted_before_they_are_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the meta device (timm's resnet18: 11.7 M parameters), or, where a network computes its widths with
    tensors (torchvision's RegNets), while it is built, stopping at the limit."""
    monkeypatch.setenv("FL_MAX_PARAMS", "3000000")
    with pytest.raises(ModelSpecError, match=r"timm:resnet18 has 12 million parameters, over the 3 million .*"
                                             "refused before building it. Pick a smaller architecture"):
        load_model("timm:resnet18")
    with pytest.raises(ModelSpecError, match=r"torchvision:regnet_y_400mf has more than 3 million parameters.*"
                                             "refused while building it"):
        load_model("torchvision:regnet_y_400mf")
    monkeypatch.setenv("FL_MAX_PARAMS", "50000000")
    assert load_model("torchvision:regnet_y_400mf").model is not None


def test_jpeg_scans_are_counted_from_the_markers_and_many_are_refused_before_decoding() -> None:
    photo = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8))
    baseline, progressive = io.BytesIO(), io.BytesIO()
    photo.save(baseline, "JPEG", comment=b"\xff\xda\xff\xda in a comment is no scan")
    photo.save(progressive, "JPEG", progressive=True)
    assert jpeg_scans(baseline.getvalue()) == 1 and jpeg_scans(progressive.getvalue()) == 10
    assert decode_rgb(io.BytesIO(progressive.getvalue())).size == (96, 64)
    hostile = many_scans_jpeg()
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"2,010 scans over 4,000×4,000 pixels.*Save it as a baseline"):
        decode_rgb(io.BytesIO(hostile), "scans.jpg")
    assert time.perf_counter() - start < 1.0


def test_a_stray_byte_between_segments_hides_no_scan() -> None:
    """libjpeg skips bytes between a segment and the next marker ("extraneous bytes before marker") and decodes the
    scans after them; the count skips them too (it stopped there, counting 1 scan of 2,010)."""
    hostile = many_scans_jpeg()
    first_scan = hostile.index(b"\xff\xda")
    table = hostile.index(b"\xff\xc4", first_scan)  # a Huffman table between two scans
    end = table + 2 + int.from_bytes(hostile[table + 2:table + 4], "big")
    hidden = hostile[:end] + b"\x00" + hostile[end:]
    assert jpeg_scans(hidden) == 2010
    with pytest.raises(DataError, match=r"2,010 scans over 4,000×4,000 pixels"):
        decode_rgb(io.BytesIO(hidden), "hidden.jpg")
    truncated = hostile[:first_scan + 40]  # a scan cut short: counted, no marker after it
    assert jpeg_scans(truncated) == 1


def test_every_number_of_every_settings_class_has_both_bounds() -> None:
    """So the command line, the widgets and the URL refuse the same values (a choice list bounds a number too)."""
    import dataclasses
    import importlib
    import pkgutil

    import fl_core
    from fl_core.settings import Settings, settings_fields

    classes = {}
    for module in pkgutil.walk_packages(fl_core.__path__, "fl_core."):
        if not module.name.endswith("__main__"):
            loaded = importlib.import_module(module.name)
            classes.update({name: value for name, value in vars(loaded).items() if isinstance(value, type)
                            and value.__module__ == module.name and dataclasses.is_dataclass(value)
                            and (issubclass(value, Settings) or name.endswith("Settings")) and value is not Settings})
    assert len(classes) >= 15 and all(issubclass(cls, Settings) for cls in classes.values()), sorted(classes)
    unbounded = [f"{name}.{field.name}" for name, cls in classes.items() for field in settings_fields(cls)
                 if (field.item if field.kind is tuple else field.kind) in (int, float) and field.choices is None
                 and (field.minimum is None or field.maximum is None)]
    assert not unbounded, unbounded


@pytest.mark.parametrize(("argv", "message"), [
    (["energy", "--model", "demo:tiny_vgg", "--seeds", "1000000"], "--seeds must be at least 1 and at most 1,000"),
    (["masterkeys", "--model", "demo:tiny_vgg", "--sweep", "2-100000000"], "--sweep takes at most 128 values"),
    (["energy", "--model", "demo:tiny_vgg", "--max-images", "0"], "--max-images must be at least 1"),
    (["energy", "--model", "demo:tiny_vgg", "--seeds", "x" * 5000], "invalid int value"),
])
def test_option_errors_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    from fl_core.cli import main

    with pytest.raises(SystemExit) as refused:
        main(argv)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1 and message in err and len(err) < 2100, err


def test_an_unexpected_error_is_one_line_with_exit_1(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import fl_core.io.inspect as command
    from fl_core.cli import main

    monkeypatch.setattr(command, "inspect_models", lambda models: 1 / 0)
    assert main(["inspect", "--model", "demo:tiny_vgg"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected ZeroDivisionError" in err and "FL_TRACEBACK=1" in err
    monkeypatch.setenv("FL_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        main(["inspect", "--model", "demo:tiny_vgg"])

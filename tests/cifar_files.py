"""CIFAR-10/100 folders in torchvision's format, written as the published files are: Python 2 pickles (protocol 2,
strings as byte strings, arrays by ``numpy.core.multiarray._reconstruct``), which torchvision reads with
``encoding="latin1"``."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

CIFAR10_FILES = ("cifar-10-batches-py", "batches.meta", "label_names", "labels", "test_batch",
                 tuple(f"data_batch_{i}" for i in range(1, 6)))
CIFAR100_FILES = ("cifar-100-python", "meta", "fine_label_names", "fine_labels", "test", ("train",))


def py2_pickle(value: object) -> bytes:
    """``value`` (dicts, lists, tuples, str, int, bool, None and uint8 arrays) as Python 2's cPickle wrote it at
    protocol 2."""
    return b"\x80\x02" + _opcodes(value) + b"."


def _opcodes(value: object) -> bytes:
    if value is None:
        return b"N"
    if isinstance(value, bool):
        return b"\x88" if value else b"\x89"
    if isinstance(value, int):
        return b"J" + struct.pack("<i", value)
    if isinstance(value, str | bytes):  # a Python 2 str: bytes
        raw = value.encode("latin1") if isinstance(value, str) else value
        return (b"U" + bytes([len(raw)]) if len(raw) < 256 else b"T" + struct.pack("<I", len(raw))) + raw
    if isinstance(value, tuple):
        return b"(" + b"".join(map(_opcodes, value)) + b"t"
    if isinstance(value, list):
        return b"](" + b"".join(map(_opcodes, value)) + b"e"
    if isinstance(value, dict):
        return b"}(" + b"".join(_opcodes(k) + _opcodes(v) for k, v in value.items()) + b"u"
    if isinstance(value, np.ndarray) and value.dtype == np.uint8:
        dtype = b"cnumpy\ndtype\n" + _opcodes(("u1", 0, 1)) + b"R" + _opcodes((3, "|", None, None, None, -1, -1, 0))
        state = b"(" + _opcodes(1) + _opcodes(tuple(value.shape)) + dtype + b"b" + _opcodes(False) + _opcodes(
            value.tobytes()) + b"t"
        return (b"cnumpy.core.multiarray\n_reconstruct\n" + b"(cnumpy\nndarray\n" + _opcodes((0,)) + _opcodes("b")
                + b"tR" + state + b"b")
    raise TypeError(f"not in a CIFAR file: {type(value).__name__}")


def cifar_rows(images: np.ndarray) -> np.ndarray:
    """uint8 (N, 32, 32, 3) images as CIFAR's rows: (N, 3072), the red, green and blue planes one after another."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), 3 * 32 * 32))


def write_cifar(root: Path, kind: str, classes: list[str], test: tuple[np.ndarray, list[int]],
                train: tuple[np.ndarray, list[int]] | None = None) -> Path:
    """A ``cifar10`` or ``cifar100`` folder under ``root`` as torchvision downloads it, ``test`` (images (N, 32, 32,
    3) uint8 and labels) its test split, ``train`` (default: the test images again) spread over its training
    files; returns the data set's folder."""
    folder_name, meta, names_key, labels_key, test_file, train_files = (CIFAR10_FILES if kind == "cifar10"
                                                                        else CIFAR100_FILES)
    folder = root / folder_name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / meta).write_bytes(py2_pickle({names_key: classes, "num_vis": 3072}))
    train = train or test
    parts = np.array_split(np.arange(len(train[1])), len(train_files))
    batches = {name: (train[0][part], [train[1][i] for i in part]) for name, part in zip(train_files, parts)}
    batches[test_file] = test
    for name, (images, labels) in batches.items():
        batch = {"batch_label": f"{name} of a test", labels_key: list(labels), "data": cifar_rows(images),
                 "filenames": [f"image_{i}.png" for i in range(len(labels))]}
        (folder / name).write_bytes(py2_pickle(batch))
    return folder

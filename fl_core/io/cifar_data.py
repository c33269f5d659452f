"""CIFAR-10 and CIFAR-100 in torchvision's own format (the image sources ``cifar10:PATH`` and ``cifar100:PATH``), read
without running the files' code.

torchvision's ``CIFAR10(root)`` and ``CIFAR100(root)`` keep the python version of the data sets (Krizhevsky 2009):
``cifar-10-batches-py/`` holds ``data_batch_1`` … ``data_batch_5`` (the training split, 50,000 images),
``test_batch`` (10,000) and ``batches.meta``; ``cifar-100-python/`` holds ``train`` (50,000), ``test`` (10,000) and
``meta``. Each file is a pickled dict: ``data`` a uint8 array (N, 3072), a row an image's red, green and blue 32×32
planes in row-major order; ``labels`` (CIFAR-10) or ``fine_labels`` (CIFAR-100) N class indices; the meta file's
``label_names`` / ``fine_label_names`` the class names in index order.

A pickle can run any code while it loads, and a path comes from a user, so these files never reach
:func:`pickle.load`. :class:`RestrictedUnpickler` resolves only the globals that numpy's array pickles name, each to
an inert stand-in that records its arguments (:class:`PickledArray`, :class:`PickledDtype`); the pixels are then made
from the recorded bytes (:func:`pixel_rows`) once their type, shape and size are checked. Any other global
(``os.system``, ``builtins.eval``, …) is refused with a :class:`~fl_core.errors.DataError` before it is called. Each
file is opened under the path policy (:func:`fl_core.io.paths.open_readable`), and one over :data:`MAX_FILE_BYTES` is
refused before it is read.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fl_core.errors import DataError
from fl_core.io.paths import check_readable, open_readable, shown_path
from fl_core.io.sources import CifarSource
from fl_core.settings import path_text_problem, printable

IMAGE_SIDE = 32
ROW_VALUES = 3 * IMAGE_SIDE * IMAGE_SIDE
MAX_FILE_BYTES = 200 * 2**20
"""Bytes of one file: CIFAR-100's ``train``, the largest (50,000 images), is 161 MB."""


@dataclass(frozen=True)
class CifarLayout:
    """How one of the data sets names its files and what their dicts hold (module docstring)."""

    title: str
    folder: str
    meta: str
    names_key: str
    labels_key: str
    test: tuple[str, ...]
    train: tuple[str, ...]
    n_classes: int

    def files(self, split: str) -> tuple[str, ...]:
        return self.train if split == "train" else self.test


LAYOUTS = {
    "cifar10": CifarLayout("CIFAR-10", "cifar-10-batches-py", "batches.meta", "label_names", "labels", ("test_batch",),
                           tuple(f"data_batch_{i}" for i in range(1, 6)), 10),
    "cifar100": CifarLayout("CIFAR-100", "cifar-100-python", "meta", "fine_label_names", "fine_labels", ("test",),
                            ("train",), 100),
}


# ------------------------------------------------------------------------------------------------ restricted pickles


class PickledDtype:
    """numpy's ``dtype(name, align, copy)`` as a pickle calls it, recorded; its state (byte order, flags) is ignored:
    only one-byte values (``u1``) are read."""

    name: object = None

    def __init__(self, name: object = None, align: object = False, copy: object = False) -> None:
        self.name = name

    def __setstate__(self, state: object) -> None:
        pass


class PickledArray:
    """An ndarray as a pickle rebuilds it, recorded: ``_reconstruct(ndarray, (0,), b'b')`` then ``__setstate__(
    (version, shape, dtype, is_fortran, raw))`` (protocols 0-4), or ``_frombuffer(raw, dtype, shape, order)``
    (protocol 5)."""

    shape: object = None
    dtype: object = None
    fortran: object = False
    raw: object = None

    def __setstate__(self, state: object) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise pickle.UnpicklingError("an array's state is not numpy's")
        self.shape, self.dtype, self.fortran, self.raw = state[-4:]


_NDARRAY = object()
"""What ``numpy.ndarray`` resolves to: the argument :func:`_reconstruct` takes, nothing a pickle can call."""


def _reconstruct(subtype: object, shape: object, dtype: object) -> PickledArray:
    if subtype is not _NDARRAY:
        raise pickle.UnpicklingError("an array of another type than numpy.ndarray")
    return PickledArray()


def _frombuffer(raw: object, dtype: object, shape: object, order: object) -> PickledArray:
    array = PickledArray()
    array.raw, array.dtype, array.shape, array.fortran = raw, dtype, shape, order == "F"
    return array


def _encode(text: object, encoding: object) -> bytes:
    """``_codecs.encode(text, 'latin1')``: how Python 3 pickles bytes at protocol 2 (no other codec)."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("an encoding other than latin1")
    return text.encode("latin1")


ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): PickledDtype,
    ("_codecs", "encode"): _encode,
}
"""The globals a CIFAR file names (numpy's array pickles under NumPy 1 and 2), each to its inert stand-in."""
UNPICKLING_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError, IndexError,
                     OverflowError, MemoryError)
"""What loading a malformed pickle raises (a stand-in's refusal, a truncated or corrupt stream)."""


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :data:`ALLOWED_GLOBALS` (persistent ids and out-of-band buffers are refused
    by :class:`pickle.Unpickler` itself when none are given)."""

    def find_class(self, module: str, name: str) -> object:
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"it names {printable(module)[:80]}.{printable(name)[:80]}, which no CIFAR "
                                         "file holds") from None


def load_restricted(path: Path) -> object:
    """The object pickled in the file at ``path`` (opened under the path policy), built by
    :class:`RestrictedUnpickler` with Python 2's strings read as latin1 (as torchvision reads them).

    Raises:
        DataError: the file is larger than :data:`MAX_FILE_BYTES`, or is not such a pickle (refused without
            calling anything it names).
    """
    try:
        opened = open_readable(path)
    except OSError as err:  # permissions, a file removed after the folder was listed
        raise DataError(f"{shown_path(path)} cannot be read ({err.strerror or err}).") from err
    with opened as file:
        if (size := os.fstat(file.fileno()).st_size) > MAX_FILE_BYTES:
            raise DataError(f"{shown_path(path)} is {size:,} bytes, over the {MAX_FILE_BYTES:,} of the largest CIFAR "
                            "file: refused before reading it. Give a CIFAR folder as torchvision downloads it.")
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise DataError(f"{shown_path(path)} grew past {MAX_FILE_BYTES:,} bytes while it was read: refused.")
    try:
        return RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except UNPICKLING_ERRORS as err:
        reason = printable(str(err))[:200]
        raise DataError(f"{shown_path(path)} is not a CIFAR file in torchvision's format ({reason}): refused without "
                        "running anything in it. Give the folder torchvision downloads CIFAR into.") from err


# ---------------------------------------------------------------------------------------------------- the data sets


@dataclass(frozen=True)
class CifarSplit:
    """What a CIFAR source holds.

    Attributes:
        rows: uint8 (N, 3072), each row an image's red, green and blue 32×32 planes (module docstring).
        labels: (N,) class indices.
        names: each image as ``file[row]`` (``test_batch[17]``).
        classes: the class names in index order, from the meta file.
        description: which data set, split and folder.
    """

    rows: np.ndarray
    labels: np.ndarray
    names: tuple[str, ...]
    classes: tuple[str, ...]
    description: str

    def pixels(self, index: Sequence[int]) -> np.ndarray:
        """The images at ``index`` as uint8 (K, 32, 32, 3): a transposed view of a copy of those rows only."""
        chosen = self.rows[np.asarray(index, dtype=np.int64)]
        return chosen.reshape(-1, 3, IMAGE_SIDE, IMAGE_SIDE).transpose(0, 2, 3, 1)


def read_cifar(source: CifarSource) -> CifarSplit:
    """The images, labels and classes of a CIFAR source: a folder's split (``test`` unless the source names
    ``train``), or one batch file.

    Raises:
        DataError: the path is refused by the path policy, holds no such data set, a file is missing, too large, not
            a restricted pickle (:func:`load_restricted`) or not laid out as torchvision's (the message says which).
    """
    layout = LAYOUTS[source.kind]
    files, meta, what = _files(source, layout)
    classes = _class_names(load_restricted(meta), meta, layout)
    rows, labels, names = [], [], []
    for file in files:
        data, targets = _batch(load_restricted(file), file, layout)
        rows.append(data)
        labels.append(targets)
        names += [printable(f"{file.name}[{row}]") for row in range(len(data))]
    if not names:
        raise DataError(f"{what} in {shown_path(source.path)} holds no images.")
    return CifarSplit(np.concatenate(rows), np.concatenate(labels), tuple(names), classes,
                      printable(f"{what} in {source.path}"))


def _files(source: CifarSource, layout: CifarLayout) -> tuple[list[Path], Path, str]:
    """The batch files and the meta file a source reads, and what they are (``the CIFAR-10 test split``)."""
    if problem := path_text_problem(source.path) if source.path else "it is empty":
        raise DataError(f"The CIFAR path '{printable(source.path[:60])}' cannot be used: {problem}. Give "
                        f"{source.kind}:PATH, PATH the folder torchvision downloads {layout.title} into.")
    root = check_readable(source.path)
    if root.is_file():
        if source.split:
            raise DataError(f"{source.kind}:{shown_path(root)}@{source.split} names one batch file, which is its own "
                            f"split: leave out @{source.split}, or name the {layout.folder} folder.")
        folder, files, what = root.parent, [root], f"{layout.title} file {root.name}"
    else:
        folder = root / layout.folder if (root / layout.folder).is_dir() else root
        split = source.split or "test"
        files, what = [folder / name for name in layout.files(split)], f"the {layout.title} {split} split"
    if missing := [path.name for path in (folder / layout.meta, *files) if not path.is_file()]:
        hint = next((f" (it holds {kind}'s files: use {kind}:PATH)" for kind, found in LAYOUTS.items()
                     if found != layout and ((root / found.folder).is_dir() or (folder / found.meta).is_file())), "")
        raise DataError(f"{shown_path(root)} is not {layout.title} in torchvision's format{hint}: "
                        f"{', '.join(missing)} missing in {shown_path(folder)}. Give the folder torchvision downloads "
                        f"{layout.title} into, its {layout.folder} folder, or one of its batch files.")
    return files, folder / layout.meta, what


def _entry(content: object, key: str, file: Path, layout: CifarLayout) -> object:
    """``content[key]`` of a file's dict (keys as Python 2 and 3 strings, or as bytes where a copy was re-pickled
    from bytes keys)."""
    if isinstance(content, dict):
        for candidate in (key, key.encode()):
            if candidate in content:
                return content[candidate]
    raise DataError(f"{shown_path(file)} holds no '{key}': it is not a {layout.title} file in torchvision's format.")


def _class_names(content: object, file: Path, layout: CifarLayout) -> tuple[str, ...]:
    names = _entry(content, layout.names_key, file, layout)
    if not isinstance(names, list | tuple) or len(names) != layout.n_classes or not all(
            isinstance(name, str | bytes) for name in names):
        raise DataError(f"{shown_path(file)}'s '{layout.names_key}' is not {layout.n_classes} class names: it is not "
                        f"the {layout.title} meta file.")
    return tuple(printable(name.decode("utf-8", "replace") if isinstance(name, bytes) else name) for name in names)


def _batch(content: object, file: Path, layout: CifarLayout) -> tuple[np.ndarray, np.ndarray]:
    """A batch file's pixel rows (:func:`pixel_rows`) and labels (integers of ``[0, n_classes)``, one per row)."""
    rows = pixel_rows(_entry(content, "data", file, layout), file)
    labels = _entry(content, layout.labels_key, file, layout)
    if not isinstance(labels, list | tuple) or len(labels) != len(rows) or not all(
            type(label) is int and 0 <= label < layout.n_classes for label in labels):
        raise DataError(f"{shown_path(file)}'s '{layout.labels_key}' is not {len(rows):,} class indices from 0 to "
                        f"{layout.n_classes - 1}: it is not a {layout.title} batch file.")
    return rows, np.asarray(labels, dtype=np.int64)


def pixel_rows(value: object, file: Path) -> np.ndarray:
    """The uint8 (N, 3072) array a :class:`PickledArray` records, made from its bytes once its dtype (``u1``), shape
    and size are checked.

    Raises:
        DataError: anything else.
    """
    raw = value.raw if isinstance(value, PickledArray) else None
    raw = raw.encode("latin1") if isinstance(raw, str) else raw  # Python 2's str, read as latin1
    dtype = value.dtype.name if isinstance(value, PickledArray) and isinstance(value.dtype, PickledDtype) else None
    shape = value.shape if isinstance(value, PickledArray) else None
    if (dtype not in ("u1", b"u1") or not isinstance(raw, bytes | bytearray) or not isinstance(shape, tuple)
            or len(shape) != 2 or not all(type(n) is int for n in shape) or shape[1] != ROW_VALUES
            or len(raw) != shape[0] * ROW_VALUES):
        raise DataError(f"{shown_path(file)}'s 'data' is not a uint8 array of {ROW_VALUES:,}-value rows (32×32 red, "
                        "green and blue planes): it is not a CIFAR batch file in torchvision's format.")
    return np.frombuffer(raw, np.uint8).reshape(shape, order="F" if value.fortran is True else "C")

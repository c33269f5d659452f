"""Results saved to one file and loaded back without pickle: ``result.save(path)``, :func:`load_result`.

The file is a zip archive holding ``result.json`` (the result's dataclass tree: every field, the private ones that
only figures use included) and one ``.npy`` file per array (``arrays/<n>.npy``, read with ``allow_pickle=False``).
In the JSON a value that plain JSON cannot hold is an object with a ``"$type"`` key:

* ``dataclass`` — ``{"class": "fl_core.module:Name", "fields": {...}}``; only dataclasses defined in ``fl_core`` are
  rebuilt, by their constructor, so loading a file runs no code but the library's own;
* ``array`` / ``tensor`` — ``{"file": "arrays/<n>.npy"}`` (tensors with ``dtype`` when numpy has no such type);
* ``frame`` — a pandas DataFrame: ``columns``, ``index`` (``null``: 0..n-1) and one value per column;
* ``tuple``, ``dict`` (keys that are not strings), ``float`` (NaN, ±inf), ``scalar`` (a numpy scalar), ``path``.

Every declared size is bounded before anything is allocated: the members (:data:`MAX_MEMBERS`, :data:`MAX_JSON_BYTES`,
:data:`MAX_ARRAY_BYTES`), each array's header against its member (shape × item size must be what the member holds), and
each scalar's type (numbers, booleans, dates and text only: a ``V8`` "scalar" of 10⁹ would ask numpy for a gigabyte).
The file is opened under the path policy, checked on the file actually opened, and only a regular file is read
(:func:`fl_core.io.paths.open_readable`); only a :class:`~fl_core.results.Result` comes back. Everything refused raises
:class:`~fl_core.errors.DataError`.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fl_core.errors import ArgumentError, DataError
from fl_core.io.paths import file_to_write, open_readable
from fl_core.results import Result

FORMAT = "filterlens-result"
VERSION = 1
JSON_MEMBER = "result.json"
MAX_MEMBERS = 100_000
"""Arrays in one file."""
MAX_JSON_BYTES = 64 << 20
"""Size of the JSON member once decompressed (parsed, its Python objects take several times as much)."""
MAX_ARRAY_BYTES = 1 << 30
"""Size of all arrays together once decompressed, as their members and their headers declare it."""
SCALAR_KINDS = "biufcmMUS"
"""numpy scalar kinds a file may hold: booleans, integers, floats, complex numbers, times, text (never ``V``oid or
``O``bject types, whose size or contents the file would choose; text scalars are as long as their JSON string)."""
MAX_SCALAR_BYTES = 32
"""Item size of a number or time scalar (complex256 is the widest)."""
_TORCH_ONLY = {torch.bfloat16: torch.float32}
"""Tensor types numpy cannot hold, saved as the type beside them and cast back on loading."""


class _Writer:
    """Encodes a value as JSON, collecting its arrays."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []

    def array(self, values: np.ndarray, **extra: Any) -> dict:
        if values.dtype.hasobject:
            raise TypeError("an array of Python objects cannot be saved without pickle")
        self.arrays.append(values)
        return {"$type": extra.pop("kind", "array"), "file": f"arrays/{len(self.arrays) - 1}.npy", **extra}

    def encode(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float) and not isinstance(value, np.floating):
            return value if math.isfinite(value) else {"$type": "float", "value": repr(value)}
        if isinstance(value, np.generic):
            return {"$type": "scalar", "dtype": value.dtype.str, "value": self.encode(value.item())}
        if isinstance(value, np.ndarray):
            return self.array(value)
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu()
            stored = _TORCH_ONLY.get(tensor.dtype)
            if stored is None:
                return self.array(tensor.numpy(), kind="tensor")
            return self.array(tensor.to(stored).numpy(), kind="tensor", dtype=str(tensor.dtype).removeprefix("torch."))
        if isinstance(value, pd.DataFrame):
            return self.frame(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {"$type": "dataclass", "class": f"{type(value).__module__}:{type(value).__qualname__}",
                    "fields": {f.name: self.encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
        if isinstance(value, tuple):
            return {"$type": "tuple", "items": [self.encode(v) for v in value]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value) and "$type" not in value:
                return {k: self.encode(v) for k, v in value.items()}
            return {"$type": "dict", "items": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if isinstance(value, Path):
            return {"$type": "path", "value": str(value)}
        raise TypeError(f"a {type(value).__name__} cannot be saved in a result file")

    def frame(self, frame: pd.DataFrame) -> dict:
        index = frame.index
        plain = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
        columns = [frame.iloc[:, i] for i in range(frame.shape[1])]
        data = [self.encode(c.to_numpy() if c.dtype.kind in "biufcmM" else c.tolist()) for c in columns]
        return {"$type": "frame", "columns": self.encode(list(frame.columns)), "data": data,
                "index": None if plain else self.encode(index.tolist())}


class _Reader:
    """Decodes the JSON of :class:`_Writer`, reading arrays from the archive on demand."""

    def __init__(self, archive: zipfile.ZipFile, name: str) -> None:
        self.archive, self.name = archive, name
        self.array_bytes = 0

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        kind = value.get("$type")
        if kind is None:
            return {k: self.decode(v) for k, v in value.items()}
        decode = getattr(self, f"_{kind}", None)
        if decode is None:
            raise DataError(f"{self.name} holds a value of unknown type {str(kind)[:40]!r}: it was written by a newer "
                            "FilterLens, or it is not a FilterLens result file.")
        return decode(value)

    def _array(self, value: dict) -> np.ndarray:
        """The ``.npy`` member, its header's shape × item size checked against the member's size (and the declared
        total of every array against :data:`MAX_ARRAY_BYTES`) before the array is allocated."""
        info = self.archive.getinfo(value["file"])
        with self.archive.open(info) as handle:
            read_header = (np.lib.format.read_array_header_1_0 if np.lib.format.read_magic(handle) == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(handle)
            size = math.prod(shape) * dtype.itemsize
            if dtype.hasobject or size != info.file_size - handle.tell():
                raise DataError(f"{self.name}: {info.filename} claims {size:,} bytes of values, but its member holds "
                                f"{info.file_size - handle.tell():,}: refused before reading it.")
        self.array_bytes += size
        if self.array_bytes > MAX_ARRAY_BYTES:
            raise DataError(f"{self.name}'s arrays declare over {MAX_ARRAY_BYTES:,} bytes: refused before reading "
                            "them.")
        with self.archive.open(info) as handle:
            return np.lib.format.read_array(handle, allow_pickle=False)

    def _tensor(self, value: dict) -> torch.Tensor:
        tensor = torch.from_numpy(self._array(value))
        return tensor.to(getattr(torch, value["dtype"])) if "dtype" in value else tensor

    def _frame(self, value: dict) -> pd.DataFrame:
        columns = self.decode(value["columns"])
        frame = pd.DataFrame({i: self.decode(data) for i, data in enumerate(value["data"])})
        frame.columns = pd.Index(columns) if columns else frame.columns
        if value["index"] is not None:
            frame.index = self.decode(value["index"])
        return frame

    def _dataclass(self, value: dict) -> Any:
        cls = result_class(value["class"], self.name)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {name: self.decode(v) for name, v in value["fields"].items() if name in fields}
        made = cls(**{name: v for name, v in values.items() if fields[name].init})
        for name, v in values.items():
            if not fields[name].init:
                object.__setattr__(made, name, v)
        return made

    def _tuple(self, value: dict) -> tuple:
        return tuple(self.decode(v) for v in value["items"])

    def _dict(self, value: dict) -> dict:
        return {_hashable(self.decode(k)): self.decode(v) for k, v in value["items"]}

    def _float(self, value: dict) -> float:
        return float(value["value"])

    def _scalar(self, value: dict) -> np.generic:
        """A numpy scalar of a :data:`SCALAR_KINDS` type from its JSON value (a number, a boolean or text)."""
        dtype, item = np.dtype(value["dtype"]), self.decode(value["value"])
        if (dtype.kind not in SCALAR_KINDS or (dtype.kind not in "US" and dtype.itemsize > MAX_SCALAR_BYTES)
                or not isinstance(item, bool | int | float | str)):
            raise DataError(f"{self.name} holds a scalar of type {str(value['dtype'])[:40]!r}: refused (a result's "
                            "scalars are numbers, booleans, times or text).")
        return dtype.type(item)

    def _path(self, value: dict) -> Path:
        return Path(value["value"])


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def result_class(name: str, source: str) -> type:
    """The dataclass ``"fl_core.module:Name"``; classes outside ``fl_core`` are refused."""
    module, _, qualname = str(name).partition(":")
    if module.split(".")[0] != "fl_core" or not qualname:
        raise DataError(f"{source} names the class {str(name)[:80]!r}, which is not a FilterLens class: refused.")
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as err:
        raise DataError(f"{source} names the class {name!r}, which this FilterLens does not have: it was written by "
                        "another version.") from err
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise DataError(f"{source} names {name!r}, which is not a result or settings class: refused.")
    return cls


def save_result(result: Any, path: str | Path) -> Path:
    """Write ``result`` (any FilterLens result) to ``path`` as one zip file of JSON and ``.npy`` arrays (module
    docstring), where the path policy lets the library write, its folder created
    (:func:`fl_core.io.paths.file_to_write`); returns the path."""
    if not isinstance(result, Result) or not dataclasses.is_dataclass(result):
        raise ArgumentError(f"save_result saves a FilterLens result, not a {type(result).__name__}.")
    path = file_to_write(path)
    writer = _Writer()
    tree = writer.encode(result)
    header = {"format": FORMAT, "version": VERSION, "class": tree["class"], "result": tree}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(JSON_MEMBER, json.dumps(header, allow_nan=False))
        for index, values in enumerate(writer.arrays):
            buffer = io.BytesIO()
            np.save(buffer, values, allow_pickle=False)
            archive.writestr(f"arrays/{index}.npy", buffer.getvalue())
    return path


def load_result(path: str | Path, cls: type | None = None) -> Any:
    """The result saved at ``path`` by :func:`save_result` (``result.save(path)``), rebuilt as its class, figures'
    arrays included; with ``cls``, it must be one.

    Args:
        path: the file ``result.save(path)`` wrote (read under the path policy: :mod:`fl_core.io.paths`).
        cls: the result class it must hold (``None``: any FilterLens result).

    Raises:
        DataError: the file is not a FilterLens result, too large, of another class than ``cls``, or outside the
            folders users may read.
    """
    name = str(path)
    try:
        with open_readable(path) as file, zipfile.ZipFile(file) as archive:
            check_members(archive, name)
            header = json.loads(archive.read(JSON_MEMBER))
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise DataError(f"{name} is not a FilterLens result file (save one with result.save(path)).")
            if header.get("version") != VERSION:
                raise DataError(f"{name} is a FilterLens result of format version {header.get('version')!r}; this "
                                f"FilterLens reads version {VERSION}.")
            tree = header.get("result")
            found = result_class(tree.get("class"), name) if isinstance(tree, dict) and tree.get(
                "$type") == "dataclass" else None
            if found is None or not issubclass(found, Result):
                raise DataError(f"{name} holds {'a ' + found.__name__ if found else 'a value'}, not a FilterLens "
                                "result: refused (load_result reads what result.save(path) wrote).")
            if cls is not None and not issubclass(found, cls):
                raise DataError(f"{name} holds a {tree['class']}, not a {cls.__name__}: load it with "
                                "fl_core.load_result(path).")
            return _Reader(archive, name).decode(tree)
    except FileNotFoundError as err:
        raise ArgumentError(f"No file at {name}: give the path a result was saved to with result.save(path).") from err
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, TypeError, OverflowError, RecursionError) as err:
        raise DataError(f"{name} is not a readable FilterLens result file ({err}).") from err


def check_members(archive: zipfile.ZipFile, name: str) -> None:
    """Refuse, before reading any member, an archive with too many members or more bytes than the limits."""
    members = archive.infolist()
    if len(members) > MAX_MEMBERS + 1:
        raise DataError(f"{name} holds {len(members):,} members, over the {MAX_MEMBERS:,} a result file may hold.")
    json_bytes = sum(m.file_size for m in members if m.filename == JSON_MEMBER)
    if json_bytes > MAX_JSON_BYTES:
        raise DataError(f"{name}'s {JSON_MEMBER} unpacks to {json_bytes:,} bytes, over {MAX_JSON_BYTES:,}.")
    array_bytes = sum(m.file_size for m in members if m.filename != JSON_MEMBER)
    if array_bytes > MAX_ARRAY_BYTES:
        raise DataError(f"{name}'s arrays unpack to {array_bytes:,} bytes, over {MAX_ARRAY_BYTES:,}.")

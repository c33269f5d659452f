"""Bounded reading of the two checkpoint containers, before any parser allocates for what the file claims.

* safetensors: the 8-byte header length and the JSON header (at most :data:`MAX_SAFETENSORS_HEADER_BYTES`, at most
  :data:`MAX_TENSORS` entries) are checked before the safetensors library parses them; tensors are read with
  ``pread`` (no memory map tying them to the file).
* torch zip archives: the central directory is counted from the end record (and its zip64 form) before
  :mod:`zipfile` builds one object per record (at most :data:`MAX_ZIP_RECORDS`); records must be stored
  uncompressed, add up within the file, and ``data.pkl`` stay within :data:`MAX_PICKLE_BYTES`.
* legacy (pre-zip) torch files and bare pickles: their opcodes are walked, without running them, within the first
  :data:`MAX_PICKLE_BYTES`.
* then ``torch.load(..., weights_only=True)``, never a fallback to full unpickling.

Every refusal is a :class:`~fl_core.errors.CheckpointError` whose one-line message says what to do.
"""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
import pickletools
import struct
import zipfile
from pathlib import Path
from typing import BinaryIO

import torch

from fl_core.errors import CheckpointError

MAX_TENSORS = 10_000
"""Entries in one state dict: over 5× the largest timm CNN's (nasnetalarge: 1,810 with its BatchNorm buffers)."""
MAX_PICKLE_BYTES = 2 * 2**20
"""The pickled part of a torch file. Real ones take ~110 bytes per tensor (nasnetalarge: 229 KB); PyTorch's
weights-only unpickler runs in Python at about a microsecond per opcode, so this bounds it to a few seconds."""
MAX_ZIP_RECORDS = MAX_TENSORS + 16
"""Records of a torch zip archive: one per storage, plus data.pkl, version, byteorder and a few more."""
MAX_ZIP_DIRECTORY_ENTRY_BYTES = 46 + 1024
"""One central-directory entry: the fixed 46 bytes plus a name, extra field and comment of up to 1 KiB."""
MAX_SAFETENSORS_HEADER_BYTES = 4 * 2**20
"""A safetensors JSON header: ~100 bytes per tensor, so room for MAX_TENSORS entries with long names and metadata."""
LEGACY_PICKLES = 5
"""A legacy (pre-zip) torch file starts with five pickles: magic number, protocol, system info, object, storage keys."""
ZIP_END = struct.Struct("<4s4H2LH")
"""End of central directory: signature, disk numbers (2), entries on this disk, entries, directory size and offset,
comment length."""
ZIP64_LOCATOR = struct.Struct("<4sLQL")
"""Zip64 end locator (just before the end record): signature, disk, zip64 end record offset, disk count."""
ZIP64_END = struct.Struct("<4sQ2H2L4Q")
"""Zip64 end record: signature, record size, versions (2), disk numbers (2), entries on this disk, entries,
directory size, directory offset."""
ZIP_DIRECTORY_ENTRY = struct.Struct("<4s4B4HL2L5H2L")
"""One central-directory entry (46 bytes); fields 12-14 are the name, extra field and comment lengths."""




def read_checkpoint_file(path: Path) -> object:
    """The object a checkpoint file holds (safetensors: its tensors; torch: what ``torch.save`` wrote), read within
    the bounds of the module docstring; the type is sniffed from the content, not the suffix."""
    return _read_safetensors(path) if _is_safetensors(path) else _read_torch_file(path)


def _is_safetensors(path: Path) -> bool:
    """Sniff the content, not the suffix: an 8-byte little-endian header length followed by ``{``."""
    with open(path, "rb") as handle:
        head = handle.read(9)
    if len(head) < 9 or head[8:9] != b"{":
        if path.suffix.lower() == ".safetensors":
            raise CheckpointError(f"{path.name} is not a valid safetensors file (its header is missing or corrupt). "
                                  "Re-save it with safetensors.torch.save_file.")
        return False
    (header_len,) = struct.unpack("<Q", head[:8])
    if header_len > path.stat().st_size - 8:
        raise CheckpointError(f"{path.name}: the safetensors header claims {header_len} bytes, more than the file "
                              "holds; the file is truncated or corrupt. Upload it again.")
    return True


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors, read with ``pread`` into memory of their own (one copy of the file; a memory map would tie them
    to a file that may change or vanish), after :func:`_check_safetensors_header`."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    _check_safetensors_header(path)
    try:
        return load_file(str(path), device="cpu", backend="pread")
    except (SafetensorError, ValueError, OSError, RuntimeError) as err:
        raise CheckpointError(f"{path.name}: corrupt safetensors file ({err}). Upload it again or re-save it.") from err


def _check_safetensors_header(path: Path) -> None:
    """Refuse a header over :data:`MAX_SAFETENSORS_HEADER_BYTES` or with more than :data:`MAX_TENSORS` entries,
    read before the safetensors library parses it and allocates one tensor per entry."""
    with open(path, "rb") as handle:
        (header_len,) = struct.unpack("<Q", handle.read(8))
        if header_len > MAX_SAFETENSORS_HEADER_BYTES:
            raise CheckpointError(f"{path.name}: the safetensors header is {header_len / 2**20:.1f} MiB, over the "
                                  f"{MAX_SAFETENSORS_HEADER_BYTES / 2**20:.0f} MiB limit (a state dict of at most "
                                  f"{MAX_TENSORS:,} tensors needs far less); refused. Save only the model's weights.")
        header = handle.read(header_len)
    try:
        entries = json.loads(header)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise CheckpointError(f"{path.name}: corrupt safetensors file (its header is not JSON: {err}). Upload it "
                              "again or re-save it.") from err
    if isinstance(entries, dict):
        check_tensor_count(len(entries) - ("__metadata__" in entries), path.name, "tensor entries")


def check_tensor_count(count: int, name: str, what: str = "tensors") -> None:
    if count > MAX_TENSORS:
        raise CheckpointError(f"{name} holds {count:,} {what}, over the limit of {MAX_TENSORS:,} tensors (the largest "
                              "CNNs have about 2,000); refused. Save only the model's state dict (model.state_dict()).")


def _read_torch_file(path: Path) -> object:
    if zipfile.is_zipfile(path):
        _check_zip_archive(path)
    else:
        _check_legacy_pickles(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=False)
    except pickle.UnpicklingError as err:
        if "unsupported global" not in str(err).lower():  # a malformed stream, not a forbidden object
            raise _unreadable(path, err) from err
        raise CheckpointError(
            f"{path.name} was refused: it contains Python objects other than tensors and plain containers, and "
            "loading it would run code from the file. FilterLens never does that. Re-save only the weights: "
            "torch.save(model.state_dict(), 'weights.pt') or safetensors."
        ) from err
    except (EOFError, RuntimeError, ValueError, OSError, struct.error, zipfile.BadZipFile, KeyError,
            AttributeError, IndexError, TypeError, UnicodeDecodeError, MemoryError) as err:
        raise _unreadable(path, err) from err


def _unreadable(path: Path, err: Exception) -> CheckpointError:
    return CheckpointError(f"{path.name} could not be read as a PyTorch checkpoint: the file is damaged, truncated "
                           f"or not a checkpoint ({type(err).__name__}). Upload it again.")


def _pickle_too_large(name: str) -> CheckpointError:
    return CheckpointError(f"{name}: its pickled part is over the {MAX_PICKLE_BYTES / 2**20:.0f} MiB limit (a state "
                           f"dict of {MAX_TENSORS:,} tensors needs about 1 MiB); refused. Save only the model's "
                           "weights (torch.save(model.state_dict(), ...)) or use safetensors.")


def _check_legacy_pickles(path: Path) -> None:
    """A file that is not a zip archive is a legacy torch file or a bare pickle: walk its opcodes (without running
    them) and refuse it unless its :data:`LEGACY_PICKLES` pickles end within the first :data:`MAX_PICKLE_BYTES`."""
    with open(path, "rb") as handle:
        head = io.BytesIO(handle.read(MAX_PICKLE_BYTES + 1))
    size = len(head.getbuffer())
    for _ in range(LEGACY_PICKLES):
        if head.tell() == size:  # a bare pickle: fewer pickles, and the file ends after them
            break
        try:
            collections.deque(pickletools.genops(head), maxlen=0)
        except ValueError as err:
            if size > MAX_PICKLE_BYTES and head.tell() >= size:
                raise _pickle_too_large(path.name) from err
            raise _unreadable(path, err) from err
    if head.tell() > MAX_PICKLE_BYTES:
        raise _pickle_too_large(path.name)


def _check_zip_archive(path: Path) -> None:
    """Refuse zip archives that are not PyTorch checkpoints or whose records are unsafe to open: too many records
    (:func:`_check_zip_directory`), records outside the archive, compressed records (PyTorch stores every record
    uncompressed; torch would inflate a compressed one in memory), stored sizes that do not add up within the file,
    a ``data.pkl`` over :data:`MAX_PICKLE_BYTES`, and records whose checksum fails."""
    _check_zip_directory(path)
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            names = [m.filename for m in members]
            if not any(n.endswith("data.pkl") for n in names):
                raise CheckpointError(f"{path.name} is a zip archive but not a PyTorch checkpoint (no data.pkl). "
                                      "Upload the .pt/.pth file itself, not an archive of it.")
            if any(n.startswith("/") or ".." in n.split("/") for n in names):
                raise CheckpointError(f"{path.name}: the archive has member paths outside the archive; refused. "
                                      "Upload the file torch.save wrote, unmodified.")
            _check_stored_records(members, size, path.name)
            bad = archive.testzip()
            if bad is not None:
                raise CheckpointError(f"{path.name}: archive member {bad} is corrupt. Upload the file again.")
    except zipfile.BadZipFile as err:
        raise CheckpointError(f"{path.name}: damaged zip archive ({err}). Upload the file again.") from err


def _check_stored_records(members: list[zipfile.ZipInfo], size: int, name: str) -> None:
    """Every record stored uncompressed, its stored and unpacked sizes equal, all of them within the file."""
    compressed = next((m for m in members if m.compress_type != zipfile.ZIP_STORED), None)
    if compressed is not None:
        raise CheckpointError(f"{name}: archive member {compressed.filename} is compressed ("
                              f"{compressed.compress_size / 2**20:.1f} MiB that unpacks to "
                              f"{compressed.file_size / 2**20:.0f} MiB); PyTorch never compresses checkpoint records, "
                              "so the file was repacked or crafted. Upload the file torch.save wrote.")
    stored = sum(m.compress_size for m in members)
    if any(m.file_size != m.compress_size for m in members) or stored > size:
        raise CheckpointError(f"{name}: the archive's records claim {stored / 2**20:.0f} MiB in a "
                              f"{size / 2**20:.1f} MiB file; the archive is corrupt or crafted. Upload the file "
                              "torch.save wrote.")
    pickled = max(m.file_size for m in members if m.filename.endswith("data.pkl"))
    if pickled > MAX_PICKLE_BYTES:
        raise _pickle_too_large(name)


def _check_zip_directory(path: Path) -> None:
    """Refuse more than :data:`MAX_ZIP_RECORDS` central-directory entries, or a directory that disagrees with its end
    record, before :class:`zipfile.ZipFile` builds one object per entry (:func:`zip_entry_count`)."""
    try:
        with open(path, "rb") as handle:
            entries = zip_entry_count(handle, MAX_ZIP_RECORDS)
    except zipfile.BadZipFile as err:
        raise CheckpointError(f"{path.name}: damaged zip archive ({err}). Upload the file torch.save wrote.") from err
    if entries > MAX_ZIP_RECORDS:
        check_tensor_count(entries, path.name, "archive records")


def zip_entry_count(handle: BinaryIO, limit: int) -> int:
    """The central-directory entries of a zip archive, counted from its end record (and its zip64 form) as
    :mod:`zipfile` will find them, without building an object per entry. Over ``limit``: that count, the directory
    unread. Otherwise the directory is walked and must hold exactly that many entries.

    Raises:
        zipfile.BadZipFile: no end record, or a directory that disagrees with it (the reason in words).
    """
    size = handle.seek(0, os.SEEK_END)
    tail_start = max(0, size - ZIP_END.size - 0xFFFF - ZIP64_LOCATOR.size - ZIP64_END.size)
    handle.seek(tail_start)
    tail = handle.read()
    end = tail.rfind(b"PK\x05\x06")
    if end < 0 or len(tail) - end < ZIP_END.size:
        raise zipfile.BadZipFile("no end of central directory")
    _, _, _, _, entries, directory_size, directory_offset, _ = ZIP_END.unpack_from(tail, end)
    directory_end = tail_start + end
    locator = end - ZIP64_LOCATOR.size
    record = locator - ZIP64_END.size
    if record >= 0 and tail[locator:locator + 4] == b"PK\x06\x07" and tail[record:record + 4] == b"PK\x06\x06":
        _, _, _, _, _, _, _, entries, directory_size, directory_offset = ZIP64_END.unpack_from(tail, record)
        directory_end = tail_start + record
    if entries > limit:
        return entries
    if (directory_size > entries * MAX_ZIP_DIRECTORY_ENTRY_BYTES
            or directory_offset != directory_end - directory_size or directory_offset < 0):
        raise zipfile.BadZipFile("its central directory does not match its end record")
    handle.seek(directory_offset)
    if _count_directory_entries(handle.read(directory_size), entries) != entries:
        raise zipfile.BadZipFile(f"its central directory does not hold the {entries:,} entries its end record says")
    return entries


def _count_directory_entries(directory: bytes, expected: int) -> int:
    """Entries in a central directory, walking at most ``expected + 1`` of them; -1 when the bytes do not parse."""
    position = count = 0
    while position < len(directory) and count <= expected:
        if len(directory) - position < ZIP_DIRECTORY_ENTRY.size or directory[position:position + 4] != b"PK\x01\x02":
            return -1
        fields = ZIP_DIRECTORY_ENTRY.unpack_from(directory, position)
        position += ZIP_DIRECTORY_ENTRY.size + fields[12] + fields[13] + fields[14]
        count += 1
    return count

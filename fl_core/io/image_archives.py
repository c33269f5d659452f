"""Labelled image sets uploaded as files: one archive (.zip, .tar, .tar.gz) of an ImageFolder tree
(``<class>/<image>``, optionally inside one top folder), or images with a CSV of labels (uploaded beside them, or as
``labels.csv`` in an archive of flat images). :func:`save_labelled_set` writes them as an ImageFolder tree of PNGs.

Uploads are untrusted. Every limit is checked before the bytes it guards are unpacked, written or decoded:

* **Containers.** A zip's central directory is counted from its end record before :mod:`zipfile` builds an object
  per entry (:func:`fl_core.io.archives.zip_entry_count`); its members must be stored or deflated (no codec that
  unpacks a chunk without bound), unencrypted, and their compressed sizes must add up within the file (no members
  sharing compressed data). A tar's headers are walked and checksummed before :mod:`tarfile` parses them
  (:func:`_walk_tar_headers`): member count, declared sizes, and extended-header records (which tarfile reads into
  memory whole) at most :data:`MAX_TAR_META_BYTES`. A gzip stream is counted as it inflates and stopped past
  :data:`MAX_TOTAL_BYTES` or :data:`MAX_RATIO` times the compressed bytes read (:class:`_BoundedInflate`).
* **Members.** At most :data:`MAX_MEMBERS`; each at most :data:`MAX_MEMBER_BYTES` unpacked and :data:`MAX_RATIO`
  times its compressed size, all together at most :data:`MAX_TOTAL_BYTES`; names relative, without ``..``,
  backslashes, drive letters or control characters; regular files and folders only (links, devices and sparse files
  refused); no name twice. Images (by suffix) and one labels CSV are used, system litter (``__MACOSX/``, dot files,
  ``Thumbs.db``) is skipped, anything else (nested archives included) refused.
* **Content.** Zip members are read through :mod:`zipfile`, which stops at the declared size and checks the CRC;
  every image is decoded by :func:`fl_core.io.images.decode_rgb` (pixel, aspect and scan limits) and written as PNG,
  so no uploaded byte is stored as it came.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from fl_core.errors import DataError
from fl_core.io.archives import zip_entry_count
from fl_core.io.images import IMAGE_SUFFIXES, decode_rgb
from fl_core.settings import printable

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
MAX_MEMBERS = 20_000
"""Members of one upload (images, folders, the CSV): 20 images of each ImageNet class."""
MAX_MEMBER_BYTES = 64 * 2**20
MAX_TOTAL_BYTES = 2 * 2**30
MAX_RATIO = 100
"""Unpacked / compressed bytes: images are compressed already (JPEG, PNG: about 1:1; even a BMP of a photo about
3:1), and zip bombs reach 1000:1 and more."""
RATIO_FLOOR_BYTES = 64 * 2**10
"""Below this many compressed bytes, :data:`MAX_RATIO` applies to this many (tiny members and headers inflate more)."""
MAX_TAR_META_BYTES = 64 * 2**10
"""A tar's extended-header records (pax, GNU long names): a long name needs well under 1 KiB."""
MAX_LABELS_BYTES = 4 * 2**20
MAX_NAME_CHARS = 255
MAX_CLASS_CHARS = 200
STORED_STEM_CHARS = 60
LITTER_FOLDERS = ("__MACOSX",)
LITTER_FILES = ("thumbs.db", "desktop.ini")
ARCHIVE_LIKE_SUFFIXES = (".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".rar", ".lz", ".lzma", ".z")
FILE_COLUMNS = ("file", "filename", "file_name", "image", "path", "name")
LABEL_COLUMNS = ("label", "class", "wnid", "category", "target")
TAR_BLOCK = 512


@dataclass(frozen=True)
class LabelledSet:
    """What :func:`save_labelled_set` wrote: the images per class, and what it skipped or ignored."""

    n_images: int
    classes: tuple[str, ...]
    notes: tuple[str, ...] = ()


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def save_labelled_set(files: Sequence[tuple[str, bytes]], folder: str | Path) -> LabelledSet:
    """Check an upload (one archive, or images and one CSV of labels: ``(name, bytes)`` pairs) as the module docstring
    says, then write its images into ``folder`` as ``<class>/<name>.png``.

    Raises:
        DataError: naming the file or member and saying what to do; nothing is written before every check on names,
            counts and sizes has passed (an image that does not decode stops the writing).
    """
    archives = [name for name, _ in files if is_archive_name(name)]
    if archives and len(files) > 1:
        raise DataError(f"Upload one archive ({printable(archives[0])}) on its own, or images with a CSV of labels, "
                        "not both.")
    source = _archive_source(*files[0]) if archives else _files_source(files)
    plan, notes = _labelling_plan(source)
    folder = Path(folder)
    for member, data in source.read(set(plan)):
        label, stored = plan[member]
        (folder / label).mkdir(parents=True, exist_ok=True)
        decode_rgb(io.BytesIO(data), f"{source.label}: {member}").save(folder / label / stored)
    classes = tuple(sorted({label for label, _ in plan.values()}))
    if source.members.skipped:
        notes.append(f"skipped {source.members.skipped} system file(s) (__MACOSX, dot files, Thumbs.db)")
    return LabelledSet(len(plan), classes, tuple(notes))


# ------------------------------------------------------------------------------------------------------ sources


@dataclass
class _Source:
    """An upload's members (checked names → unpacked sizes) and a reader of the chosen ones' bytes."""

    label: str
    members: _Members
    read: Callable[[set[str]], Iterator[tuple[str, bytes]]]


def _files_source(files: Sequence[tuple[str, bytes]]) -> _Source:
    label = f"the {len(files)} uploaded files"
    _check_count(len(files), label)
    members = _Members(label)
    for name, data in files:
        if (checked := members.checked_name(PurePosixPath(name).name)) is not None:
            members.add(checked, len(data))
    contents = {PurePosixPath(name).name: data for name, data in files}
    return _Source(label, members, lambda wanted: ((m, contents[m]) for m in members if m in wanted))


def _archive_source(name: str, data: bytes) -> _Source:
    label = printable(PurePosixPath(name).name)
    if data[:2] == b"PK":
        return _zip_source(label, data)
    if data[:2] == b"\x1f\x8b":
        return _tar_source(label, data, compressed=True)
    if len(data) >= TAR_BLOCK and _tar_checksum_ok(data[:TAR_BLOCK]):
        return _tar_source(label, data, compressed=False)
    raise DataError(f"{label} is neither a zip nor a tar (.tar, .tar.gz) archive. Pack the images with zip or tar.")


def _zip_source(label: str, data: bytes) -> _Source:
    handle = io.BytesIO(data)
    try:
        _check_count(zip_entry_count(handle, MAX_MEMBERS), label)
        archive = zipfile.ZipFile(handle)
    except zipfile.BadZipFile as err:
        raise DataError(f"{label}: damaged zip archive ({err}). Create the archive again.") from err
    infos = [info for info in archive.infolist() if not info.is_dir()]
    if sum(info.compress_size for info in infos) > len(data):
        raise DataError(f"{label}: its members claim more compressed bytes than the archive holds (members sharing "
                        "their data: a zip bomb); refused. Create the archive again with an ordinary zip tool.")
    members, by_name = _Members(label), {}
    for info in infos:
        name = members.checked_name(info.filename)
        _check_zip_member(info, name or info.filename, label)
        if name is not None:
            members.add(name, info.file_size, info.compress_size)
            by_name[name] = info

    def read(wanted: set[str]) -> Iterator[tuple[str, bytes]]:
        for name in (m for m in members if m in wanted):
            try:
                with archive.open(by_name[name]) as member:
                    yield name, member.read(MAX_MEMBER_BYTES + 1)
            except (zipfile.BadZipFile, zlib.error, EOFError) as err:
                raise DataError(f"{label}: member {printable(name)} is damaged ({err}). Create the archive "
                                "again.") from err

    return _Source(label, members, read)


def _check_zip_member(info: zipfile.ZipInfo, name: str, label: str) -> None:
    shown = printable(name)
    if (info.external_attr >> 16) & 0o170000 == 0o120000:
        raise DataError(f"{label}: {shown} is a symbolic link; refused. Archive the images themselves, not links "
                        "to them.")
    if info.flag_bits & 0x1:
        raise DataError(f"{label}: {shown} is encrypted. Upload an archive without a password.")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise DataError(f"{label}: {shown} uses a compression FilterLens does not unpack; use ordinary zip "
                        "compression (deflate).")


def _tar_source(label: str, data: bytes, compressed: bool) -> _Source:
    def stream() -> BinaryIO:
        raw = io.BytesIO(data)
        return io.BufferedReader(_BoundedInflate(raw, label)) if compressed else raw

    _walk_tar_headers(stream(), label)
    members = _Members(label)
    with _opened_tar(stream(), label) as archive:
        for info in archive:
            name = members.checked_name(info.name, folder=info.isdir())
            _check_tar_member(info, name or info.name, label)
            if name is not None:
                members.add(name, info.size)

    def read(wanted: set[str]) -> Iterator[tuple[str, bytes]]:
        with _opened_tar(stream(), label) as archive:
            for info in archive:
                name = _member_name(info.name, label, folder=info.isdir())
                if name in wanted and info.isfile():
                    yield name, archive.extractfile(info).read(MAX_MEMBER_BYTES + 1)

    return _Source(label, members, read)


def _check_tar_member(info: tarfile.TarInfo, name: str, label: str) -> None:
    shown = printable(name)
    if info.issym() or info.islnk():
        raise DataError(f"{label}: {shown} is a {'symbolic' if info.issym() else 'hard'} link; refused. Archive the "
                        "images themselves, not links to them.")
    if not (info.isdir() or info.isfile()) or info.type == tarfile.GNUTYPE_SPARSE:
        raise DataError(f"{label}: {shown} is not a plain file or folder (a device, pipe or sparse file); refused. "
                        "Archive only the images and their folders.")


@contextlib.contextmanager
def _opened_tar(stream: BinaryIO, label: str) -> Iterator[tarfile.TarFile]:
    """``tarfile.open`` in stream mode (members in order, nothing seeks), its errors as :class:`DataError`."""
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            yield archive
    except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
        raise DataError(f"{label}: damaged tar archive ({err}). Create the archive again.") from err


class _BoundedInflate(io.RawIOBase):
    """A gzip stream inflated as it is read, refused past :data:`MAX_TOTAL_BYTES` or :data:`MAX_RATIO` times the
    compressed bytes read so far (at least :data:`RATIO_FLOOR_BYTES`)."""

    def __init__(self, raw: io.BytesIO, label: str) -> None:
        self.raw, self.label, self.produced = raw, label, 0
        self.inflating = gzip.GzipFile(fileobj=raw, mode="rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            count = self.inflating.readinto(buffer)
        except (OSError, EOFError, zlib.error) as err:
            raise DataError(f"{self.label}: damaged gzip stream ({err}). Create the archive again.") from err
        self.produced += count
        read = max(self.raw.tell(), RATIO_FLOOR_BYTES)
        if self.produced > MAX_TOTAL_BYTES or self.produced > MAX_RATIO * read:
            raise DataError(f"{self.label} unpacks to over {min(self.produced, MAX_TOTAL_BYTES) / 2**20:,.0f} MiB "
                            f"from {self.raw.tell() / 2**10:,.0f} KiB (over {MAX_RATIO}:1, or over "
                            f"{MAX_TOTAL_BYTES / 2**30:.0f} GiB in all): a decompression bomb, or far more than a set "
                            "of images; refused before unpacking further. Upload the images themselves.")
        return count


def _walk_tar_headers(stream: BinaryIO, label: str) -> None:
    """Walk a tar's 512-byte headers, skipping the data between them, before :mod:`tarfile` parses them: checksums,
    member count, declared sizes, and extended-header records at most :data:`MAX_TAR_META_BYTES` (tarfile reads
    those into memory whole)."""
    count = total = 0
    while True:
        header = stream.read(TAR_BLOCK)
        if len(header) < TAR_BLOCK or header == bytes(TAR_BLOCK):
            return  # end of archive (two zero blocks, or a missing end, which tarfile tolerates too)
        if not _tar_checksum_ok(header):
            raise DataError(f"{label}: damaged tar archive (a header fails its checksum). Create the archive again.")
        size, kind = _tar_size(header, label), header[156:157]
        if kind in (b"x", b"g", b"L", b"K"):
            if size > MAX_TAR_META_BYTES:
                raise DataError(f"{label}: an extended tar header of {size:,} bytes (over {MAX_TAR_META_BYTES:,}); "
                                "refused. Create the archive again with an ordinary tar tool.")
        else:
            count, total = count + 1, total + size
            _check_count(count, label)
            _check_size(f"a member of {size:,} bytes", size, label)
            _check_total(total, label)
        _skip(stream, -(-size // TAR_BLOCK) * TAR_BLOCK, label)


def _tar_checksum_ok(header: bytes) -> bool:
    """The header's checksum field equals the sum of its bytes with that field read as spaces (unsigned or signed)."""
    try:
        stored = int(header[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    if stored == unsigned:
        return True
    high = sum(b > 127 for b in header[:148]) + sum(b > 127 for b in header[156:])
    return stored == unsigned - 256 * high


def _tar_size(header: bytes, label: str) -> int:
    field = header[124:136]
    if field[0] & 0x80:  # base-256 (GNU), for sizes of 8 GiB and more
        return int.from_bytes(field[1:], "big")
    try:
        return int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError as err:
        raise DataError(f"{label}: damaged tar archive (a size field is not a number). Create the archive "
                        "again.") from err


def _skip(stream: BinaryIO, size: int, label: str) -> None:
    while size > 0:
        chunk = stream.read(min(size, 2**20))
        if not chunk:
            raise DataError(f"{label}: the tar archive ends inside a member (truncated). Upload it again.")
        size -= len(chunk)


# ------------------------------------------------------------------------------------------------- members, labels


def _check_count(count: int, label: str) -> None:
    if count > MAX_MEMBERS:
        raise DataError(f"{label} holds {count:,} or more files, over the limit of {MAX_MEMBERS:,}; refused before "
                        "unpacking. Upload fewer images (a few per class are enough for top-1 / top-5).")


def _check_size(what: str, size: int, label: str, compressed: int | None = None) -> None:
    if size > MAX_MEMBER_BYTES:
        raise DataError(f"{label}: {what} is over the {MAX_MEMBER_BYTES / 2**20:.0f} MiB limit for one image; "
                        "refused before unpacking. Use smaller images.")
    if compressed is not None and size > MAX_RATIO * max(compressed, RATIO_FLOOR_BYTES):
        raise DataError(f"{label}: {what} unpacks {size / max(compressed, 1):,.0f} times larger than it is stored "
                        f"(over {MAX_RATIO}:1, which no photo does: a zip bomb); refused before unpacking.")


def _check_total(total: int, label: str) -> None:
    if total > MAX_TOTAL_BYTES:
        raise DataError(f"{label} unpacks to over {MAX_TOTAL_BYTES / 2**30:.0f} GiB; refused before unpacking. "
                        "Upload fewer or smaller images.")


class _Members(dict):
    """Checked member names → unpacked sizes, with their running total."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label, self.total, self.skipped = label, 0, 0

    def add(self, name: str, size: int, compressed: int | None = None) -> None:
        """Record a member; refused when its name is there already or a size limit breaks (with those before it)."""
        if name in self:
            raise DataError(f"{self.label} holds {printable(name)} twice; refused (which one would be used?). Keep "
                            "one.")
        _check_size(printable(name), size, self.label, compressed)
        self[name] = size
        self.total += size
        _check_total(self.total, self.label)

    def checked_name(self, raw: str, folder: bool = False) -> str | None:
        """:func:`_member_name`, counting the system files it skips."""
        name = _member_name(raw, self.label, folder)
        self.skipped += name is None and not folder and not raw.endswith("/")
        return name


def _member_name(raw: str, label: str, folder: bool = False) -> str | None:
    """A member's path, checked (module docstring) and without a leading ``./``; ``None`` for folders (a ``folder``
    member, or a name ending in ``/``) and system litter."""
    shown = printable(raw[:80])
    if "\\" in raw or raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise DataError(f"{label}: the member name {shown!r} is absolute or uses backslashes; refused. Archive the "
                        "images with relative paths (class/image.jpg).")
    parts = [part for part in raw.removeprefix("./").split("/") if part != "."]
    if parts and parts[-1] == "":
        parts, folder = parts[:-1], True
    if ".." in parts or "" in parts:
        raise DataError(f"{label}: the member name {shown!r} points outside the archive (..) or has an empty part; "
                        "refused. Archive the images with plain relative paths (class/image.jpg).")
    if len(raw) > MAX_NAME_CHARS or any(ord(c) < 32 or c == "\x7f" for c in raw) or printable(raw) != raw:
        raise DataError(f"{label}: the member name {shown!r} is too long, or has control characters or bytes that "
                        "are not UTF-8; refused. Rename the file.")
    if folder or not parts:
        return None
    if parts[0] in LITTER_FOLDERS or any(part.startswith(".") for part in parts) or parts[-1].lower() in LITTER_FILES:
        return None
    suffix = PurePosixPath(parts[-1]).suffix.lower()
    if suffix in ARCHIVE_LIKE_SUFFIXES:
        raise DataError(f"{label}: {shown} is an archive inside the archive; refused (nested archives are not "
                        "unpacked). Put its images in the upload itself.")
    if suffix not in (*IMAGE_SUFFIXES, ".csv"):
        raise DataError(f"{label}: {shown} is not an image ({', '.join(IMAGE_SUFFIXES)}) or a CSV of labels; "
                        "refused. Upload only the images (and labels.csv).")
    return "/".join(parts)


def _labelling_plan(source: _Source) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Each image member → ``(class, stored name)``: classes from ``<class>/<image>`` folders (inside one common top
    folder, if any), or from the one CSV beside flat images."""
    names = list(source.members)
    images = [n for n in names if PurePosixPath(n).suffix.lower() in IMAGE_SUFFIXES]
    if not images:
        raise DataError(f"{source.label} holds no images ({', '.join(IMAGE_SUFFIXES)}). Upload an archive of "
                        "<class>/<image> folders, or images with a CSV of labels.")
    tables = [n for n in names if n.lower().endswith(".csv")]
    top = _common_top(images, tables)
    depth = {len(PurePosixPath(n).parts) - bool(top) for n in images}
    if depth == {2} and not tables:
        labels = {n: PurePosixPath(n).parts[-2] for n in images}
        notes = []
    elif depth == {1} and len(tables) == 1:
        labels, notes = _csv_labels(source, tables[0], images)
    else:
        raise DataError(f"{source.label}: lay the images out as <class>/<image> folders (an ImageFolder tree: "
                        "ImageNet's val/<wnid>/*.JPEG) or put them side by side with one CSV of labels "
                        f"(file,label); this upload has {len(tables)} CSV file(s) and images "
                        f"{' and '.join(map(str, sorted(depth)))} folder(s) deep.")
    plan, stored = {}, {}
    for name in images:
        label = _class_name(labels[name], source.label)
        target = f"{PurePosixPath(name).stem[:STORED_STEM_CHARS]}.png"
        if (label, target) in stored:
            raise DataError(f"{source.label}: {printable(stored[label, target])} and {printable(name)} would both be "
                            f"stored as {label}/{target}; rename one.")
        stored[label, target] = name
        plan[name] = (label, target)
    return plan, notes


def _common_top(images: list[str], tables: list[str]) -> str | None:
    """The one folder everything sits in, when it is a wrapper: the images are 3 deep, or 2 deep with the CSV."""
    tops = {PurePosixPath(n).parts[0] for n in images + tables}
    depths = {len(PurePosixPath(n).parts) for n in images}
    if len(tops) != 1 or min(len(PurePosixPath(n).parts) for n in images + tables) < 2:
        return None
    return tops.pop() if depths == {3} or (depths == {2} and tables) else None


def _csv_labels(source: _Source, table: str, images: list[str]) -> tuple[dict[str, str], list[str]]:
    """Labels of flat images from a CSV (``file,label`` rows, a header row optional; files by their name)."""
    data = next(iter(source.read({table})))[1]
    if len(data) > MAX_LABELS_BYTES:
        raise DataError(f"{source.label}: {printable(table)} is over {MAX_LABELS_BYTES / 2**20:.0f} MiB; a CSV of "
                        "labels needs far less. Keep only file,label rows.")
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))
    except (UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{source.label}: {printable(table)} is not a UTF-8 CSV ({err}). Save it as CSV "
                        "(UTF-8).") from err
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    file_col, label_col = 0, 1
    if rows and rows[0] and rows[0][0].strip().lower() in FILE_COLUMNS:
        header = [cell.strip().lower() for cell in rows.pop(0)]
        label_col = next((header.index(c) for c in LABEL_COLUMNS if c in header), 1)
    by_file: dict[str, str] = {}
    for row in rows:
        if len(row) <= max(file_col, label_col):
            raise DataError(f"{source.label}: a row of {printable(table)} has no label "
                            f"({printable(','.join(row))[:60]}). Give every row as file,label.")
        by_file[PurePosixPath(row[file_col].strip()).name] = row[label_col].strip()
    unlabelled = [n for n in images if PurePosixPath(n).name not in by_file]
    if unlabelled:
        raise DataError(f"{source.label}: {len(unlabelled)} image(s) have no row in {printable(table)} (e.g. "
                        f"{', '.join(printable(PurePosixPath(n).name) for n in unlabelled[:3])}). Add a file,label "
                        "row for each image.")
    unused = len(by_file) - len(images)
    return ({n: by_file[PurePosixPath(n).name] for n in images},
            [f"{unused} row(s) of {printable(table)} name no uploaded image"] if unused > 0 else [])


def _class_name(label: str, source: str) -> str:
    """A class label usable as a folder name (ImageNet wnids, CIFAR names, any plain word or phrase)."""
    if (not label or len(label) > MAX_CLASS_CHARS or label in (".", "..") or label.startswith(".") or "/" in label
            or "\\" in label or any(ord(c) < 32 or c == "\x7f" for c in label)):
        raise DataError(f"{source}: the class {printable(label[:60])!r} cannot name a folder (empty, too long, "
                        "a path or control characters). Use plain class names such as n01440764 or 'cat'.")
    return label

"""The server's upload folder: a content-addressed store with a quota, least-recently-used eviction and an age limit,
written so that a crash never leaves a half-written upload that a later session loads.

Layout of the folder (``FL_UPLOAD_DIR``)::

    <sha256[:24]>/<name>     an uploaded checkpoint in a folder named by its content, under the user's file name
                             (:func:`upload_name`), so every label shows that name; the same bytes uploaded under
                             another name land beside it
    images-<sha256[:16]>/    uploaded images saved as PNGs (digest over every file's bytes and name); a labelled set
                             (an archive of an ImageFolder tree, or images with a CSV of labels) as an ImageFolder
                             tree of PNGs, <class>/<image>.png
    .<random>.part           a write in progress, or a leftover of a killed process (no spec ever names one)

and beside it ``<folder>.lock``, the lock writers hold while they make room and land an upload. A folder of images
holds ``.contents.json`` too (:data:`CONTENTS`: the size and SHA-256 of each of its files, written when it was built).

Rules:

* **Atomic writes.** A file is written to a temp file in the same folder, fsynced and ``os.replace``\\ d into place;
  an image folder is built whole in a temp folder and renamed into place; an entry is removed by renaming it to a
  temp name first. A process killed at any point leaves at most a ``.part`` entry, which :meth:`UploadStore.sweep`
  removes once nothing has written to it for :data:`IN_USE_SECONDS`.
* **Last use.** Sessions :meth:`~UploadStore.touch` the uploads they have selected. A file's last use is its access
  time (its modification time is the model cache's file stamp and stays as written); a folder's is its modification
  time (listing a folder refreshes its access time).
* **Quota** (``FL_UPLOAD_QUOTA_MB``, default :data:`DEFAULT_QUOTA_MB`). Before a new upload is written, the entries
  unused for longest are removed until it fits. Entries used in the last :data:`IN_USE_SECONDS` are never removed
  (a running analysis may be reading them), so an upload that would fit only by removing those is refused, and so
  is one larger than the quota, both before anything is written.
* **Several writers.** App replicas may share the folder (a shared volume). Making room and landing an upload
  happen under an exclusive lock of ``<folder>.lock`` (a POSIX record lock, so the volume must support them: local
  disks, Docker volumes, NFSv4), so two uploads never both fit in the room one of them made; an entry's last use is
  read again just before it is evicted, so an upload another replica has just used stays. Everything else (reads,
  touches, the removal of leftovers, which tolerates the same entry going twice) needs no lock.
* **Verified on reuse.** An upload is served again only while it is what was stored: a checkpoint whose size and
  SHA-256 are the new upload's (its content address), a folder of images whose files are those its
  :data:`CONTENTS` lists (size and SHA-256, no link, nothing added). One that does not match (changed on the server)
  is replaced by the new upload; the app refuses a model loaded from the store by a link when its file's SHA-256 is
  not its folder's name (:meth:`UploadStore.check_checkpoint`, :func:`fl_ui.cache.load_verified`), and a folder of
  images by a link that is not intact (:meth:`UploadStore.check_images`, :func:`fl_ui.cache.get_images`).
* **Age** (``FL_UPLOAD_MAX_AGE_HOURS``, default :data:`DEFAULT_MAX_AGE_HOURS`). Entries unused for longer are removed
  by the sweep, which runs on the first use of the store in each process (:func:`upload_store`), again every
  :data:`SWEEP_INTERVAL_SECONDS`, and before every new upload.

A link that names an upload (``weights:/data/uploads/ab12…/resnet20.th``) restores it only while the file is kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from fl_core.errors import DataError
from fl_core.io.checkpoints import file_sha256
from fl_core.io.image_archives import save_labelled_set
from fl_core.io.images import save_uploaded_images
from fl_core.io.paths import PathPolicy, open_readable

DEFAULT_QUOTA_MB = 4096
DEFAULT_MAX_AGE_HOURS = 72
IN_USE_SECONDS = 15 * 60
"""Entries used (or, for temp entries, written to) this recently are never removed."""
SWEEP_INTERVAL_SECONDS = 10 * 60
TEMP_SUFFIX = ".part"
LOCK_SUFFIX = ".lock"

log = logging.getLogger(__name__)
_ADDING = threading.Lock()  # POSIX record locks are per process: threads of one process take turns here first
_LAST_SWEEP: dict[Path, float] = {}


class StoredEntry(NamedTuple):
    """One upload in the store: its path, size in bytes (a folder: its files), and last use (seconds since epoch)."""

    path: Path
    size: int
    last_used: float


CHECKPOINT_DIGEST_CHARS = 24
"""Hex digits of the SHA-256 that name a checkpoint's folder."""
IMAGES_DIGEST_CHARS = 16
"""Hex digits of the SHA-256 that name a folder of uploaded images (``images-<digest>``)."""
UPLOADED_IMAGES = "uploaded images"
"""How a shared document names a folder of uploaded images (:meth:`UploadStore.shareable`)."""
CONTENTS = ".contents.json"
"""The list of a folder of uploaded images: each file's path in it → ``[size, sha256]`` (a dot-file: never an image)."""
MAX_CONTENTS_BYTES = 16 << 20
"""Size of a :data:`CONTENTS` read (about 100 bytes a file: 160,000 files)."""
UPLOAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9._+()-]+")
MAX_UPLOAD_NAME = 100


def upload_name(name: str) -> str:
    """The file name an upload is kept under: the user's, with runs of characters other than letters, digits and
    ``._+()-`` replaced by ``_`` (specs, the URL codec's ``,`` and ``|``, and shells read it as it is), no leading
    dot, the stem cut to fit :data:`MAX_UPLOAD_NAME` characters, the suffix lower-case."""
    path = Path(UPLOAD_NAME_CHARS.sub("_", Path(name).name))
    suffix = path.suffix.lower()[:16]
    stem = path.stem.lstrip(".") or "upload"
    return stem[:MAX_UPLOAD_NAME - len(suffix)] + suffix


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fsynced temp file in the same folder and ``os.replace``: readers see
    the old file or the whole new one, never part of it, and a killed writer leaves only a ``.part`` file."""
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".", suffix=TEMP_SUFFIX, delete=False) as handle:
        try:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise
    os.replace(handle.name, path)


def _size_text(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


def _is_temp(path: Path) -> bool:
    return path.name.endswith(TEMP_SUFFIX)


def lock_path(root: Path) -> Path:
    """The writers' lock file of a store: beside its folder, so that the folder holds uploads only."""
    return root.with_name(root.name + LOCK_SUFFIX)


@contextlib.contextmanager
def writers_lock(root: Path) -> Iterator[None]:
    """Hold the store's writer lock: one thread of one process (of every app replica sharing the folder) at a time."""
    with _ADDING, open(lock_path(root), "a+b") as handle:
        fcntl.lockf(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(handle, fcntl.LOCK_UN)


def _last_used(path: Path) -> float:
    """An entry's last use: a file's access time, a folder's modification time (module docstring)."""
    stat = path.stat()
    return stat.st_mtime if path.is_dir() else stat.st_atime


def _stored_size(path: Path) -> int:
    """Bytes of an entry: a file's size, a folder's files (an ImageFolder tree's in its class folders too)."""
    if not path.is_dir():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _delete(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    """Remove an upload by renaming it to a temp name first, so no session sees half a folder (gone already: done)."""
    doomed = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")
    try:
        os.replace(path, doomed)
    except FileNotFoundError:
        return
    _delete(doomed)


def _rename_folder_into_place(building: Path, folder: Path) -> None:
    """Rename a finished folder to its name; another process that just stored the same images wins (same content)."""
    try:
        os.replace(building, folder)
    except OSError:
        if not folder.is_dir():
            raise


def _holds(path: Path, size: int, sha256: str) -> bool:
    """Whether ``path`` is a regular file (not a link) of ``size`` bytes whose SHA-256 is ``sha256``."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == size and file_sha256(path) == sha256


def _tree(folder: Path) -> dict[str, os.stat_result]:
    """Every entry under ``folder`` (links not followed) by its path in it, :data:`CONTENTS` left out."""
    entries = {}
    for parent, folders, files in os.walk(folder):
        for name in (*folders, *files):
            path = Path(parent) / name
            entries[path.relative_to(folder).as_posix()] = os.lstat(path)
    entries.pop(CONTENTS, None)
    return entries


def _write_contents(folder: Path) -> None:
    """Record the size and SHA-256 of every file of a folder being built (:data:`CONTENTS`)."""
    contents = {name: [entry.st_size, file_sha256(folder / name)] for name, entry in sorted(_tree(folder).items())
                if stat.S_ISREG(entry.st_mode)}
    (folder / CONTENTS).write_text(json.dumps(contents))


_INTACT: dict[Path, tuple] = {}
"""Folders of images found intact, with the stat of every entry then (a file changed since has a new ctime)."""


def _intact(folder: Path) -> bool:
    """Whether ``folder`` is a folder (not a link) holding exactly the files its :data:`CONTENTS` lists, each of its
    size and SHA-256 (hashed again only when an entry's stat changed since it was last found intact)."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return False
        tree = _tree(folder)
        seen = tuple((name, e.st_ino, e.st_size, e.st_mtime_ns, e.st_ctime_ns) for name, e in sorted(tree.items()))
        if _INTACT.get(folder) == seen:
            return True
        with open_readable(folder / CONTENTS, PathPolicy()) as handle:  # a regular file, whatever the policy
            contents = json.loads(handle.read(MAX_CONTENTS_BYTES))
        files = {name for name, entry in tree.items() if not stat.S_ISDIR(entry.st_mode)}
        intact = isinstance(contents, dict) and files == set(contents) and all(
            _holds(folder / name, *contents[name]) for name in files)
    except (OSError, ValueError, TypeError, DataError):
        return False
    if intact:
        _INTACT[folder] = seen
    return intact


@dataclass(frozen=True)
class UploadStore:
    """The upload folder and its limits (see the module docstring for the rules).

    Attributes:
        root: the folder (``FL_UPLOAD_DIR``).
        quota_bytes: most bytes the uploads may take together (``FL_UPLOAD_QUOTA_MB``).
        max_age_seconds: uploads unused for longer are removed (``FL_UPLOAD_MAX_AGE_HOURS``).
        in_use_seconds: uploads used this recently are never removed.
    """

    root: Path
    quota_bytes: int
    max_age_seconds: float
    in_use_seconds: float = IN_USE_SECONDS

    def holds(self, path: str | Path) -> bool:
        """Whether ``path`` names an upload in this store (an entry directly inside the folder, not a temp one)."""
        path = Path(path)
        return path.parent.resolve() == self.root.resolve() and not _is_temp(path)

    def entry(self, path: str | Path) -> Path:
        """The store entry holding ``path``: the folder of a checkpoint kept under its name, else ``path``."""
        path = Path(path)
        return path.parent if self.holds(path.parent) else path

    def shareable(self, text: str) -> str:
        """``text`` (a document a user downloads) without the server's upload folder: a checkpoint named by the file
        name it was uploaded under (``weights:/data/uploads/ab12…/resnet20.th`` -> ``weights:resnet20.th``), a folder
        of uploaded images as :data:`UPLOADED_IMAGES`."""
        for root in dict.fromkeys((str(self.root.resolve()), str(self.root))):  # the longer form first
            prefix = re.escape(os.path.join(root, ""))
            text = re.sub(prefix + f"[0-9a-f]{{{CHECKPOINT_DIGEST_CHARS}}}" + re.escape(os.sep), "", text)
            text = re.sub(prefix + f"images-[0-9a-f]{{{IMAGES_DIGEST_CHARS}}}", UPLOADED_IMAGES, text)
        return text

    def touch(self, path: str | Path) -> None:
        """Mark an upload as used now; paths outside the store and uploads already removed are ignored."""
        path = self.entry(path)
        if not self.holds(path):
            return
        try:
            if path.is_dir():
                os.utime(path)
            else:
                os.utime(path, ns=(time.time_ns(), path.stat().st_mtime_ns))
        except FileNotFoundError:
            pass

    def entries(self) -> list[StoredEntry]:
        """Every finished upload, least recently used first."""
        found = []
        for path in self.root.iterdir():
            if _is_temp(path):
                continue
            try:
                size = _stored_size(path)
                found.append(StoredEntry(path, size, _last_used(path)))
            except FileNotFoundError:  # removed meanwhile
                continue
        return sorted(found, key=lambda entry: entry.last_used)

    def sweep(self) -> None:
        """Remove leftovers of killed writes (temp entries nothing wrote to lately) and uploads past the age limit."""
        now = time.time()
        for path in self.root.iterdir():
            try:
                stale = _is_temp(path) and now - path.stat().st_mtime > self.in_use_seconds
            except FileNotFoundError:
                continue
            if stale:
                _delete(path)
        for entry in self.entries():
            if now - entry.last_used > max(self.max_age_seconds, self.in_use_seconds):
                _remove(entry.path)

    def add_checkpoint(self, data: bytes, name: str) -> tuple[Path, bool]:
        """Store uploaded checkpoint bytes under ``name`` as the user uploaded it (:func:`upload_name`) in the folder
        of their content; returns the file's path and whether this call created it. A new folder is built under a
        temp name and renamed into place.

        A file already stored there is reused only when it holds these bytes (size and SHA-256); one that does not
        (changed on the server) is replaced by them.

        Raises:
            DataError: the upload cannot fit the quota (nothing was written).
        """
        sha256 = hashlib.sha256(data).hexdigest()
        folder = self.root / sha256[:CHECKPOINT_DIGEST_CHARS]
        path = folder / upload_name(name)
        with writers_lock(self.root):
            if _holds(path, len(data), sha256):
                self.touch(path)
                return path, False
            if os.path.lexists(folder) and not stat.S_ISDIR(os.lstat(folder).st_mode):
                _remove(folder)  # a file or a link where the folder should be: replaced
            if os.path.lexists(path):  # changed on the server since it was stored: replaced by this upload
                log.warning("upload %s does not match its content address: replaced by the new upload", path)
                _remove(path)
            self.touch(folder)  # the same bytes under another name: in use, kept beside them
            self._make_room(len(data), name)
            if folder.is_dir():
                write_atomically(path, data)
                return path, True
            building = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{folder.name}.", suffix=TEMP_SUFFIX))
            try:
                write_atomically(building / path.name, data)
                _rename_folder_into_place(building, folder)
            finally:
                shutil.rmtree(building, ignore_errors=True)
            if not path.exists():  # another process put the same bytes in place under another name first
                write_atomically(path, data)
        return path, True

    def discard(self, path: str | Path) -> None:
        """Remove an uploaded checkpoint file that was refused, and its folder when nothing else is in it."""
        path = Path(path)
        path.unlink(missing_ok=True)
        entry = self.entry(path)
        if entry != path and entry.is_dir() and not any(entry.iterdir()):
            _remove(entry)

    def check_checkpoint(self, path: str | Path, sha256: str | None) -> None:
        """Refuse a checkpoint of this store whose content (``sha256``, as loaded) is not its content address (the
        name of its folder); any other path passes.

        Raises:
            DataError: the stored file was changed on the server after it was uploaded.
        """
        folder = Path(path).parent
        if (self.holds(folder) and re.fullmatch(f"[0-9a-f]{{{CHECKPOINT_DIGEST_CHARS}}}", folder.name)
                and not (sha256 or "").startswith(folder.name)):
            raise DataError(f"The uploaded file {Path(path).name} was changed on the server after it was uploaded "
                            "(its content is not what its address says): refused. Upload the file again.")

    def check_images(self, path: str | Path) -> None:
        """Refuse a folder of uploaded images of this store that is not intact (:func:`_intact`); any other path
        passes.

        Raises:
            DataError: the folder was changed on the server after it was stored.
        """
        path = Path(path)
        if self.holds(path) and path.name.startswith("images-") and not _intact(path):
            raise DataError("These uploaded images were changed on the server after they were stored: refused. "
                            "Upload them again.")

    def add_images(self, files: Sequence[tuple[str, bytes]]) -> Path:
        """Store uploaded images (``(name, bytes)`` pairs) as an ``images-<digest>`` folder of PNGs, built in a temp
        folder and renamed into place; the same files give the same folder.

        Raises:
            DataError: a file is not a readable image, or the images cannot fit the quota.
        """
        return self._add_image_folder(files, b"", lambda building: save_uploaded_images(files, building))

    def add_labelled_images(self, files: Sequence[tuple[str, bytes]]) -> Path:
        """Store a labelled image set, one archive of an ImageFolder tree or images with a CSV of labels (checked and
        written by :func:`fl_core.io.image_archives.save_labelled_set`), as an ``images-<digest>`` ImageFolder tree
        of PNGs, built in a temp folder and renamed into place; the same files give the same folder.

        Raises:
            DataError: the upload breaks a limit or holds something other than labelled images (nothing of it is
                kept), or it cannot fit the quota.
        """
        return self._add_image_folder(files, b"labelled\0", lambda building: save_labelled_set(files, building))

    def _add_image_folder(self, files: Sequence[tuple[str, bytes]], kind: bytes, write: Callable[[Path], object]
                          ) -> Path:
        """An ``images-<digest>`` folder of uploaded images: the digest over ``kind`` and every file's bytes and name,
        the folder written by ``write`` into a temp folder with its :data:`CONTENTS`, then moved into place within the
        quota; a folder already there is reused only while it is intact (:func:`_intact`), else replaced."""
        content = kind + b"".join(data + name.encode() for name, data in files)
        digest = hashlib.sha256(content).hexdigest()[:IMAGES_DIGEST_CHARS]
        folder = self.root / f"images-{digest}"
        if _intact(folder):
            self.touch(folder)
            return folder
        label = f"{len(files)} images" if not kind else f"the labelled set of {len(files)} file(s)"
        self._refuse_larger_than_quota(sum(len(data) for _, data in files), label)
        building = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{folder.name}.", suffix=TEMP_SUFFIX))
        try:
            write(building)
            _write_contents(building)
            with writers_lock(self.root):
                if os.path.lexists(folder) and not _intact(folder):  # changed on the server: replaced by this upload
                    log.warning("upload %s does not match what was stored: replaced by the new upload", folder)
                    _remove(folder)
                if not folder.is_dir():
                    self._make_room(_stored_size(building), label)
                    _rename_folder_into_place(building, folder)
        finally:
            shutil.rmtree(building, ignore_errors=True)
        self.touch(folder)
        return folder

    def _refuse_larger_than_quota(self, size: int, name: str) -> None:
        if size > self.quota_bytes:
            raise DataError(f"{name} ({_size_text(size)}) cannot fit: this server keeps at most "
                            f"{_size_text(self.quota_bytes)} of uploads (FL_UPLOAD_QUOTA_MB). Upload a smaller file, "
                            "or ask the admin to raise the quota.")

    def _make_room(self, size: int, name: str) -> None:
        """Remove expired uploads, then the least recently used ones not in use, until ``size`` more bytes fit (the
        caller holds :func:`writers_lock`)."""
        self._refuse_larger_than_quota(size, name)
        self.sweep()
        entries = self.entries()
        used = sum(entry.size for entry in entries)
        now = time.time()
        for entry in entries:
            if used + size <= self.quota_bytes or now - entry.last_used <= self.in_use_seconds:
                break
            with contextlib.suppress(FileNotFoundError):  # another replica may have used it since it was listed
                if now - _last_used(entry.path) <= self.in_use_seconds:
                    continue
            _remove(entry.path)
            used -= entry.size
        if used + size > self.quota_bytes:
            raise DataError(f"{name} ({_size_text(size)}) does not fit right now: {_size_text(used)} of the "
                            f"{_size_text(self.quota_bytes)} upload quota (FL_UPLOAD_QUOTA_MB) hold uploads used in "
                            f"the last {self.in_use_seconds / 60:.0f} min. Try again later, or ask the admin to "
                            "raise the quota.")


def upload_store() -> UploadStore:
    """The server's store, from ``FL_UPLOAD_DIR`` (default: a temp folder), ``FL_UPLOAD_QUOTA_MB`` and
    ``FL_UPLOAD_MAX_AGE_HOURS``; the folder is created and swept on the first call in a process and every
    :data:`SWEEP_INTERVAL_SECONDS` after."""
    root = Path(os.environ.get("FL_UPLOAD_DIR", Path(tempfile.gettempdir()) / "filterlens-uploads"))
    store = UploadStore(root=root,
                        quota_bytes=int(float(os.environ.get("FL_UPLOAD_QUOTA_MB", DEFAULT_QUOTA_MB)) * 2**20),
                        max_age_seconds=float(os.environ.get("FL_UPLOAD_MAX_AGE_HOURS", DEFAULT_MAX_AGE_HOURS)) * 3600)
    root.mkdir(parents=True, exist_ok=True)
    now = time.monotonic()
    if now - _LAST_SWEEP.get(root, -math.inf) >= SWEEP_INTERVAL_SECONDS:
        _LAST_SWEEP[root] = now
        store.sweep()
    return store

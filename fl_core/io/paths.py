"""Which files a user's paths may read: the one path policy of every door (the library, the command line, the
dashboard's pages and URL values, survey lists, report folders, uploads, and the jobs its workers run).

A path is readable when, with symlinks resolved, it lies inside what the policy in force shares:

* by default (the library, the command line): every path, or only those under ``FL_DATA_ROOTS`` when it is set
  (folders separated by ``os.pathsep``), besides the package's own assets;
* in a server's session (:func:`reading_for` its :class:`PathPolicy`): ``FL_DATA_ROOTS``, the entries of its upload
  folder (never the folder itself: listing it would show other users' uploads), the session's own folders, the
  package's assets; without ``FL_DATA_ROOTS``, a server others can reach shares nothing else (fail closed).

Every function that opens a file or lists a folder a user named calls :func:`check_readable` first (the loader and
its file stamps, image folders and each file in them, report folders, survey lists and folders), and a dashboard job
carries the policy of the session that submitted it to the worker that runs it. Files whose bytes are read by path
later (images, result files) are opened with :func:`open_readable`: the check is made again on the file actually
opened (its descriptor's real path), so a symlink swapped in after the listing is not followed, and anything but a
regular file (a FIFO, a device) is refused without blocking on it or reading it.

Every file or folder the library writes at a path a user named (``result.save``, a re-score's ``resume`` file, Training
Lab run folders, the command line's ``--json`` / ``--csv`` / ``--html``) is checked by :func:`check_writable` before
anything, parent folders included, is created: under ``FL_DATA_ROOTS`` it must lie inside them (or in the runs folder,
``FL_RUNS_DIR``, or a session's own folders); the package's assets and the upload folder are never written by path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from fl_core.errors import DataError
from fl_core.io import ASSETS_DIR
from fl_core.settings import path_text_problem, printable

DATA_ROOTS_ENV = "FL_DATA_ROOTS"
RUNS_DIR_ENV = "FL_RUNS_DIR"
SHOWN_PATH_CHARS = 200
"""A refusal names at most this many characters of the path."""


def data_roots() -> tuple[Path, ...]:
    """The server folders users may read (``FL_DATA_ROOTS``, separated by ``os.pathsep``), resolved."""
    return tuple(Path(p).resolve() for p in os.environ.get(DATA_ROOTS_ENV, "").split(os.pathsep) if p.strip())


def runs_root() -> Path:
    """Where Training Lab runs go (``FL_RUNS_DIR``, default: a temp folder), resolved; not created here."""
    return Path(os.environ.get(RUNS_DIR_ENV, Path(tempfile.gettempdir()) / "filterlens-runs")).resolve()


@dataclass(frozen=True)
class PathPolicy:
    """Where users' paths may lead (symlinks resolved).

    Attributes:
        roots: the folders shared whole (``FL_DATA_ROOTS``), which a refusal names; ``None``: every path.
        own: folders shared whole that a refusal does not name (the package's assets, read only; the runs folder or a
            session's runs).
        stores: folders whose entries are shared for reading but not the folder itself (the upload folder).
        listens_on: where a server that shares no folder listens, for its refusal.
    """

    roots: tuple[Path, ...] | None = None
    own: tuple[Path, ...] = (ASSETS_DIR,)
    stores: tuple[Path, ...] = ()
    listens_on: str = ""

    @classmethod
    def from_environment(cls) -> PathPolicy:
        """This process's policy outside a session: ``FL_DATA_ROOTS`` when set (and the runs folder), else every
        path."""
        return cls(roots=data_roots() or None, own=(ASSETS_DIR, runs_root()))

    def shares(self, target: Path, *, writing: bool = False) -> bool:
        """Whether ``target`` (a resolved path) lies where users may read, or with ``writing``, write."""
        if self.roots is None:
            return True
        folders = (*self.roots, *(folder for folder in self.own if not writing or folder != ASSETS_DIR))
        return any(target == folder or folder in target.parents for folder in folders) or (
            not writing and any(store.resolve() in target.parents for store in self.stores))

    def error(self, path: str | Path, *, writing: bool = False) -> str | None:
        """Why users may not read ``path`` (with ``writing``: write it), or ``None`` when they may."""
        if self.roots is None:
            return None
        verb = "written" if writing else "read"
        if problem := path_text_problem(str(path)):
            return f"{shown_path(path)} cannot be {verb}: {problem}."
        try:
            target = Path(path).resolve()
        except (OSError, RuntimeError) as err:  # a symlink loop
            return f"{shown_path(path)} cannot be {verb} ({err}). Give a path without a symlink loop."
        return None if self.shares(target, writing=writing) else self.refusal(path, writing=writing)

    def refusal(self, path: str | Path, *, writing: bool = False) -> str:
        """The message for ``path``, outside what this policy shares."""
        shown = shown_path(path)
        if writing:
            where = (f"the folders of FL_DATA_ROOTS ({', '.join(map(str, self.roots))})" if self.roots else
                     "a server's own folders (FL_DATA_ROOTS is not set)")
            return f"{shown} cannot be written: FilterLens writes only inside {where}. Give a path inside them."
        if self.roots:
            return (f"{shown} is outside the folders this server shares ({', '.join(map(str, self.roots))}). Upload "
                    "the file, or ask the admin to add its folder to FL_DATA_ROOTS.")
        return (f"{shown} is outside the folders this server shares: none, because it is shared (it listens on "
                f"{self.listens_on}) and FL_DATA_ROOTS is not set. Upload the file, or ask the admin to set "
                "FL_DATA_ROOTS to the folders users may read.")


def shown_path(path: str | Path) -> str:
    """``path`` as a message names it: printable, at most :data:`SHOWN_PATH_CHARS` characters."""
    text = str(path)
    return printable(text[:SHOWN_PATH_CHARS]) + ("…" if len(text) > SHOWN_PATH_CHARS else "")


_SESSION_POLICY: ContextVar[PathPolicy | None] = ContextVar("filterlens_path_policy", default=None)


def path_policy() -> PathPolicy:
    """The policy in force: the session's (:func:`reading_for`), else this process's
    (:meth:`PathPolicy.from_environment`)."""
    return _SESSION_POLICY.get() or PathPolicy.from_environment()


@contextlib.contextmanager
def reading_for(policy: PathPolicy) -> Iterator[None]:
    """Open users' paths under ``policy`` inside (this thread and the jobs it submits)."""
    token = _SESSION_POLICY.set(policy)
    try:
        yield
    finally:
        _SESSION_POLICY.reset(token)


def check_readable(path: str | Path) -> Path:
    """``path``, if the policy in force (:func:`path_policy`) lets users read it.

    Raises:
        DataError: with the policy's message (which folders it shares, and what to do).
    """
    if error := path_policy().error(path):
        raise DataError(error)
    return Path(path)


FILE_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
              stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def check_writable(path: str | Path) -> Path:
    """``path``, if the policy in force lets the library write it (module docstring): checked before anything is
    created, so no parent folder appears outside the shared folders.

    Raises:
        DataError: with the policy's message.
    """
    if error := path_policy().error(path, writing=True):
        raise DataError(error)
    return Path(path)


def file_to_write(path: str | Path) -> Path:
    """``path`` once :func:`check_writable` lets the library write it, its folder created; what is there already must
    be a file (writing to a FIFO would block, to a device would not save anything).

    Raises:
        DataError: with the policy's message, something other than a file at ``path``, or a folder that cannot be
            made (a file is in the way, no permission).
    """
    path = check_writable(path)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(mode := os.stat(path).st_mode):
            kind = FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise DataError(f"{shown_path(path)} is {kind}, not a file: give the path of a file to write.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"{shown_path(path)} cannot be written: its folder cannot be made ({err}).") from err
    return path


def open_readable(path: str | Path, policy: PathPolicy | None = None) -> BinaryIO:
    """``path`` opened for reading (binary), checked under ``policy`` (default: the one in force, :func:`path_policy`)
    on the path and again on the file actually opened: its descriptor's real path must be shared too (a symlink
    swapped in after the check is not followed out), and it must be a regular file (a FIFO or a device is refused
    without blocking or reading).

    Raises:
        DataError: refused by the policy, or not a regular file.
        FileNotFoundError, PermissionError: as :func:`open` raises them.
    """
    policy = policy or path_policy()
    if error := policy.error(path):
        raise DataError(error)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise DataError(f"{shown_path(path)} is {kind}, not a file: refused without reading it. Give the path of "
                            "a file.")
        if policy.roots is not None and ((real := opened_path(descriptor, path)) is None or not policy.shares(real)):
            raise DataError(policy.refusal(path))
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def opened_path(descriptor: int, path: str | Path) -> Path | None:
    """The real path of the file open at ``descriptor``: the kernel's (``/proc/self/fd``) where it says, else
    ``path`` resolved when it is still that file (same device and inode), else ``None``."""
    with contextlib.suppress(OSError):
        return Path(os.readlink(f"/proc/self/fd/{descriptor}"))
    resolved = Path(path).resolve()
    opened, now = os.fstat(descriptor), os.stat(resolved)
    return resolved if (opened.st_dev, opened.st_ino) == (now.st_dev, now.st_ino) else None

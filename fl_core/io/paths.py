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
carries the policy of the session that submitted it to the worker that runs it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from fl_core.errors import DataError
from fl_core.io import ASSETS_DIR
from fl_core.settings import path_text_problem, printable

DATA_ROOTS_ENV = "FL_DATA_ROOTS"
SHOWN_PATH_CHARS = 200
"""A refusal names at most this many characters of the path."""


def data_roots() -> tuple[Path, ...]:
    """The server folders users may read (``FL_DATA_ROOTS``, separated by ``os.pathsep``), resolved."""
    return tuple(Path(p).resolve() for p in os.environ.get(DATA_ROOTS_ENV, "").split(os.pathsep) if p.strip())


@dataclass(frozen=True)
class PathPolicy:
    """Where users' paths may lead (symlinks resolved).

    Attributes:
        roots: the folders shared whole (``FL_DATA_ROOTS``), which a refusal names; ``None``: every path.
        own: folders shared whole that a refusal does not name (the package's assets, a session's runs).
        stores: folders whose entries are shared but not the folder itself (the upload folder).
        listens_on: where a server that shares no folder listens, for its refusal.
    """

    roots: tuple[Path, ...] | None = None
    own: tuple[Path, ...] = (ASSETS_DIR,)
    stores: tuple[Path, ...] = ()
    listens_on: str = ""

    @classmethod
    def from_environment(cls) -> PathPolicy:
        """This process's policy outside a session: ``FL_DATA_ROOTS`` when set, else every path."""
        return cls(roots=data_roots() or None)

    def error(self, path: str | Path) -> str | None:
        """Why users may not read ``path``, or ``None`` when they may."""
        if self.roots is None:
            return None
        shown = printable(str(path)[:SHOWN_PATH_CHARS]) + ("…" if len(str(path)) > SHOWN_PATH_CHARS else "")
        if problem := path_text_problem(str(path)):
            return f"{shown} cannot be read: {problem}."
        try:
            target = Path(path).resolve()
        except (OSError, RuntimeError) as err:  # a symlink loop
            return f"{shown} cannot be read ({err}). Give a path without a symlink loop."
        if any(target == folder or folder in target.parents for folder in (*self.roots, *self.own)) or any(
                store.resolve() in target.parents for store in self.stores):
            return None
        if self.roots:
            return (f"{shown} is outside the folders this server shares ({', '.join(map(str, self.roots))}). Upload "
                    "the file, or ask the admin to add its folder to FL_DATA_ROOTS.")
        return (f"{shown} is outside the folders this server shares: none, because it is shared (it listens on "
                f"{self.listens_on}) and FL_DATA_ROOTS is not set. Upload the file, or ask the admin to set "
                "FL_DATA_ROOTS to the folders users may read.")


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

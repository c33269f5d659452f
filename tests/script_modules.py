"""Import a script of ``bench/`` or ``scripts/`` (not packages) as a module, for tests of its pure parts."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def script_module(path: str) -> Iterator[ModuleType]:
    """The script at ``path`` (relative to the repository, e.g. ``bench/gpu_check.py``) as a module named after its
    file, registered in ``sys.modules`` while in use (its dataclasses look their module up there)."""
    name = Path(path).stem
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]

"""Import a script of ``bench/`` (not a package) as a module, for tests of its pure parts."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


@contextlib.contextmanager
def bench_script(name: str) -> Iterator[ModuleType]:
    """``bench/NAME.py`` as the module ``NAME``, registered in ``sys.modules`` while in use (its dataclasses look
    their module up there)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]

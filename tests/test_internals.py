"""Private internals of Streamlit and of ``threading`` are reached from one adapter module, :mod:`fl_ui.internals`:
each of them exists on a real Streamlit runtime with a connected session (an upgrade that moves one fails here, naming
it), the installed Streamlit lies in the range the adapter was written for, and no other module of the app reaches a
private name of Streamlit or of ``threading``."""

from __future__ import annotations

import ast
import asyncio
import functools
import threading
import time
from pathlib import Path

import pytest
import streamlit

from fl_ui import internals

REPO = Path(__file__).resolve().parent.parent
ADAPTER = "fl_ui/internals.py"
NOT_STREAMLITS = {"_version": "torch.Tensor._version (the in-place version counter)", "_exit": "os._exit"}
"""Private names that Streamlit's sources also define but that the app reaches on other libraries' objects."""


def app_modules(root: Path) -> list[Path]:
    """The shipped code: ``fl_core``, ``fl_ui`` and ``app.py``."""
    return sorted([*root.glob("fl_core/**/*.py"), *root.glob("fl_ui/**/*.py"), root / "app.py"])


def defined_names(paths: list[Path]) -> set[str]:
    """Every name the code at ``paths`` defines: functions, classes, assigned names and attributes, parameters,
    imports."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return names


@functools.cache
def streamlit_private_names() -> frozenset[str]:
    """The private names (``_x``, not dunders) that Streamlit's sources and the ``threading`` module define."""
    sources = [*Path(streamlit.__file__).parent.rglob("*.py"), Path(threading.__file__)]
    return frozenset(name for name in defined_names(sources) if name.startswith("_") and not name.startswith("__"))


def private_reaches(path: Path, own: set[str]) -> list[str]:
    """``line: name`` of each private name of Streamlit or ``threading`` that the module at ``path`` reaches: as an
    attribute (``x._name``), as a ``getattr``/``hasattr`` string, as ``threading._name``, or imported from a
    ``streamlit`` module."""
    theirs = streamlit_private_names() - own - set(NOT_STREAMLITS)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = None
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if node.attr in theirs or (isinstance(node.value, ast.Name) and node.value.id == "threading"):
                name = node.attr
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "hasattr", "setattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in theirs):
            name = node.args[1].value
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("streamlit"):
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            parts = [part for part in (node.module or "").split(".") if part.startswith("_")]
            name = ", ".join(private + parts) or None
        if name:
            found.append(f"{node.lineno}: {name}")
    return found


def modules_reaching_private_internals(root: Path) -> dict[str, list[str]]:
    """Module path (relative to ``root``) → the private Streamlit/``threading`` names it reaches."""
    paths = app_modules(root)
    own = defined_names(paths)
    reaches = {path.relative_to(root).as_posix(): private_reaches(path, own) for path in paths}
    return {module: names for module, names in reaches.items() if names}


@pytest.mark.slow
def test_only_the_adapter_reaches_private_internals() -> None:
    reaching = modules_reaching_private_internals(REPO)
    assert set(reaching) == {ADAPTER}, reaching
    assert any("_session_mgr" in line for line in reaching[ADAPTER])


def test_the_installed_streamlit_is_one_the_adapter_was_written_for() -> None:
    assert internals.version_supported(streamlit.__version__), (
        f"Streamlit {streamlit.__version__} is outside the versions fl_ui.internals was written for "
        f"({internals.versions_text()}): run tests/test_internals.py on it, fix what moved, then widen "
        "STREAMLIT_VERSIONS")
    assert internals.version_supported("1.67.3") and not internals.version_supported("1.68.0")
    assert not internals.version_supported("2.0.0") and not internals.version_supported("1.9.1")


class _Client:
    """A browser tab as Streamlit's session manager sees it (messages dropped)."""

    def write_forward_msg(self, msg) -> None:
        pass


@pytest.mark.slow
def test_every_internal_is_where_the_adapter_reaches_it_on_a_real_runtime(tmp_path: Path) -> None:
    """A real runtime with a session that uploads a file, disconnects (stored for a reconnect) and expires: the
    adapter lists, expires and clears it, and finds its uploads."""
    from streamlit.runtime import Runtime, RuntimeConfig
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
    from streamlit.runtime.memory_session_storage import MemorySessionStorage
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
    from streamlit.runtime.uploaded_file_manager import UploadedFileRec

    script = tmp_path / "page.py"
    script.write_text("import streamlit as st\nst.write('hello')\n")
    assert not Runtime.exists()

    async def exercise() -> None:
        runtime = Runtime(RuntimeConfig(str(script), MemoryMediaFileStorage("/media"),
                                        MemoryUploadedFileManager("/upload"),
                                        session_storage=MemorySessionStorage(ttl_seconds=1)))
        await runtime.start()
        try:
            session_id = runtime.connect_session(_Client(), {})
            live, dropped = internals.listed_sessions(runtime)
            session = live[session_id]
            assert internals.missing_internals(runtime, session) == [], (
                f"Streamlit {streamlit.__version__} moved internals that fl_ui.internals reaches (written for "
                f"{internals.versions_text()}): {internals.missing_internals(runtime, session)}")
            runtime.uploaded_file_mgr.add_file(session_id, UploadedFileRec("f", "f.bin", "application/x", b"x" * 10))
            assert internals.sessions_with_uploads(runtime.uploaded_file_mgr) == [session_id] and dropped == []
            runtime.disconnect_session(session_id)  # stored for a reconnect: still listed
            assert session_id in internals.listed_sessions(runtime)[0]
            await asyncio.sleep(1.2)
            live, dropped = internals.listed_sessions(runtime)
            assert session_id not in live and dropped == [session]
            session.shutdown()
            for _ in range(100):  # its script runner stops
                if not internals.script_running(session):
                    break
                await asyncio.sleep(0.05)
            assert not internals.script_running(session)
            internals.clear_session_state(session)
        finally:
            runtime.stop()
            await runtime.stopped
            Runtime._instance = None  # (the test's own runtime: the next test may start one)

    began = time.monotonic()
    asyncio.run(exercise())
    assert time.monotonic() - began < 60

"""Memory back to idle (:mod:`fl_ui.memory`): the model cache is bounded in bytes, loads each model once at a time,
keeps no failure, and releases what nobody used for a while; the janitor hands freed memory back."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from fl_core.errors import ModelSpecError
from fl_core.io.models import LoadedModel, load_model
from fl_core.io.preprocessing import InputConfig
from fl_ui.model_cache import ModelCache, model_bytes

FILTERS = 2**18 // 27  # about 1 MiB of float32 3×3×3 filters


def weights(name: str, filters: int = FILTERS) -> LoadedModel:
    return LoadedModel(spec=f"weights:{name}", label=name, model=None,
                       state_dict={"conv.weight": torch.zeros(filters, 3, 3, 3)}, input_config=InputConfig())


def test_a_model_is_counted_once_however_many_tensors_share_its_storage(demo) -> None:
    trained, _ = demo
    parameters = [*trained.model.parameters(), *trained.model.buffers()]
    assert model_bytes(trained) == sum(t.numel() * t.element_size() for t in parameters)
    assert model_bytes(weights("a")) == FILTERS * 27 * 4


def test_the_least_recently_used_models_leave_once_the_bytes_are_over_the_bound() -> None:
    loads = []
    cache = ModelCache(lambda name: loads.append(name) or weights(name), max_bytes=lambda: int(2.5 * 2**20))
    first = cache.get("a")
    cache.get("b")
    assert cache.get("a") is first  # used: now the most recent
    cache.get("c")
    assert loads == ["a", "b", "c"] and cache.get("a") is first and cache.size == 2 * model_bytes(first)
    cache.get("b")
    assert loads == ["a", "b", "c", "b"]  # "b" had left, not "a"
    huge = ModelCache(lambda name: weights(name, 4 * FILTERS), max_bytes=lambda: 2**20)
    assert huge.get("x") is huge.get("x")  # one model over the bound is still kept, alone


def test_a_model_is_loaded_once_for_every_thread_asking_at_once() -> None:
    loads, barrier = [], threading.Barrier(4)

    def slow(name: str) -> LoadedModel:
        loads.append(name)
        time.sleep(0.3)
        return weights(name)

    cache, got = ModelCache(slow), []
    threads = [threading.Thread(target=lambda: (barrier.wait(), got.append(cache.get("a")))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == ["a"] and len({id(model) for model in got}) == 1


def test_a_failed_load_is_not_kept() -> None:
    attempts = []

    def flaky(name: str) -> LoadedModel:
        attempts.append(name)
        if len(attempts) == 1:
            raise ModelSpecError("the hub is unreachable")
        return weights(name)

    cache = ModelCache(flaky)
    with pytest.raises(ModelSpecError):
        cache.get("a")
    assert cache.get("a").label == "a" and attempts == ["a", "a"]


def test_models_nobody_used_for_a_while_are_released() -> None:
    cache = ModelCache(weights, idle_s=0.2)
    old, kept = cache.get("old"), cache.get("kept")
    time.sleep(0.3)
    cache.get("kept")
    assert cache.release_idle() == model_bytes(old)
    assert cache.get("kept") is kept and cache.get("old") is not old


def test_the_apps_and_the_workers_models_go_through_the_bounded_cache() -> None:
    from fl_ui import cache, worker

    assert cache.get_model("demo:tiny_vgg") is cache.MODELS.get("demo:tiny_vgg", (), "")
    assert worker.worker_model("demo:tiny_vgg").label == load_model("demo:tiny_vgg").label
    assert worker.WORKER_MODELS.size > 0


class FakeSession:
    """What :func:`fl_ui.memory.release_closed_sessions` uses of Streamlit's ``AppSession``."""

    def __init__(self, name: str, uploads) -> None:
        self.id, self._scriptrunner, self._session_state, self.shut_down = name, None, {"upload": b"x" * 100}, False
        self.uploads = uploads

    def shutdown(self) -> None:
        self.shut_down = True
        self.uploads.remove_session_files(self.id)


def test_a_closed_sessions_state_and_uploads_are_released_once_it_leaves_streamlits_store(monkeypatch) -> None:
    """Streamlit drops an expired stored session without shutting it down, and its main loop may still hold the last
    session it served: the janitor shuts such sessions down, clears their state and drops orphaned uploads."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.caching.ttl_cache import TTLCache
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
    from streamlit.runtime.session_manager import SessionInfo
    from streamlit.runtime.uploaded_file_manager import UploadedFileRec

    from fl_ui import memory

    clock = [0.0]
    stored = TTLCache(maxsize=8, ttl=2, timer=lambda: clock[0])
    uploads = MemoryUploadedFileManager("/upload")
    active, closed, gone = (FakeSession(name, uploads) for name in ("active", "closed", "gone"))
    stored["closed"] = SessionInfo(client=None, session=closed)
    manager = type("Manager", (), {"_storage_lock": threading.Lock(), "list_sessions": lambda self: [
        SessionInfo(client=None, session=active), *stored.values()]})()
    manager._session_storage = type("Storage", (), {"_cache": stored})()
    for session in ("active", "closed", "gone", "unknown"):
        uploads.add_file(session, UploadedFileRec("f", "f.bin", "application/octet-stream", b"x" * 100))
    runtime = type("Runtime", (), {"_session_mgr": manager, "uploaded_file_mgr": uploads})()
    monkeypatch.setattr(Runtime, "exists", staticmethod(lambda: True))
    monkeypatch.setattr(Runtime, "instance", staticmethod(lambda: runtime))
    monkeypatch.setattr(memory, "_SESSIONS", memory.weakref.WeakSet([gone]))

    assert memory.release_closed_sessions() == 2  # "gone" (seen before, no longer listed), "unknown"'s uploads
    assert gone.shut_down and not gone._session_state and set(uploads.file_storage) == {"active", "closed"}
    clock[0] = 3.0
    assert memory.release_closed_sessions() == 1  # "closed" expired: dropped from the store and released
    assert closed.shut_down and not closed._session_state and not stored
    assert not active.shut_down and active._session_state and set(uploads.file_storage) == {"active"}

"""The upload store (:mod:`fl_ui.uploads`): content addressing, quota with least-recently-used eviction, age limit,
refusal of uploads that cannot fit, atomic writes, and the sweep of what a killed process leaves behind; and the
sidebar's use of it (AppTest)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from fl_core.errors import DataError
from fl_core.io.checkpoints import save_state_dict
from fl_ui.testing import page_app, shown
from fl_ui.uploads import CONTENTS, IN_USE_SECONDS, UploadStore, upload_store, write_atomically, writers_lock

from ..app_pages import app_pages
from ..conftest import REPO, TINY_MODELS
from ..test_hostile_uploads import _png

MIB = 2**20
HOUR = 3600.0


def store_in(folder: Path, quota_mb: float = 10, max_age_hours: float = 72, in_use_seconds: float = 60
             ) -> UploadStore:
    folder.mkdir(parents=True, exist_ok=True)
    return UploadStore(folder, int(quota_mb * MIB), max_age_hours * HOUR, in_use_seconds)


def last_used(path: Path, hours_ago: float) -> None:
    """Pretend ``path`` was last used ``hours_ago`` (a file: its access time; a folder: its modification time)."""
    when = time.time() - hours_ago * HOUR
    os.utime(path, (when, path.stat().st_mtime) if path.is_file() else (when, when))


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def stored(store: UploadStore, data: bytes, name: str) -> Path:
    """Add a checkpoint; the store entry holding it (its content's folder)."""
    return store.entry(store.add_checkpoint(data, name)[0])


def test_uploads_are_content_addressed_and_keep_the_users_file_name(tmp_path: Path) -> None:
    store = store_in(tmp_path / "uploads")
    path, created = store.add_checkpoint(b"weights", "Mine.PTH")
    assert created and path.name == "Mine.pth" and path.read_bytes() == b"weights"
    assert path.parent.parent == store.root and len(path.parent.name) == 24  # the folder: the content's hash
    assert store.add_checkpoint(b"weights", "Mine.PTH") == (path, False)
    renamed, created = store.add_checkpoint(b"weights", "renamed.pth")
    assert created and renamed == path.parent / "renamed.pth"  # same bytes: the same folder
    assert store.add_checkpoint(b"other", "Mine.pth")[0].parent != path.parent
    assert [entry.path for entry in store.entries()].count(path.parent) == 1
    folder = store.add_images([("a.png", _png()), ("b.png", _png(20))])
    assert folder.name.startswith("images-") and sorted(names(folder)) == [CONTENTS, "a.png", "b.png"]
    assert store.add_images([("a.png", _png()), ("b.png", _png(20))]) == folder
    assert not [n for n in names(store.root) if n.endswith(".part")]


def test_images_uploaded_together_are_each_kept_under_their_own_name(tmp_path: Path) -> None:
    """``a.png`` and ``a.jpg`` (one stem) are both kept; a dot-file is an image like any other, named without its dot
    (a name starting with a dot is hidden from the folder's listing)."""
    from fl_core.io.images import folder_images

    store = store_in(tmp_path / "uploads")
    folder = store.add_images([("a.png", _png(20)), ("a.jpg", _png(30)), ("A.tif", _png(40)), (".png", _png(50))])
    assert sorted(names(folder)) == [CONTENTS, "A-3.png", "a-2.png", "a.png", "png.png"]
    assert sorted(image.size for image, _ in folder_images(folder)) == [(20, 20), (30, 30), (40, 40), (50, 50)]


def test_a_refused_dot_file_upload_is_named_as_the_user_named_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.chdir(REPO)
    app = page_app(app_pages()[0].path, models=TINY_MODELS).run()
    app.file_uploader(key="ckpt_upload").set_value((".pt", b"not a checkpoint", "application/octet-stream"))
    app.button(key="ckpt_add").click().run()
    [error] = [shown(e) for e in app.sidebar.error]
    assert error.startswith(".pt: ") and str(tmp_path) not in error and "unsupported" in error, error


def test_the_quota_evicts_the_least_recently_used_uploads_first(tmp_path: Path) -> None:
    store = store_in(tmp_path / "uploads", quota_mb=3)
    a, b, c = (stored(store, bytes([i]) * MIB, f"{i}.pt") for i in range(3))
    last_used(a, 3)
    last_used(b, 2)
    last_used(c, 1)
    store.touch(a)  # a session selected it: now the most recently used, and in use
    d = stored(store, b"d" * MIB, "d.pt")
    assert names(store.root) == {a.name, c.name, d.name}  # b went first
    e = stored(store, b"e" * MIB, "e.pt")
    assert names(store.root) == {a.name, d.name, e.name}  # then c
    with pytest.raises(DataError, match=r"f\.pt .*does not fit right now.*FL_UPLOAD_QUOTA_MB.*used in the last 1 min"):
        store.add_checkpoint(b"f" * MIB, "f.pt")  # everything left is in use: nothing is evicted for it
    assert names(store.root) == {a.name, d.name, e.name}


def test_image_folders_count_and_are_evicted_like_files(tmp_path: Path) -> None:
    photos = [(f"{i}.png", _png(64)) for i in range(3)]
    store = store_in(tmp_path / "uploads")
    folder = store.add_images(photos)
    [(_, one_folder, _)] = store.entries()
    store = dataclasses.replace(store, quota_bytes=int(2.5 * one_folder))
    checkpoint = stored(store, b"x" * one_folder, "x.pt")
    last_used(folder, 5)
    last_used(checkpoint, 4)
    newer = store.add_images([*photos[:2], ("other.png", _png(63))])
    assert names(store.root) == {checkpoint.name, newer.name}


def test_labelled_sets_are_content_addressed_trees_counted_whole(tmp_path: Path) -> None:
    from ..io.test_image_archives import tree_members, zip_bytes

    store = store_in(tmp_path / "uploads")
    archive = [("val.zip", zip_bytes(tree_members("val/")))]
    folder = store.add_labelled_images(archive)
    assert store.add_labelled_images(archive) == folder and folder.name.startswith("images-")
    assert sorted(p.name for p in folder.iterdir()) == [CONTENTS, "n01440764", "n01443537"]
    [(_, size, _)] = store.entries()
    images = sum(p.stat().st_size for p in folder.rglob("*.png"))
    assert size == images + (folder / CONTENTS).stat().st_size and images > 0  # the class folders' images count
    with pytest.raises(DataError, match="outside the archive"):
        store.add_labelled_images([("evil.zip", zip_bytes({"../a.png": b"x"}))])
    assert names(store.root) == {folder.name}  # nothing kept of the refused upload, not even its temp folder


def test_a_stored_checkpoint_changed_on_the_server_is_replaced_by_the_new_upload(tmp_path: Path) -> None:
    """Issue 39: a tampered file was reused as it was (its path existed), and uploading the original again did not
    repair it."""
    store = store_in(tmp_path / "uploads")
    original = b"the original weights"
    path, _ = store.add_checkpoint(original, "net.pt")
    for tamper in (lambda: path.write_bytes(b"tampered weights!!!!"),  # same size, other bytes
                   lambda: path.write_bytes(original + b"!"),  # other size
                   lambda: (path.unlink(), path.symlink_to(tmp_path / "elsewhere.pt")),  # a link out
                   lambda: (path.unlink(), path.mkdir())):  # not a file
        (tmp_path / "elsewhere.pt").write_bytes(original)
        tamper()
        assert store.add_checkpoint(original, "net.pt") == (path, True)
        assert not path.is_symlink() and path.read_bytes() == original
    assert store.add_checkpoint(original, "net.pt") == (path, False)  # intact: reused
    shutil.rmtree(path.parent)
    path.parent.symlink_to(tmp_path)  # the folder itself replaced by a link
    assert store.add_checkpoint(original, "net.pt") == (path, True)
    assert not path.parent.is_symlink() and path.read_bytes() == original


def test_a_changed_upload_is_refused_when_a_link_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never served: the app's model cache loads an upload only while its SHA-256 is its address, and a folder of
    uploaded images only while its files are those stored."""
    from fl_ui.cache import load_verified

    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    store = upload_store()
    save_state_dict({"conv.weight": torch.randn(4, 3, 3, 3)}, tmp_path / "net.safetensors")
    path, _ = store.add_checkpoint((tmp_path / "net.safetensors").read_bytes(), "net.safetensors")
    assert load_verified(f"weights:{path}", (), "").weights_only
    save_state_dict({"conv.weight": torch.zeros(4, 3, 3, 3)}, path)  # changed on the server
    with pytest.raises(DataError, match="changed on the server after it was uploaded"):
        load_verified(f"weights:{path}", (), "")
    folder = store.add_images([("a.png", _png()), ("b.png", _png(20))])
    store.check_images(folder)
    (folder / "b.png").write_bytes(_png(21))
    with pytest.raises(DataError, match="changed on the server after they were stored"):
        store.check_images(folder)


def test_a_folder_of_images_changed_on_the_server_is_replaced_by_the_new_upload(tmp_path: Path) -> None:
    from fl_core.io.images import folder_images

    store = store_in(tmp_path / "uploads")
    photos = [("a.png", _png()), ("b.png", _png(20))]
    folder = store.add_images(photos)
    (tmp_path / "secret.png").write_bytes(_png(30))
    for tamper in (lambda: (folder / "a.png").write_bytes(_png(33)),  # a file changed
                   lambda: (folder / "c.png").write_bytes(_png(33)),  # a file added
                   lambda: (folder / "b.png").unlink(),  # a file removed
                   lambda: ((folder / "a.png").unlink(), (folder / "a.png").symlink_to(tmp_path / "secret.png")),
                   lambda: (folder / CONTENTS).write_text("{}")):  # its list emptied
        tamper()
        assert store.add_images(photos) == folder
        assert sorted(names(folder)) == [CONTENTS, "a.png", "b.png"] and not (folder / "a.png").is_symlink()
        assert sorted(image.size for image, _ in folder_images(folder)) == [(16, 16), (20, 20)]


def test_uploads_unused_past_the_age_limit_are_swept(tmp_path: Path) -> None:
    store = store_in(tmp_path / "uploads", max_age_hours=1)
    old = stored(store, b"old", "old.pt")
    recent = stored(store, b"recent", "recent.pt")
    old_images = store.add_images([("a.png", _png())])
    last_used(old, 2)
    last_used(recent, 0.5)
    last_used(old_images, 2)
    store.sweep()
    assert names(store.root) == {recent.name}


def test_nothing_used_in_the_last_minutes_is_removed_even_past_the_age_limit(tmp_path: Path) -> None:
    store = store_in(tmp_path / "uploads", max_age_hours=0, in_use_seconds=IN_USE_SECONDS)
    path, _ = store.add_checkpoint(b"in use", "a.pt")
    store.sweep()
    assert path.exists()


def test_an_upload_that_cannot_fit_the_quota_is_refused_before_anything_is_written(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    store = store_in(tmp_path / "uploads", quota_mb=1)
    kept = stored(store, b"k" * 1000, "kept.pt")
    last_used(kept, 5)
    writes = []
    monkeypatch.setattr(os, "replace", lambda *args: writes.append(args))
    with pytest.raises(DataError, match=r"big\.safetensors \(2 MiB\) cannot fit: .*at most 1 MiB.*FL_UPLOAD_QUOTA_MB"):
        store.add_checkpoint(b"x" * 2 * MIB, "big.safetensors")
    with pytest.raises(DataError, match=r"2 images \(2 MiB\) cannot fit"):
        store.add_images([("a.png", b"x" * MIB), ("b.png", b"y" * MIB)])
    assert names(store.root) == {kept.name} and not writes  # nothing written, nothing evicted for it


@pytest.mark.slow
def test_readers_never_see_part_of_a_file_being_replaced(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    versions = (b"a" * 4 * MIB, b"b" * 4 * MIB)
    write_atomically(path, versions[0])
    stop, seen = threading.Event(), set()

    def keep_replacing() -> None:
        for i in range(60):
            write_atomically(path, versions[i % 2])
        stop.set()

    writer = threading.Thread(target=keep_replacing)
    writer.start()
    while not stop.is_set():
        seen.add(path.read_bytes()[::MIB // 4])  # a sample of every version read: one letter, full length
    writer.join()
    assert seen <= {v[::MIB // 4] for v in versions} and names(tmp_path) == {"weights.pt"}


KILLED_WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from fl_ui import uploads

    def hang(*args):
        print("writing", flush=True)
        time.sleep(120)

    store = uploads.UploadStore(Path(sys.argv[1]), 2**30, 3600.0)
    if sys.argv[2] == "checkpoint":
        os.fsync = hang  # the data is written, not yet fsynced nor renamed into place
        store.add_checkpoint(b"w" * 2**20, "killed.pt")
    else:
        real = uploads.save_uploaded_images
        uploads.save_uploaded_images = lambda files, folder: (real(files[:1], folder), hang())
        store.add_images([("a.png", open(sys.argv[3], "rb").read())] * 2)
""")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["checkpoint", "images"])
def test_a_writer_killed_mid_upload_leaves_only_a_part_entry_that_the_sweep_removes(kind: str, tmp_path: Path
                                                                                   ) -> None:
    """``kill -9`` in the middle of an upload: no entry a spec could name appears, and the leftover is swept."""
    uploads, png = tmp_path / "uploads", tmp_path / "a.png"
    uploads.mkdir()
    png.write_bytes(_png())
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(uploads), kind, str(png)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    leftovers = [uploads / name for name in names(uploads)]
    assert len(leftovers) == 1 and leftovers[0].name.endswith(".part"), leftovers
    store = store_in(uploads)
    assert store.entries() == []
    store.sweep()
    assert leftovers[0].exists()  # written to a moment ago: it may still be another process's upload
    os.utime(leftovers[0], (time.time() - 2 * store.in_use_seconds,) * 2)
    store.sweep()
    assert names(uploads) == set()


LOCKED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from fl_ui.uploads import UploadStore

    store = UploadStore(Path(sys.argv[1]), 2**30, 3600.0)
    print("adding", flush=True)
    store.add_checkpoint(b"from another replica", "other.pt")
    print(time.time(), flush=True)
""")


@pytest.mark.slow
def test_another_process_waits_for_the_writer_lock(tmp_path: Path) -> None:
    """Two app replicas sharing the folder: an upload lands only when the other's making room is over."""
    store = store_in(tmp_path / "uploads")
    with writers_lock(store.root):
        other = subprocess.Popen([sys.executable, "-c", LOCKED_WRITER, str(store.root)], cwd=REPO,
                                 stdout=subprocess.PIPE, text=True)
        assert other.stdout.readline().strip() == "adding"
        time.sleep(1.5)
        assert other.poll() is None and len(names(store.root)) == 0  # it waits for the lock
        released = time.time()
    landed = float(other.stdout.readline())
    assert other.wait(timeout=60) == 0 and landed >= released and len(names(store.root)) == 1


MANY_WRITERS = textwrap.dedent("""
    import hashlib, sys
    from pathlib import Path
    from fl_ui.uploads import UploadStore

    store = UploadStore(Path(sys.argv[1]), 3 * 2**20, 3600.0, in_use_seconds=0)
    for i in range(4):
        store.add_checkpoint(hashlib.sha256(f"{sys.argv[2]}-{i}".encode()).digest() * 2**15, "upload.pt")
        total = sum(entry.size for entry in store.entries())
        print(total, flush=True)
""")


@pytest.mark.slow
def test_writers_in_several_processes_keep_the_quota_and_whole_files(tmp_path: Path) -> None:
    """Six processes each land four 1 MiB uploads at once into a 3 MiB store: every upload lands, the store never
    holds more than the quota after a landing, and what remains is whole, named by its content."""
    root = tmp_path / "uploads"
    root.mkdir()
    writers = [subprocess.Popen([sys.executable, "-c", MANY_WRITERS, str(root), str(n)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(6)]
    outputs = [writer.communicate(timeout=300) for writer in writers]
    assert all(writer.returncode == 0 for writer in writers), [err[-1000:] for _, err in outputs]
    totals = [int(line) for out, _ in outputs for line in out.split()]
    assert len(totals) == 24 and max(totals) <= 3 * MIB
    kept = [root / name for name in names(root)]
    assert 1 <= len(kept) <= 3 and not [entry for entry in kept if entry.name.endswith(".part")]
    for entry in kept:  # a folder named by its content, holding the upload under its name
        [upload] = entry.iterdir()
        assert upload.name == "upload.pt" and hashlib.sha256(upload.read_bytes()).hexdigest()[:24] == entry.name


@pytest.mark.slow
def test_an_upload_another_replica_used_after_the_listing_is_not_evicted(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_in(tmp_path / "uploads", quota_mb=1)
    old, _ = store.add_checkpoint(b"o" * 600_000, "old.pt")
    last_used(store.entry(old), 5)
    stale_listing = store.entries()
    store.touch(old)  # another replica's session selects it now
    monkeypatch.setattr(UploadStore, "entries", lambda self: stale_listing)
    with pytest.raises(DataError, match="does not fit right now"):
        store.add_checkpoint(b"n" * 600_000, "new.pt")
    assert old.exists()


@pytest.mark.slow
def test_the_first_use_of_the_store_in_a_process_sweeps_leftovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    stale, fresh = uploads / ".0123.part", uploads / ".4567.part"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"being written")
    os.utime(stale, (time.time() - 2 * IN_USE_SECONDS,) * 2)
    expired = uploads / "abcdef.pt"
    expired.write_bytes(b"old")
    os.utime(expired, (time.time() - 100 * HOUR,) * 2)
    monkeypatch.setenv("FL_UPLOAD_DIR", str(uploads))
    monkeypatch.setenv("FL_UPLOAD_MAX_AGE_HOURS", "72")
    store = upload_store()
    assert store.root == uploads and store.max_age_seconds == 72 * HOUR
    assert names(uploads) == {fresh.name}


def _app_with_upload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quota_mb: str = "4096"):
    """The default page with a small checkpoint uploaded through the sidebar's real flow."""
    uploads, checkpoint = tmp_path / "uploads", tmp_path / "mine.safetensors"
    save_state_dict({"conv.weight": torch.randn(8, 3, 3, 3)}, checkpoint)
    monkeypatch.setenv("FL_UPLOAD_DIR", str(uploads))
    monkeypatch.setenv("FL_UPLOAD_QUOTA_MB", quota_mb)
    monkeypatch.chdir(REPO)
    app = page_app(app_pages()[0].path, models=TINY_MODELS).run()
    app.file_uploader(key="ckpt_upload").set_value((checkpoint.name, checkpoint.read_bytes(), "application/x"))
    app.button(key="ckpt_add").click().run()
    return app, uploads


@pytest.mark.slow
def test_the_sidebar_refuses_an_upload_larger_than_the_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app, uploads = _app_with_upload(tmp_path, monkeypatch, quota_mb="0.0001")
    assert not app.exception
    assert [shown(e) for e in app.sidebar.error if "FL_UPLOAD_QUOTA_MB" in shown(e) and "mine.safetensors" in shown(e)]
    assert list(uploads.iterdir()) == [] and app.session_state["selection"].specs == ("demo:tiny_vgg",
                                                                                     "demo:tiny_vgg_init")


@pytest.mark.slow
def test_the_sidebar_marks_selected_uploads_used_without_changing_their_file_stamp(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    app, uploads = _app_with_upload(tmp_path, monkeypatch)
    assert not app.exception and not app.sidebar.error
    [folder] = uploads.iterdir()
    [path] = folder.iterdir()
    assert path.name == "mine.safetensors" and app.session_state["selection"].specs[-1] == f"weights:{path}"
    assert "weights: mine.safetensors" in app.multiselect(key="model_picker").format_func(f"weights:{path}")
    assert any("In full: " in shown(c) and "weights: mine.safetensors" in shown(c) for c in app.sidebar.caption)
    last_used(folder, 10)
    stamp = path.stat().st_mtime_ns
    app.run()
    assert time.time() - folder.stat().st_mtime < 60 and path.stat().st_mtime_ns == stamp  # the model cache's key


@pytest.mark.slow
def test_a_session_whose_upload_was_evicted_gets_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    app, uploads = _app_with_upload(tmp_path, monkeypatch)
    app.multiselect(key="model_picker").set_value([app.session_state["selection"].specs[-1]]).run()
    assert not app.exception and not app.error
    [folder] = uploads.iterdir()
    shutil.rmtree(folder)  # what eviction does to an upload nobody used for a while
    app.run()
    assert not app.exception
    assert any("No checkpoint file at" in shown(e) for e in app.error), [shown(e) for e in app.error]

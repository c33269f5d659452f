"""One path policy at every door (DESIGN: "one rule per concern, one place that enforces it"): on a server with one
data root, a file outside it and a symlink inside it that leads out are refused, with the same message, by every
entry point that takes a path: the library and the command line, every URL value and form of the dashboard that
names a file or a folder, the Survey page's list, the Report page's folder, and a job sent to a worker. Every door
that writes (a result's file and table, a re-score's resume file, Training Lab run folders, the command line's
outputs) refuses a path outside the root before it creates anything, no parent folder included. A library user
without ``FL_DATA_ROOTS`` keeps reading and writing any path."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_core.channelaxes.estimate import ChannelsEstimate
from fl_core.cli import main as cli_main
from fl_core.errors import DataError, FilterLensError
from fl_core.firstlayer.energy import EnergySettings
from fl_core.firstlayer.whitening import WhiteningSettings
from fl_core.io.checkpoints import save_state_dict
from fl_core.io.cifar import CIFAR10_CLASSES
from fl_core.io.images import folder_images, open_images
from fl_core.io.models import load_model
from fl_core.io.paths import ASSETS_DIR, PathPolicy, data_roots, reading_for
from fl_core.io.resultfiles import load_result
from fl_core.lab.experiments import run_suite
from fl_core.lab.runs import load_run, train_run
from fl_core.lab.settings import RunSettings
from fl_core.masterkeys.rescore import rescore
from fl_core.report.build import ReportSettings
from fl_core.report.series import load_series
from fl_core.survey.analysis import SurveySettings
from fl_core.survey.models import survey_models
from fl_ui import jobs
from fl_ui.testing import page_app, shown

from .app_pages import app_pages
from .cifar_files import write_cifar
from .conftest import REPO
from .test_hostile_uploads import _png


@dataclass(frozen=True)
class Server:
    """A server's files: ``root`` (its one data root) holds ``inside`` files and symlinks that lead out of it."""

    root: Path
    weights: Path
    photos: Path
    checkpoints: Path
    models_list: Path
    result: Path
    run: Path
    cifar: Path

    def link(self, target: Path) -> Path:
        """The symlink inside the root that leads to ``target`` outside it."""
        return self.root / f"link-{target.name}"

    def both(self, target: Path) -> tuple[Path, Path]:
        """The file or folder outside the root, and the symlink to it inside."""
        return target, self.link(target)


def refusal(path: Path | str, writing: bool = False) -> str:
    """The one message every door gives for ``path`` (reading it, or ``writing`` it)."""
    return PathPolicy(roots=data_roots()).error(path, writing=writing)


def small_result() -> ChannelsEstimate:
    """A result to save (a channel-analysis estimate: no computation needed)."""
    return ChannelsEstimate(seconds=1.0, stages={"statistics": 1.0}, macs_per_second=2.0)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Server:
    root, private = tmp_path / "shared", tmp_path / "private"
    (root / "ok").mkdir(parents=True)
    (private / "photos").mkdir(parents=True)
    (private / "checkpoints").mkdir()
    weights = private / "private.safetensors"
    for path in (weights, private / "checkpoints" / "ckpt_1.safetensors", root / "ok" / "mine.safetensors"):
        save_state_dict({"conv.weight": torch.randn(8, 3, 3, 3)}, path)
    (private / "photos" / "fish.png").write_bytes(_png(40))
    cifar = write_cifar(private, "cifar10", list(CIFAR10_CLASSES), (np.zeros((2, 32, 32, 3), np.uint8), [0, 1]))
    (private / "models.txt").write_text(f"weights:{weights}\n")
    small_result().save(private / "estimate.flr")
    shutil.copytree(ASSETS_DIR / "runs" / "lab_vgg_true_s0", private / "run")
    found = Server(root, weights, private / "photos", private / "checkpoints", private / "models.txt",
                   private / "estimate.flr", private / "run", cifar)
    for target in (found.weights, found.photos, found.checkpoints, found.models_list, found.result, found.run,
                   found.cifar, private):
        found.link(target).symlink_to(target)
    monkeypatch.setenv("FL_DATA_ROOTS", str(root))
    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("FL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(REPO)
    return found


LIBRARY_DOORS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "weights:PATH": ("weights", lambda p: load_model(f"weights:{p}")),
    "NAME=PATH": ("weights", lambda p: load_model(f"timm:resnet18={p}")),
    "onnx:PATH": ("weights", lambda p: load_model(f"onnx:{p}")),
    "image folder": ("photos", folder_images),
    "cifar10:PATH": ("cifar", lambda p: open_images(f"cifar10:{p}")),
    "report folder": ("checkpoints", lambda p: load_series([f"weights:{p}"])),
    "survey spec": ("weights", lambda p: survey_models([f"weights:{p}"], limit=5)),
    "survey list": ("models_list", lambda p: survey_models(files=[p], limit=5)),
    "survey folder": ("checkpoints", lambda p: survey_models(folders=[p], limit=5)),
    "load_result": ("result", load_result),
    "Result.load": ("result", ChannelsEstimate.load),
    "run folder": ("run", load_run),
}

WRITING_DOORS: dict[str, Callable[[Path], object]] = {
    "Result.save": lambda p: small_result().save(p),
    "Result.to_csv": lambda p: small_result().to_csv(p),
    "rescore resume": lambda p: rescore("demo:tiny_vgg", resume=p),
    "train_run folder": lambda p: train_run(RunSettings(), p),
    "run_suite folder": lambda p: run_suite([], p),
}
"""Every library function that writes at a path its caller names."""


@pytest.mark.parametrize("linked", [False, True], ids=["outside", "symlink out"])
@pytest.mark.parametrize("door", LIBRARY_DOORS)
def test_every_library_door_refuses_paths_outside_the_data_root(server: Server, door: str, linked: bool) -> None:
    target, function = LIBRARY_DOORS[door]
    path = server.both(getattr(server, target))[linked]
    with pytest.raises(DataError) as refused:
        function(path)
    assert str(refused.value) == refusal(path)


def writing_targets(server: Server) -> list[Path]:
    """Where a door must not write: a file outside the root (it exists: it must stay as it is), a new file in new
    folders outside it, and the same through a symlink inside the root that leads out."""
    outside = server.weights.parent
    (outside / "notes.txt").write_text("19 bytes of notes.\n")
    return [outside / "notes.txt", outside / "new" / "deeper" / "out.flr", server.link(outside) / "notes.txt",
            server.link(outside) / "made" / "out.flr"]


def tree(folder: Path) -> dict[Path, bytes | None]:
    """Every entry under ``folder``: a file's bytes, ``None`` for a folder."""
    return {path: path.read_bytes() if path.is_file() else None for path in folder.rglob("*")}


@pytest.mark.parametrize("door", WRITING_DOORS)
def test_every_writing_door_refuses_paths_outside_the_data_root_and_creates_nothing(server: Server, door: str
                                                                                     ) -> None:
    targets = writing_targets(server)
    before = tree(server.weights.parent)
    for path in targets:
        with pytest.raises(DataError) as refused:
            WRITING_DOORS[door](path)
        assert str(refused.value) == refusal(path, writing=True)
    assert tree(server.weights.parent) == before  # nothing changed, nothing new, not even a parent folder


def test_writing_doors_write_inside_the_data_root_and_the_runs_folder(server: Server) -> None:
    inside = server.root / "ok" / "results" / "estimate.flr"
    assert load_result(small_result().save(inside)) == small_result()
    written = small_result().to_csv(server.root / "ok" / "estimate.csv")
    assert written == (server.root / "ok" / "estimate.csv").read_bytes().decode() and "\r\n" in written
    assert run_suite([], Path(os.environ["FL_RUNS_DIR"]) / "suite") == []  # the runs folder is the library's own


def test_the_command_line_refuses_to_write_outside_before_it_runs(server: Server,
                                                                  capsys: pytest.CaptureFixture) -> None:
    for option in ("--json", "--csv"):
        for path in writing_targets(server):
            assert cli_main(["energy", "--model", "demo:tiny_vgg", option, str(path), "--quiet"]) == 2
            assert capsys.readouterr().err == f"error: {refusal(path, writing=True)}\n"
    assert (server.weights.parent / "notes.txt").read_text() == "19 bytes of notes.\n"
    assert cli_main(["inspect", "--model", "demo:tiny_vgg", "--csv", str(server.root / "ok" / "t.csv"),
                     "--quiet"]) == 0


def test_the_command_line_refuses_with_the_one_line_message(server: Server, capsys: pytest.CaptureFixture) -> None:
    for path in server.both(server.weights):
        assert cli_main(["inspect", "--model", f"weights:{path}", "--quiet"]) == 2
        assert capsys.readouterr().err == f"error: {refusal(path)}\n"


def test_a_file_in_a_shared_folder_that_links_out_is_refused(server: Server) -> None:
    mixed = server.root / "ok"
    (mixed / "fish.png").write_bytes(_png(40))
    (mixed / "secret.png").symlink_to(server.photos / "fish.png")
    with pytest.raises(DataError) as refused:
        folder_images(mixed)
    assert str(refused.value) == refusal(mixed / "secret.png")


def test_files_inside_the_data_root_are_read(server: Server) -> None:
    assert load_model(f"weights:{server.root / 'ok' / 'mine.safetensors'}").weights_only
    assert survey_models([f"weights:{server.root / 'ok' / 'mine.safetensors'}", "demo:tiny_vgg"], limit=5)


def test_an_image_is_checked_on_the_file_actually_opened(server: Server) -> None:
    """A symlink swapped in after the folder was listed is not followed out of the root; a FIFO swapped in is refused
    without blocking."""
    folder = server.root / "ok"
    (folder / "a.png").write_bytes(_png(40))
    (folder / "b.png").write_bytes(_png(40))
    images = folder_images(folder)
    assert images.image(0).size == (40, 40)
    (folder / "a.png").unlink()
    (folder / "a.png").symlink_to(server.photos / "fish.png")
    with pytest.raises(DataError) as refused:
        images.image(0)
    assert str(refused.value) == refusal(folder / "a.png")
    (folder / "b.png").unlink()
    os.mkfifo(folder / "b.png")
    with pytest.raises(DataError, match=r"b\.png is a FIFO"):
        images.image(1)


def test_a_set_is_decoded_under_the_policy_it_was_listed_under(server: Server, tmp_path: Path) -> None:
    """A session's upload folder is shared by its policy, not by the environment's: the threads and processes that
    decode a set later (DataLoader workers, a worker's decoding threads) check what the listing checked."""
    store = tmp_path / "uploads"
    (store / "images-ab").mkdir(parents=True)
    (store / "images-ab" / "a.png").write_bytes(_png(24))
    with reading_for(PathPolicy(roots=data_roots(), stores=(store,))):
        images = folder_images(store / "images-ab")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a new thread: no session context
        assert pool.submit(images.image, 0).result().size == (24, 24)
        assert pool.submit(images.subset([0]).image, 0).result().size == (24, 24)
        (store / "images-ab" / "a.png").unlink()
        (store / "images-ab" / "a.png").symlink_to(server.photos / "fish.png")
        with pytest.raises(DataError, match="outside the folders this server shares"):
            pool.submit(images.image, 0).result()


@pytest.mark.parametrize("door", LIBRARY_DOORS)
def test_a_library_user_without_data_roots_reads_any_path(server: Server, door: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FL_DATA_ROOTS")
    target, function = LIBRARY_DOORS[door]
    for path in server.both(getattr(server, target)):
        try:
            function(path)
        except FilterLensError as err:  # whatever else the file is (not ONNX, not a ResNet): never the policy
            assert "outside the folders" not in str(err)


@pytest.mark.parametrize("door", ["Result.save", "Result.to_csv"])
def test_a_library_user_without_data_roots_writes_any_path(server: Server, door: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FL_DATA_ROOTS")
    folder = server.link(server.weights.parent) / "new"
    WRITING_DOORS[door](folder / "out")
    assert (server.weights.parent / "new").is_dir()


def test_the_upload_folder_shares_its_entries_never_itself(tmp_path: Path) -> None:
    store = tmp_path / "uploads"
    (store / "ab12").mkdir(parents=True)
    policy = PathPolicy(roots=(), stores=(store,), listens_on="0.0.0.0")
    assert policy.error(store / "ab12" / "mine.pt") is None
    assert "FL_DATA_ROOTS is not set" in policy.error(store)
    assert "it listens on 0.0.0.0" in policy.error(tmp_path / "elsewhere.pt")


# ------------------------------------------------------------------------------------------- the dashboard's doors


def errors_of(app, where) -> list[str]:
    assert not app.exception, [e.value for e in app.exception]
    return [shown(e) for e in where.error]


@pytest.mark.slow
def test_every_url_value_and_sidebar_form_refuses_with_the_same_message(server: Server) -> None:
    file, link = server.both(server.weights)
    folder, folder_link = server.both(server.photos)
    specs = [f"weights:{file}", f"weights:{link}", f"timm:resnet18={file}", f"onnx:{link}"]
    app = page_app(app_pages()[0].path, models=",".join(["demo:tiny_vgg", *specs]), images=str(folder_link)).run()
    paths = [file, link, file, link, folder_link]
    assert errors_of(app, app.sidebar) == [refusal(path) for path in paths]
    assert app.session_state["selection"].specs == ("demo:tiny_vgg",)
    assert app.session_state["selection"].images == "bundled"

    for path in (file, link):  # the architecture form
        app.text_input(key="reg_name").input(f"resnet18={path}")
        app.button(key="reg_add").click().run()
        assert errors_of(app, app.sidebar) == [refusal(path)]
    app.radio(key="img_choice").set_value("folder on the server").run()
    for path in (folder, folder_link):  # the image folder form
        app.text_input(key="img_folder").input(str(path)).run()
        assert errors_of(app, app.sidebar) == [refusal(path)]
    for path in server.both(server.cifar):  # the same form, a CIFAR source
        app.text_input(key="img_folder").input(f"cifar10:{path}@train").run()
        assert errors_of(app, app.sidebar) == [refusal(path)]
    assert app.session_state["selection"].specs == ("demo:tiny_vgg",)
    assert app.session_state["selection"].images == "bundled"


@pytest.mark.slow
def test_a_cifar_source_in_the_url_is_checked_on_its_path_and_served_inside_the_root(server: Server) -> None:
    """``cifar10:PATH`` in a link is refused with the policy's message for PATH; inside the root it is the page's
    data, its patch statistics computed by a worker of the engine."""
    link = server.link(server.cifar)
    app = page_app("views/energy_profiles.py", models="demo:tiny_vgg", images=f"cifar10:{link}").run()
    assert errors_of(app, app.sidebar) == [refusal(link)]
    assert app.session_state["selection"].images == "bundled"
    inside = server.root / "ok"
    write_cifar(inside, "cifar10", list(CIFAR10_CLASSES), (np.random.default_rng(0).integers(
        0, 256, (6, 32, 32, 3), dtype=np.uint8), [0, 1, 2, 3, 4, 5]))
    app = page_app("views/energy_profiles.py", models="demo:tiny_vgg", images=f"cifar10:{inside}@train").run()
    assert errors_of(app, app.sidebar) == [] and errors_of(app, app.main) == []
    assert app.session_state["selection"].images == f"cifar10:{inside}@train"
    assert any(f"6 images of the CIFAR-10 train split in {inside}" in shown(c) for c in app.caption)


@pytest.mark.slow
@pytest.mark.parametrize("linked", [False, True], ids=["outside", "symlink out"])
def test_the_report_folder_refuses_with_the_same_message(server: Server, linked: bool) -> None:
    path = server.both(server.checkpoints)[linked]
    app = page_app("views/report.py", models="demo:tiny_vgg", report_dir=str(path)).run()
    assert errors_of(app, app.main) == [refusal(path)]
    assert "report_dir" not in app.query_params or not app.query_params["report_dir"]


@pytest.mark.slow
def test_the_survey_list_refuses_with_the_same_message(server: Server) -> None:
    app = page_app("views/survey.py", models="demo:tiny_vgg").run()
    for path in server.both(server.weights):
        app.text_area(key="survey_models").input(f"demo:tiny_vgg\nweights:{path}").run()  # checked as typed
        assert errors_of(app, app.main) == [refusal(path)]
        assert "survey_run" not in [button.key for button in app.main.button]
        assert not [row for row in app.dataframe if "private" in row.value.to_string()]  # nothing surveyed


@pytest.mark.slow
def test_a_job_sent_to_a_worker_opens_files_under_the_submitting_sessions_policy(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's own environment shares everything (no ``FL_DATA_ROOTS``): the job brings the session's policy."""
    from fl_ui.engine import Engine

    policy = PathPolicy(roots=data_roots())
    monkeypatch.delenv("FL_DATA_ROOTS")
    file, link = server.both(server.weights)
    folder_link = server.link(server.photos)
    checkpoints, checkpoints_link = server.both(server.checkpoints)
    requests = {
        file: (jobs.energy_job, jobs.EnergyRequest(((f"weights:{file}", ()),), "bundled", EnergySettings(), False,
                                                   "cpu")),
        link: (jobs.whitening_job, jobs.WhiteningRequest(((f"weights:{link}", ()),), "bundled",
                                                         WhiteningSettings(), "cpu")),
        folder_link: (jobs.energy_job, jobs.EnergyRequest((("demo:tiny_vgg", ()),), str(folder_link),
                                                          EnergySettings(), False, "cpu")),
        checkpoints: (jobs.report_job, jobs.ReportRequest(((f"weights:{checkpoints}", ()),), ("",), ReportSettings(),
                                                          "cpu")),
    }
    engine = Engine(workers=1)
    try:
        engine.wait_for_workers()
        with reading_for(policy):
            submitted = {path: engine.submit(function, request) for path, (function, request) in requests.items()}
            row = engine.submit(jobs.survey_row_job, jobs.SurveyRowRequest(f"weights:{checkpoints_link}",
                                                                            SurveySettings(), "cpu"))
        for path, job in submitted.items():
            with pytest.raises(FilterLensError) as refused:
                job.wait()
            assert str(refused.value) == policy.error(path)
        assert row.wait().error == policy.error(checkpoints_link)
        assert engine.submit(jobs.energy_job, requests[file][1]).wait().models  # outside the session: no policy
    finally:
        engine.close()

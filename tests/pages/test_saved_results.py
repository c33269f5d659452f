"""The Saved results page (``filterlens app --results DIR``): the ``.flr`` files of the folder, newest first, each with
its family's figures and table as they were saved; a folder outside the path policy, a bad file and a hostile URL
value are refused in words."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import fl_core
from fl_core.cli.app import RESULTS_DIR_ENV
from fl_ui.savedresults import family_of, figure_explanation, models_of, saved_files
from fl_ui.testing import shown

from ..conftest import page_app

PAGE = "views/saved_results.py"
BANK = "demo:ppocrv6_det_small_dw7"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with an energy result (older) and, in a subfolder, a master-key result (newer)."""
    folder = tmp_path_factory.mktemp("results")
    photos = fl_core.open_images("bundled").subset(range(3))
    energy = fl_core.analyze_energy("demo:tiny_vgg", photos, seeds=2, progress=False).save(folder / "energy.flr")
    (folder / "keys").mkdir()
    keys = fl_core.analyze_master_keys(BANK, k=4, restarts=1, progress=False).save(folder / "keys" / "bank.flr")
    os.utime(energy, (1_700_000_000, 1_700_000_000))
    os.utime(keys, (1_700_000_100, 1_700_000_100))
    (folder / "notes.txt").write_text("not a result")
    return folder


def test_the_folder_lists_its_results_newest_first_each_named_by_family_and_models(saved: Path) -> None:
    files = saved_files(saved)
    assert [file.name for file in files] == ["keys/bank.flr", "energy.flr"]
    energy = fl_core.load_result(saved / "energy.flr")
    assert family_of(energy) == "energy" and models_of(energy) == ["tiny_vgg (demo:tiny_vgg)"]
    assert figure_explanation(energy, "profile") and "``" not in figure_explanation(energy, "profile")


@pytest.mark.slow
def test_the_page_shows_the_newest_result_then_the_one_the_url_names(saved: Path, monkeypatch) -> None:
    monkeypatch.setenv(RESULTS_DIR_ENV, str(saved))
    app = page_app(PAGE).run()
    assert not app.exception and not app.error, [shown(e) for e in (*app.exception, *app.error)]
    assert list(app.dataframe[0].value["file"]) == ["keys/bank.flr", "energy.flr"]
    assert any("The **masterkeys** analysis of" in shown(text) for text in app.markdown)
    keys = fl_core.load_result(saved / "keys" / "bank.flr")
    assert len(app.get("plotly_chart")) == len(keys.plot_kinds())
    app = page_app(PAGE, file="energy.flr").run()
    assert not app.exception and not app.error
    assert any("tiny_vgg (demo:tiny_vgg)" in shown(text) for text in app.markdown)
    energy = fl_core.load_result(saved / "energy.flr")
    charts = app.get("plotly_chart")
    assert len(charts) == len(energy.plot_kinds())
    titles = [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in charts]
    assert titles == [energy.plot(kind).layout.title.text for kind in energy.plot_kinds()]
    table = app.table[-1].value  # the screen's table: it wraps on a projector; the spec is named above it
    assert table.columns[0] == "model" and "spec" not in table.columns


@pytest.mark.slow
def test_a_hostile_file_value_falls_back_and_a_bad_file_is_refused_in_words(saved: Path, tmp_path: Path,
                                                                          monkeypatch) -> None:
    monkeypatch.setenv(RESULTS_DIR_ENV, str(saved))
    app = page_app(PAGE, file="../../etc/passwd").run()
    assert not app.exception
    assert any("The **masterkeys** analysis of" in shown(text) for text in app.markdown)  # the newest, as by default
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "fake.flr").write_bytes(b"PK not a zip")
    monkeypatch.setenv(RESULTS_DIR_ENV, str(broken))
    app = page_app(PAGE).run()
    assert not app.exception and any("is not a readable FilterLens result file" in shown(e) for e in app.error)


def test_without_a_folder_the_page_says_how_to_name_one(monkeypatch) -> None:
    monkeypatch.delenv(RESULTS_DIR_ENV, raising=False)
    app = page_app(PAGE).run()
    assert not app.exception and any("filterlens app --results DIR" in shown(info) for info in app.info)


def test_the_app_command_takes_an_existing_results_folder(tmp_path: Path, capsys) -> None:
    from fl_core.cli import main

    assert main(["app", "--results", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--results" in err and "no such folder" in err


def test_a_shared_server_lets_every_session_read_the_results_folder_and_nothing_beside_it(
        saved: Path, tmp_path: Path, monkeypatch) -> None:
    from fl_core.errors import DataError
    from fl_core.io.paths import check_readable, reading_for
    from fl_ui import paths

    monkeypatch.setattr(paths, "shared_address", lambda: "0.0.0.0")
    monkeypatch.delenv("FL_DATA_ROOTS", raising=False)
    monkeypatch.setenv(RESULTS_DIR_ENV, str(saved))
    beside = tmp_path / "private.flr"
    beside.write_bytes(b"")
    link = saved / "keys" / "link.flr"  # a link in the folder that leads out of it is not listed
    link.symlink_to(beside)
    try:
        with reading_for(paths.server_policy()):
            assert [file.name for file in saved_files(saved)] == ["keys/bank.flr", "energy.flr"]
            for outside in (beside, link):
                with pytest.raises(DataError, match="outside the folders this server shares"):
                    check_readable(outside)
    finally:
        link.unlink()

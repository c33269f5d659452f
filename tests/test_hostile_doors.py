"""Issue 39's doors (bar ``hostile5``): what the library writes or reads by path goes through the path policy, result
files are bounded before anything is allocated, table exports hold no cell a spreadsheet runs, and every analysis
refuses a bad spec, layer, swap or data before any model forward or data pass, with the project's own error."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import fl_core
from fl_core import arguments
from fl_core.cli import main as cli_main
from fl_core.errors import ArgumentError, DataError, FilterLensError, ModelSpecError
from fl_core.io import models as models_module
from fl_core.io.checkpoints import save_state_dict
from fl_core.io.datasets import GREYSCALE_NOTE, tensor_images
from fl_core.io.images import folder_images
from fl_core.io.resultfiles import FORMAT, JSON_MEMBER, save_result
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.rescore import rescore
from fl_core.masterkeys.swap import swap_filters
from fl_core.results import FORMULA_STARTS, NUMBER_TEXT, csv_text

from .conftest import REPO
from .masterkeys.test_clustering import tiny_loaded
from .masterkeys.test_rescore import tiny_tree

HYPERLINK_NAME = '=HYPERLINK("https:evil.example","open me").pt'
CMD_KEY = "=cmd|' -c calc'!A0.weight"


def runnable_cells(text: str) -> list[str]:
    """The cells of CSV ``text`` a spreadsheet would run as a formula: text (not a number) starting with one of
    :data:`FORMULA_STARTS`."""
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row
            if cell.startswith(FORMULA_STARTS) and not NUMBER_TEXT.fullmatch(cell)]


# ------------------------------------------------------------------------------------------ resume (item 4)


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data root (``FL_DATA_ROOTS``) with an ImageFolder tree in it; ``tmp_path / "private"`` is outside it."""
    root = tmp_path / "shared"
    tiny_tree(root / "tree")
    (tmp_path / "private").mkdir()
    monkeypatch.setenv("FL_DATA_ROOTS", str(root))
    return root


@pytest.mark.slow
def test_a_resume_file_outside_the_root_or_not_a_resume_file_is_refused_and_kept(shared: Path) -> None:
    loaded = tiny_loaded(seed=6)
    images = folder_images(shared / "tree")
    swaps = [swap_filters(depthwise_bank(loaded), "B")]
    notes = shared.parent / "private" / "notes.txt"
    notes.write_text("19 bytes of notes.\n")
    inside = shared / "notes.txt"
    inside.write_text("my own notes, not sums\n")
    for path, refusal in ((notes, "cannot be written: FilterLens writes only inside the folders of FL_DATA_ROOTS"),
                          (inside, "is not a FilterLens re-score resume file: refused, and left as it is")):
        before = path.read_bytes()
        with pytest.raises(DataError, match=re.escape(refusal)):
            rescore(loaded, images, swaps=swaps, batch_size=4, workers=0, resume=path)
        assert path.read_bytes() == before
    nested = shared.parent / "private" / "new" / "sums.json"
    with pytest.raises(DataError, match="cannot be written"):
        rescore(loaded, images, swaps=swaps, batch_size=4, workers=0, resume=nested)
    assert not nested.parent.exists()  # no parent folder made outside the root
    sums = shared / "runs" / "sums.json"  # inside the root: written, and a rerun resumes from it
    first = rescore(loaded, images, swaps=swaps, batch_size=4, workers=0, resume=sums)
    again = rescore(loaded, images, swaps=swaps, batch_size=4, workers=0, resume=sums)
    assert json.loads(sums.read_text())["done"] == 8 and again.resumed_images == 8 and again.top1 == first.top1


def test_the_command_line_refuses_the_resume_file_in_one_line_before_loading_the_model(
        shared: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    notes = shared.parent / "private" / "notes.txt"
    notes.write_text("19 bytes of notes.\n")
    monkeypatch.setattr(models_module, "_load_demo", lambda *a: pytest.fail("the model was loaded"))
    assert cli_main(["rescore", "--model", "demo:mobilenet_v2", "--images", str(shared / "tree"), "--resume",
                     str(notes), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {notes} cannot be written")
    assert notes.read_text() == "19 bytes of notes.\n"


# -------------------------------------------------------------------------------------- result files (item 4)


def result_file(path: Path, result: object, members: dict[str, bytes] | None = None) -> Path:
    """A ``.flr`` holding ``result`` as its JSON tree (and extra members)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(JSON_MEMBER, json.dumps({"format": FORMAT, "version": 1, "class": "x", "result": result}))
        for name, data in (members or {}).items():
            archive.writestr(name, data)
    return path


VOID_GB = {"$type": "scalar", "dtype": "V8", "value": 1e9}
"""A numpy "scalar" of a billion void bytes (issue 39: numpy was asked for 1 GB per scalar)."""


def declared_array_file(path: Path, declared: int) -> Path:
    """A result whose one array member declares ``declared`` bytes once unpacked but holds 64 (sizes patched in the
    zip's headers: what a compressed member of zeros declares, without writing gigabytes here)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": ((declared - 128) // 8,)})
    member = header.getvalue() + bytes(64)
    estimate = {"$type": "dataclass", "class": "fl_core.channelaxes.estimate:ChannelsEstimate",
                "fields": {"seconds": 1.0, "macs_per_second": 1.0,
                           "stages": {"x": {"$type": "array", "file": "arrays/0.npy"}}}}
    result_file(path, estimate, {"arrays/0.npy": member})
    data = bytearray(path.read_bytes())
    real = len(member).to_bytes(4, "little")
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local header, central directory
        start = data.rfind(signature)  # the array's records come last
        assert data[start + offset:start + offset + 4] == real
        data[start + offset:start + offset + 4] = declared.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


def measuring_script(imports: str, key: str, items: str, call: str) -> str:
    """A script that runs ``call`` on each ``key`` of ``items`` (an expression over ``sys.argv``) and prints one JSON
    line per item: the item, the FilterLens error it raised ("" for none), its seconds and the process's peak memory
    (``VmHWM``, MiB) after it; ``imports`` come first, so that their cost is not the call's."""
    return f"""
import json, sys, time
from fl_core.errors import FilterLensError
{imports}

def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))

for {key} in {items}:
    start, error = time.perf_counter(), ""
    try:
        {call}
    except FilterLensError as err:
        error = f"{{type(err).__name__}}: {{err}}"
    print(json.dumps({{"{key}": {key}, "error": error, "seconds": time.perf_counter() - start,
                      "peak_mib": kib("VmHWM") / 1024}}), flush=True)
"""


MEASURE_LOADS = measuring_script(
    "from fl_core.io.resultfiles import load_result\n"
    "import fl_core.channelaxes.estimate  # the class of the last file: its imports are not the load's cost",
    "path", "sys.argv[1:]", "load_result(path)")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak memory is read from /proc")
def test_hostile_result_files_are_refused_within_10_s_and_800_mb(tmp_path: Path) -> None:
    """The declared-3-GB file (three billion-byte void scalars), 3e9 (numpy's OverflowError), an array member that
    declares 3.6 GB, /dev/zero and a FIFO: each a DataError, in a fresh interpreter whose peak stays under 800 MB."""
    os.mkfifo(tmp_path / "fifo.flr")
    estimate = {"$type": "dataclass", "class": "fl_core.channelaxes.estimate:ChannelsEstimate",
                "fields": {"seconds": VOID_GB, "macs_per_second": VOID_GB, "stages": {"x": VOID_GB}}}
    files = [result_file(tmp_path / "three_scalars.flr", {"$type": "tuple", "items": [VOID_GB] * 3}),
             result_file(tmp_path / "overflow.flr", {"$type": "tuple", "items": [{**VOID_GB, "value": 3e9}] * 3}),
             declared_array_file(tmp_path / "declared_3_6_gb.flr", 3_600_000_128),
             Path("/dev/zero"), tmp_path / "fifo.flr",
             result_file(tmp_path / "scalars_in_a_result.flr", estimate)]  # last: its class's imports cost most
    assert max(path.stat().st_size for path in files if path.is_file()) < 1000
    done = subprocess.run([sys.executable, "-c", MEASURE_LOADS, *map(str, files)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    results = [json.loads(line) for line in done.stdout.splitlines()]
    for result in results:
        print(f"{Path(result['path']).name:28s} {result['seconds']:5.2f} s peak {result['peak_mib']:4.0f} MiB  "
              f"{result['error'][:90]}")
    assert [Path(r["path"]).name for r in results] == [path.name for path in files]
    assert all(r["error"].startswith("DataError: ") for r in results), results
    assert all(r["seconds"] < 10 and r["peak_mib"] < 800 for r in results), results
    assert "a FIFO" in results[4]["error"] and "a character device" in results[3]["error"]


def test_only_results_come_back(tmp_path: Path) -> None:
    for payload in ([1, 2, 3], {"$type": "tuple", "items": [1]}, "text",
                    {"$type": "dataclass", "class": "fl_core.firstlayer.settings:EnergySettings", "fields": {}}):
        with pytest.raises(DataError, match="not a FilterLens result: refused"):
            fl_core.load_result(result_file(tmp_path / "payload.flr", payload))
    with pytest.raises(ArgumentError, match="saves a FilterLens result"):
        save_result(fl_core.EnergySettings(), tmp_path / "settings.flr")


# ------------------------------------------------------------------------------------------- tables (item 5)


def hostile_weights(folder: Path) -> Path:
    """A checkpoint named as a formula whose first convolution's key is one too."""
    path = folder / HYPERLINK_NAME
    save_state_dict({CMD_KEY: torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(0))}, path)
    return path


def test_energy_csv_of_hostile_names_holds_no_cell_a_spreadsheet_runs(tmp_path: Path) -> None:
    path = hostile_weights(tmp_path)
    out = tmp_path / "energy.csv"
    assert cli_main(["energy", "--model", f"weights:{path}", "--images", "bundled", "--max-images", "2",
                     "--seeds", "2", "--csv", str(out), "--quiet"]) == 0
    text = out.read_bytes().decode()
    assert not runnable_cells(text), runnable_cells(text)
    frame = pd.read_csv(io.StringIO(text))
    assert frame["model"].str.startswith("'=HYPERLINK(").all() and frame["spec"].str.startswith("weights:").all()
    assert (frame["layer"] == "'" + CMD_KEY.removesuffix(".weight")).all()  # the name kept, behind the quote
    assert {"component", "lambda", "profile"} <= set(frame.select_dtypes("number"))  # numbers stay numbers
    result = fl_core.analyze_energy(f"weights:{path}", fl_core.open_images("bundled", limit=2), seeds=2)
    assert result.to_csv() == text  # the library's export is the command's


def test_csv_text_neutralises_text_and_keeps_numbers() -> None:
    frame = pd.DataFrame({"name": ["=1+2", "+1-1", "-A1", "@SUM(A1)", "\tx", "\rx", "plain", "-0.5", "+3e-4"],
                          "value": [-1.5, 2.0, -3.0, 4.0, 5.0, 6.0, 7.0, -8.0, 9.0],
                          "mixed": [-1, "=x", 2.5, None, "a", "b", "c", "d", "e"], "=head": range(9)})
    rows = list(csv.reader(io.StringIO(csv_text(frame))))
    assert rows[0] == ["name", "value", "mixed", "'=head"]
    assert [row[0] for row in rows[1:]] == ["'=1+2", "'+1-1", "'-A1", "'@SUM(A1)", "'\tx", "'\rx", "plain", "-0.5",
                                            "+3e-4"]
    assert [row[1] for row in rows[1:3]] == ["-1.5", "2.0"] and [row[2] for row in rows[1:4]] == ["-1", "'=x", "2.5"]
    assert frame.loc[0, "name"] == "=1+2"  # the caller's frame is not changed


def test_every_page_csv_download_goes_through_the_one_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    from fl_ui import widgets

    rendered = {}

    class Column:
        def download_button(self, label, data, **_):
            rendered[label] = data()

    monkeypatch.setattr(widgets.st, "columns", lambda n: [Column() for _ in range(n)])
    frame = pd.DataFrame({"model": [HYPERLINK_NAME], "layer": [CMD_KEY], "top1": [-0.25]})
    widgets.downloads("scores", frame=frame, data={"layer": CMD_KEY})
    assert rendered["⬇ CSV table"] == csv_text(frame) and not runnable_cells(rendered["⬇ CSV table"])


# ------------------------------------------------------------------------------- cheap checks first (item 9)


MEASURE_CHANNELS = measuring_script(
    "import fl_core\nimport fl_core.channelaxes.analysis  # the library's imports are not the refusal's cost",
    "layer", "json.loads(sys.argv[1])", 'fl_core.analyze_channels("demo:mobilenet_v2", layer=layer, progress=False)')


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak memory is read from /proc")
def test_channel_axes_refuses_a_bad_or_empty_layer_before_building_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: '../../etc' built the calibration data first and failed after 129 s and 2.0 GB; '' ran the first
    layer. Now each is refused within 30 s (the model's load included) and 1.5 GB, and within a second of a loaded
    model."""
    done = subprocess.run([sys.executable, "-c", MEASURE_CHANNELS, json.dumps(["../../etc", "", "  "])],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = [json.loads(line) for line in done.stdout.splitlines()]
    for result in results:
        print(f"{result['layer']!r:12} {result['seconds']:5.2f} s peak {result['peak_mib']:4.0f} MiB  "
              f"{result['error'][:100]}")
    assert results[0]["error"].startswith("AnalysisError: mobilenet_v2 has no convolution '../../etc'")
    assert all(r["error"].startswith("ArgumentError: layer is empty") for r in results[1:]), results
    assert all(r["seconds"] < 30 and r["peak_mib"] < 1536 for r in results), results

    from fl_core.channelaxes import analysis  # in this process: the data is never built for a bad layer

    monkeypatch.setattr(analysis, "as_channel_data", lambda *a, **k: pytest.fail("data was built"))
    loaded = fl_core.load_model("demo:mobilenet_v2")
    for layer in ("../../etc", ""):
        start = time.perf_counter()
        with pytest.raises(FilterLensError, match=r"no convolution|layer is empty"):
            fl_core.analyze_channels(loaded, layer=layer, progress=False)
        assert time.perf_counter() - start < 1


def test_swaps_that_are_not_filter_swaps_are_refused_before_the_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models_module, "_load_demo", lambda *a: pytest.fail("the model was loaded"))
    for swaps in (["Q"], "B", [None]):
        with pytest.raises(ArgumentError, match="swaps takes FilterSwap variants made by swap_filters"):
            rescore("demo:mobilenet_v2", swaps=swaps)


@pytest.mark.slow
def test_specs_with_digits_of_other_scripts_are_refused(capsys: pytest.CaptureFixture) -> None:
    """Python's int() reads Arabic-Indic and full-width digits: cifar:resnet٥٦ was accepted as resnet56."""
    for spec in ("cifar:resnet٥٦", "cifar:resnet５６", "timm:resnet１８", "demo:tiny_vgg٢"):
        with pytest.raises(ModelSpecError, match="names are ASCII"):
            fl_core.load_model(spec)
        assert cli_main(["inspect", "--model", spec, "--quiet"]) == 2
        assert "names are ASCII" in capsys.readouterr().err
    assert fl_core.load_model("cifar:resnet56").spec == "cifar:resnet56"


def test_numbers_in_options_and_links_are_ascii_digits(capsys: pytest.CaptureFixture) -> None:
    from fl_core.masterkeys.settings import MasterKeySettings
    from fl_core.settings import device_name, parse_setting, settings_fields

    k = next(field for field in settings_fields(MasterKeySettings) if field.name == "k")
    assert parse_setting(k, "8") == 8
    with pytest.raises(ArgumentError, match="digits 0-9"):
        parse_setting(k, "٨")
    with pytest.raises(SystemExit) as refused:
        cli_main(["masterkeys", "--model", "demo:ppocrv6_det_small_dw7", "--k", "٨"])
    assert refused.value.code == 2 and "invalid int value: '٨'" in capsys.readouterr().err
    with pytest.raises(ArgumentError):
        device_name("cuda:٠")


@pytest.mark.parametrize("analysis", ["energy", "whitening", "rescore", "sweep"])
def test_a_missing_image_folder_is_refused_before_the_model_loads(analysis: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from fl_core.masterkeys.layersweep import sweep_layers

    monkeypatch.setattr(models_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(arguments, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    run = {"energy": fl_core.analyze_energy, "whitening": fl_core.analyze_whitening, "rescore": rescore,
           "sweep": sweep_layers}[analysis]
    with pytest.raises(DataError, match="No folder at"):
        run("demo:mobilenet_v2", str(tmp_path / "missing"))


def test_an_empty_or_unknown_layer_is_refused_before_the_data_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from fl_core.firstlayer import energy

    monkeypatch.setattr(energy, "layer_patch_pca", lambda *a, **k: pytest.fail("the data was read"))
    with pytest.raises(ArgumentError, match="layer is empty"):
        fl_core.analyze_energy("demo:tiny_vgg", layer="")
    with pytest.raises(FilterLensError, match="no convolution 'nope'"):
        fl_core.analyze_energy("demo:tiny_vgg", layer="nope")


@pytest.mark.slow
def test_a_greyscale_batch_is_taken_with_a_notice_as_its_rgb_copy(caplog: pytest.LogCaptureFixture) -> None:
    grey = torch.rand(3, 1, 40, 48, generator=torch.Generator().manual_seed(0))
    with caplog.at_level("WARNING"):
        images = tensor_images(grey)
    assert GREYSCALE_NOTE in images.description and "greyscale" in caplog.text
    result = fl_core.analyze_energy("demo:tiny_vgg", grey, seeds=2, progress=False)
    rgb = fl_core.analyze_energy("demo:tiny_vgg", grey.expand(-1, 3, -1, -1), seeds=2, progress=False)
    assert GREYSCALE_NOTE in result.images
    torch.testing.assert_close(torch.as_tensor(result.models[0].profile), torch.as_tensor(rgb.models[0].profile))
    with pytest.raises(DataError, match=r"must have shape \(N, 3, H, W\)"):
        tensor_images(torch.rand(2, 2, 8, 8))

"""Results saved to one file and loaded back without pickle: equal in ``to_dict()``, drawing the same figures, and
refusing files that are not FilterLens results or that ask for more than they hold."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import fl_core
from fl_core import DataError, EnergyResult, MasterKeyResult, load_result
from fl_core.io.resultfiles import JSON_MEMBER, save_result

from ..channelaxes.planted_nets import duplicate_world
from ..figure_gallery import small_energy

BANK = "demo:ppocrv6_det_small_dw7"


def figures(result) -> dict[str, str]:
    """Every figure ``result.plot`` draws (its ``plot_kinds()``), as plotly JSON."""
    return {kind: result.plot(kind).to_json() for kind in result.plot_kinds()}


def assert_round_trip(result, path: Path) -> None:
    result.save(path)
    loaded = load_result(path)
    assert type(loaded) is type(result)
    assert json.dumps(loaded.to_dict(), sort_keys=True) == json.dumps(result.to_dict(), sort_keys=True)
    expected = figures(result)
    assert expected and figures(loaded) == expected


def test_energy_results_load_equal_and_draw_every_figure(tmp_path: Path) -> None:
    result = small_energy()
    assert_round_trip(result, tmp_path / "energy.flr")
    loaded = EnergyResult.load(tmp_path / "energy.flr")
    np.testing.assert_array_equal(loaded.pcas[loaded.models[0].pca_key].components,
                                  result.pcas[result.models[0].pca_key].components)  # a private field, for tiles
    assert loaded.models[0].filters.dtype == result.models[0].filters.dtype
    pd.testing.assert_frame_equal(loaded.to_frame(), result.to_frame())


@pytest.mark.slow
def test_master_key_results_load_equal_and_draw_every_figure(tmp_path: Path) -> None:
    result = fl_core.analyze_master_keys(BANK, k=4, restarts=1, sweep=(2, 3))
    assert_round_trip(result, tmp_path / "keys.flr")
    assert MasterKeyResult.load(tmp_path / "keys.flr").members(1).shape == result.members(1).shape


@pytest.mark.slow
def test_channel_axes_and_whitening_results_round_trip(tmp_path: Path) -> None:
    loaded, data = duplicate_world(n_calibration=120, n_evaluation=60)
    settings = fl_core.ChannelSettings(layer="conv", cluster_seeds=2, cluster_k=2,
                                       pruning=fl_core.PruningSettings(criteria=("local", "l1"), fractions=(0.4,)))
    channels = fl_core.analyze_channels(loaded, data, settings, device="cpu")
    assert_round_trip(channels, tmp_path / "channels.flr")
    back = load_result(tmp_path / "channels.flr")
    pd.testing.assert_frame_equal(back.table, channels.table)
    assert back.settings == channels.settings and back.site == channels.site
    whitening = fl_core.analyze_whitening("demo:tiny_vgg", fl_core.open_images("bundled", limit=2), seeds=2)
    assert_round_trip(whitening, tmp_path / "whitening.flr")


def test_values_json_cannot_hold_come_back_as_they_were(tmp_path: Path) -> None:
    result = small_energy()
    odd = replace(result, images="δ photos", n_patches=np.int64(7),
                  pcas={**result.pcas, "extra": replace(next(iter(result.pcas.values())), n_patches=3)})
    odd.save(tmp_path / "odd.flr")
    back = load_result(tmp_path / "odd.flr")
    assert back.images == "δ photos" and back.n_patches == 7 and type(back.n_patches) is np.int64
    assert isinstance(back.models, tuple) and back.pcas["extra"].n_patches == 3
    with zipfile.ZipFile(tmp_path / "odd.flr") as archive:
        assert not any(name.endswith(".pkl") for name in archive.namelist())
        json.loads(archive.read(JSON_MEMBER))  # strict JSON: NaN is stored as a tagged value


def _rewrite(source: Path, target: Path, change) -> Path:
    """A copy of a result file with its JSON header changed by ``change(header)``."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename == JSON_MEMBER:
                header = json.loads(data)
                change(header)
                data = json.dumps(header).encode()
            new.writestr(info.filename, data)
    return target


def test_files_that_are_not_filterlens_results_are_refused(tmp_path: Path) -> None:
    saved = small_energy().save(tmp_path / "energy.flr")
    with pytest.raises(DataError, match="not a MasterKeyResult"):
        MasterKeyResult.load(saved)
    (tmp_path / "text.flr").write_text("hello")
    with pytest.raises(DataError, match="not a readable FilterLens result"):
        load_result(tmp_path / "text.flr")

    def foreign_class(header: dict) -> None:
        header["result"]["class"] = "subprocess:Popen"

    with pytest.raises(DataError, match="not a FilterLens class"):
        load_result(_rewrite(saved, tmp_path / "foreign.flr", foreign_class))
    with pytest.raises(fl_core.ArgumentError, match="No file"):
        load_result(tmp_path / "missing.flr")


def test_arrays_are_read_without_pickle_and_checked_before_allocation(tmp_path: Path) -> None:
    saved = small_energy().save(tmp_path / "energy.flr")
    with zipfile.ZipFile(saved) as archive:
        header = json.loads(archive.read(JSON_MEMBER))
        first_array = next(n for n in archive.namelist() if n.endswith(".npy"))

    def swap_array(data: bytes) -> Path:
        target = tmp_path / "swapped.flr"
        with zipfile.ZipFile(saved) as old, zipfile.ZipFile(target, "w") as new:
            for info in old.infolist():
                new.writestr(info.filename, data if info.filename == first_array else old.read(info))
        return target

    pickled = io.BytesIO()
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError):
        load_result(swap_array(pickled.getvalue()))
    huge = io.BytesIO()
    np.lib.format.write_array_header_1_0(huge, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    with pytest.raises(DataError, match="claims 8,000,000,000,000 bytes of values, but its member holds 0"):
        load_result(swap_array(huge.getvalue()))
    assert header["format"] == "filterlens-result"


def test_tensors_keep_their_type(tmp_path: Path) -> None:
    from fl_core.channelaxes.estimate import ChannelsEstimate

    holder = ChannelsEstimate(seconds=1.0, stages={"x": float("nan")}, macs_per_second=2.0)
    save_result(replace(holder, stages={"bf16": torch.ones(2, dtype=torch.bfloat16), "i8": torch.arange(3)}),
                tmp_path / "t.flr")
    stages = load_result(tmp_path / "t.flr").stages
    assert stages["bf16"].dtype == torch.bfloat16 and stages["i8"].dtype == torch.int64
    holder.save(tmp_path / "nan.flr")
    assert np.isnan(load_result(tmp_path / "nan.flr").stages["x"])

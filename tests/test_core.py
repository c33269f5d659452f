"""The small core every family uses: devices, product precision, progress, JSON-safe results."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from fl_core.compute import device as compute_device
from fl_core.compute import progress as compute_progress
from fl_core.compute.device import (
    available_devices,
    inference_autocast,
    product_dtype,
    resolve_device,
    statistics_dtype,
)
from fl_core.compute.progress import report, sub_progress
from fl_core.errors import ArgumentError
from fl_core.results import Result, jsonable


def test_fl_device_overrides_the_automatic_choice_and_unknown_or_missing_devices_are_refused(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "cpu")
    assert resolve_device(None) == resolve_device("auto") == resolve_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert available_devices()[0] == "cpu" and not any(d.startswith("cuda") for d in available_devices())
    for device, says in (("cuda:1", "'cuda:1' is not available on this machine, which has cpu"),
                         (torch.device("cuda"), "'cuda' is not available"),
                         ("bogus", "device must be auto, cpu, cuda, cuda:N or mps, not str 'bogus'"),
                         (3, "not int 3")):
        with pytest.raises(ArgumentError, match=re.escape(says)):
            resolve_device(device)
    monkeypatch.setenv("FL_DEVICE", "cuda")  # never a silent run on the CPU
    with pytest.raises(ArgumentError, match="FL_DEVICE 'cuda' is not available"):
        resolve_device(None)


def test_statistics_are_float64_except_on_mps_and_products_follow_the_documented_rule(monkeypatch):
    assert statistics_dtype(torch.device("cpu")) is torch.float64
    assert statistics_dtype(torch.device("mps")) is torch.float32
    assert product_dtype(torch.device("cpu")) is torch.float64
    for capability, expected in (((9, 0), torch.float64), ((8, 9), torch.float32), ((7, 5), torch.float32)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device, c=capability: c)
        assert product_dtype(torch.device("cuda")) is expected, capability
    assert (8, 0) in compute_device.FAST_FLOAT64_CUDA and (8, 6) not in compute_device.FAST_FLOAT64_CUDA


def test_cpu_inference_never_autocasts_and_records_no_gradients():
    layer = torch.nn.Linear(3, 2)
    with inference_autocast(torch.device("cpu")):
        out = layer(torch.ones(1, 3))
    assert out.dtype is torch.float32 and not out.requires_grad


def test_an_analysis_takes_the_cores_the_load_leaves_idle_and_gives_its_threads_back(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(compute_device.os, "cpu_count", lambda: 4)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        assert compute_device.analysis_threads(cpu, load=0.2) == 4  # an idle machine: every thread
        assert compute_device.analysis_threads(cpu, load=1.5) == 3  # the idle cores, rounded up
        assert compute_device.analysis_threads(cpu, load=14.0) == 1  # beside other work: one thread, never none
        assert compute_device.analysis_threads(torch.device("meta"), load=14.0) == 4  # not a CPU: as it is
        with compute_device.cpu_threads(2):
            assert torch.get_num_threads() == 2
            with compute_device.cpu_threads(3):  # a limit inside another never raises it
                assert torch.get_num_threads() == 2
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)


def test_progress_is_clamped_and_nested_steps_map_onto_their_share():
    seen = []

    def record(fraction: float, message: str) -> None:
        seen.append((fraction, message))

    report(record, 1.5, "done")
    inner = sub_progress(record, 0.5, 0.75)
    inner(0.0, "a")
    inner(1.0, "b")
    inner(-3.0, "c")
    assert seen == [(1.0, "done"), (0.5, "a"), (0.75, "b"), (0.0, "c")]
    assert sub_progress(None, 0, 1) is None
    report(None, 0.5, "nobody listens")  # no error


def test_progress_is_a_bar_where_a_person_watches_and_nothing_elsewhere(monkeypatch, capsys):
    """One rule for every entry point (progress_callback): a callable as it is, False silent, None a bar in the
    main thread of a terminal or a notebook, nothing in a dashboard's or a worker's thread."""
    import sys
    import threading

    def record(fraction: float, message: str) -> None:
        pass

    assert compute_progress.progress_callback(record) is record
    assert compute_progress.progress_callback(False) is compute_progress.silent
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    in_thread = []
    worker = threading.Thread(target=lambda: in_thread.append(compute_progress.progress_callback(None)))
    worker.start()
    worker.join()
    assert in_thread == [compute_progress.silent]
    bar = compute_progress.progress_callback(None)
    assert bar is not compute_progress.silent
    bar(0.5, "halfway there")
    bar(1.0, "done")
    assert "halfway there" in capsys.readouterr().err
    with pytest.raises(ArgumentError, match="progress must be a callable"):
        compute_progress.progress_callback("yes")


@dataclass(frozen=True)
class Inner(Result):
    values: np.ndarray


@dataclass(frozen=True)
class Outer(Result):
    _private_fields = ("image",)
    name: str
    inner: Inner
    table: dict
    image: np.ndarray


def test_results_serialise_arrays_tensors_nested_results_and_non_finite_numbers_as_plain_json():
    result = Outer(name="x", inner=Inner(np.array([1.0, np.nan, np.inf])),
                   table={1: torch.tensor([2, 3]), "s": np.float32(0.5), "t": (np.int64(4), -math.inf)},
                   image=np.zeros((2, 2)))
    data = result.to_dict()
    assert data == {"name": "x", "inner": {"values": [1.0, None, None]},
                    "table": {"1": [2, 3], "s": 0.5, "t": [4, None]}}  # the private image is left out
    assert json.loads(result.to_json()) == data
    assert jsonable(Inner(np.arange(2))) == {"values": [0, 1]}
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.name = "y"  # results are shared between sessions: never changed


def test_the_public_api_resolves_lazily_and_every_analysis_has_the_family_shape():
    import inspect
    import subprocess
    import sys

    import fl_core

    light = subprocess.run([sys.executable, "-c", "import sys, fl_core; print('torch' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert light.stdout.strip() == "False"  # `python -m fl_core --help` does not wait for torch
    for name in fl_core.__all__:
        assert getattr(fl_core, name) is not None, name
    with pytest.raises(AttributeError):
        fl_core.no_such_thing  # noqa: B018
    analyses = [name for name in fl_core.__all__ if name.startswith("analyze_")]
    assert len(analyses) >= 4
    for name in analyses:
        params = inspect.signature(getattr(fl_core, name)).parameters
        assert "settings" in params, name
        for keyword in ("device", "progress"):
            assert params[keyword].kind is inspect.Parameter.KEYWORD_ONLY, (name, keyword)


def test_a_missing_real_fixture_skips_locally_and_fails_under_ci(tmp_path, monkeypatch):
    from tests.conftest import require_fixture

    missing = tmp_path / "absent.pt"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="absent"):
        require_fixture(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true requires the real fixtures"):
        require_fixture(missing)
    assert require_fixture(tmp_path) == tmp_path  # present: returned as is, CI or not

"""bench/gpu_check.py's comparison: a disagreement or an error on either device fails the run, a CPU-only run
does not (the GPU half itself needs a CUDA machine: docs/DEVELOPING.md)."""

from __future__ import annotations

import numpy as np
import pytest

from .script_modules import script_module


@pytest.fixture(scope="module")
def gpu_check():
    with script_module("bench/gpu_check.py") as module:
        yield module


def test_gaps_are_absolute_or_relative_and_shape_changes_never_agree(gpu_check) -> None:
    absolute = gpu_check.Quantity("x", 0.1, "")
    relative = gpu_check.Quantity("x", 0.1, "", relative=True)
    assert absolute.difference([1.0, 10.0], [1.05, 10.5]) == pytest.approx(0.5)
    assert relative.difference([1.0, 10.0], [1.05, 10.5]) == pytest.approx(0.05)
    assert absolute.difference(np.zeros(3), np.zeros(4)) == float("inf")
    # a KL that is ~0 on the CPU (a swap that changes nothing) against its bf16 noise on the GPU: the H200 run
    # read 2.6e-14 vs 9e-8 nats, which a bare relative gap called a 3.5e6-fold disagreement
    floored = gpu_check.Quantity("kl", 0.05, "", relative=True, floor=1e-3)
    assert floored.difference([2.6e-14], [9e-8]) <= 0.05 < relative.difference([2.6e-14], [9e-8])
    assert floored.difference([0.5], [0.6]) == pytest.approx(0.2)  # above the floor it is the plain relative gap


def _check(gpu_check, values: dict[str, float]):
    def run(device: str) -> dict[str, np.ndarray]:
        if isinstance(values[device], Exception):
            raise values[device]
        return {"x": np.array([values[device]])}

    return gpu_check.Check("toy", run, (gpu_check.Quantity("x", 0.1, "stated"),))


def test_a_disagreement_or_an_error_fails_and_agreement_passes(gpu_check, capsys) -> None:
    assert gpu_check.run_check(_check(gpu_check, {"cpu": 1.0, "other": 1.05}), "other").failures == 0
    disagreeing = gpu_check.run_check(_check(gpu_check, {"cpu": 1.0, "other": 1.5}), "other")
    assert disagreeing.failures == 1 and "FAIL" in capsys.readouterr().out
    broken = gpu_check.run_check(_check(gpu_check, {"cpu": 1.0, "other": RuntimeError("no kernel")}), "other")
    assert broken.failures == 1 and "ERROR on other: RuntimeError: no kernel" in capsys.readouterr().out


def test_without_a_gpu_only_the_cpu_half_runs(gpu_check, capsys) -> None:
    outcome = gpu_check.run_check(_check(gpu_check, {"cpu": 1.0}), None)
    assert outcome.failures == 0 and outcome.other_seconds is None and outcome.speed_ratio == "—"
    gpu_check.print_summary([outcome], None, 1.0)
    assert "CUDA is not available" in capsys.readouterr().out

"""bench/_scaling.py: the growth exponent of known power laws, the least of the repeats, the table's exponent row."""

from __future__ import annotations

import math

import pytest

from .script_modules import script_module


@pytest.fixture(scope="module")
def scaling():
    with script_module("bench/_scaling.py") as module:
        yield module


def test_growth_exponent_recovers_power_laws_and_skips_missing_points(scaling) -> None:
    work = [1, 4, 16, 64]
    assert scaling.growth_exponent(work, [3.0 * w**2 for w in work]) == pytest.approx(2.0)
    assert scaling.growth_exponent(work, [0.5 * w for w in work]) == pytest.approx(1.0)
    assert scaling.growth_exponent(work, [7.0] * 4) == pytest.approx(0.0, abs=1e-12)
    assert scaling.growth_exponent(work, [2.0, 8.0, None, 0.0]) == pytest.approx(1.0)  # only 1 and 4 count
    assert math.isnan(scaling.growth_exponent(work, [1.0, None, None, None]))


def test_best_time_is_the_least_of_the_repeats(scaling, monkeypatch) -> None:
    clock = iter([0.0, 5.0, 10.0, 12.0, 20.0, 23.0])  # calls of 5, 2 and 3 seconds
    monkeypatch.setattr(scaling.time, "perf_counter", lambda: next(clock))
    calls = []
    seconds, result = scaling.best_time(lambda: calls.append(1) or len(calls), repeats=3)
    assert seconds == 2.0 and result == 3 and len(calls) == 3


def test_table_ends_with_the_exponent_of_the_cost_columns(scaling) -> None:
    columns = (scaling.Column("n", "d"), scaling.Column("seconds", ".2f", cost=True), scaling.Column("ratio", ".1f"))
    lines = scaling.scaling_table(columns, [[1, 0.5, 1.0], [10, 50.0, None]]).splitlines()
    assert lines[0].split() == ["n", "seconds", "ratio"]
    assert lines[2].split() == ["10", "50.00", "-"]
    assert lines[-1].split() == ["exponent", "2.00"] and len({len(line) for line in lines}) == 1

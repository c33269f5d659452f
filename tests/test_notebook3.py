"""The bar of issue 43 ("The notebook, round 3"), its Channel Axes estimate on the shipped MobileNetV2: with the
library's defaults, ``estimate_channels`` answers within 5 s with the model's first load and within 1 s after it (the
process's CPU seconds: a machine shared with other jobs stretches the wall clock, not the work), the same twice
(within 10 %), and within 2× of the wall-clock time of ``analyze_channels`` with the same defaults, run right after it
on the same machine, as busy as it is.

The rest of the bar is tested where its code lives: the small module's estimate in
tests/channelaxes/test_estimate.py, the master keys' plot kinds in tests/test_result_plots.py, a survey of a tensor
batch in tests/survey/test_survey.py, ``filterlens env`` in tests/test_environment.py and the served Saved results
page in tests/browser/test_saved_results.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import REPO

SCRIPT = """
import json, os, time
import fl_core

fl_core.estimate_channels, fl_core.analyze_channels  # the library imported before anything is timed

def timed(call):
    wall, cpu = time.perf_counter(), time.process_time()
    value = call()
    return value, time.perf_counter() - wall, time.process_time() - cpu

first, first_wall, first_cpu = timed(lambda: fl_core.estimate_channels("demo:mobilenet_v2"))
loaded = fl_core.load_model("demo:mobilenet_v2")
second, second_wall, second_cpu = timed(lambda: fl_core.estimate_channels(loaded))
result, actual, _ = timed(lambda: fl_core.analyze_channels(loaded, progress=False))
print(json.dumps({"first": first.seconds, "second": second.seconds, "stages": first.stages, "basis": first.basis,
                  "first_cpu": first_cpu, "second_cpu": second_cpu, "first_wall": first_wall,
                  "second_wall": second_wall, "actual": actual, "timings": result.timings, "layer": result.layer,
                  "load": os.getloadavg()}))
"""


@pytest.mark.slow
def test_the_mobilenet_estimate_is_quick_steady_and_within_2x_of_the_analysis_it_estimates() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=REPO, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(REPO), "FL_DEVICE": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    assert run["layer"] == "features.16.conv.2"  # the library's default layer, the page's
    assert run["first_cpu"] < 5.0 and run["second_cpu"] < 1.0, run
    assert abs(run["second"] - run["first"]) <= 0.1 * run["first"], run
    assert run["actual"] / 2 <= run["first"] <= 2 * run["actual"], run

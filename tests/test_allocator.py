"""glibc's malloc set for torch (fl_core.compute.allocator): a freed large tensor's pages are kept for the next one (no
fresh zero-filled pages per pass) and handed back after a job; the worker processes get the same settings at their
start."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fl_core.compute import allocator
from fl_core.survey.engine import WORKER_PROCESS_CONFIG

pytestmark = pytest.mark.skipif(allocator._glibc() is None, reason="the C library is not glibc")

RSS_AFTER_FREE = """
import json, sys
from pathlib import Path
import torch
from fl_core.compute import allocator

def rss_mib():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20

tuned = sys.argv[1] == "tuned" and allocator.tune()
before = rss_mib()
block = torch.ones(100 * 2**18)  # 100 MiB
del block
kept = rss_mib() - before
allocator.release_freed_memory()
print(json.dumps({"tuned": tuned, "kept": kept, "released": rss_mib() - before}))
"""


def rss_after_free(mode: str) -> dict:
    """The MiB a fresh process keeps after freeing 100 MiB, ``mode`` "tuned" or "default". Its environment is this
    one without glibc's settings (:data:`allocator.ENVIRONMENT`): a Dask nanny started earlier in this process (a
    survey's LocalCluster) writes its ``pre-spawn-environ`` into ``os.environ`` and leaves it there, and a "default"
    process that inherited them would be tuned from its start (it kept 101 MiB in a full run)."""
    environment = {key: value for key, value in os.environ.items() if key not in allocator.ENVIRONMENT}
    out = subprocess.run([sys.executable, "-c", RSS_AFTER_FREE, mode], check=True, capture_output=True, text=True,
                         env=environment)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_tuned_process_keeps_a_freed_large_tensor_until_it_releases_it():
    tuned, default = rss_after_free("tuned"), rss_after_free("default")
    assert tuned["tuned"] and tuned["kept"] > 90  # the next pass reuses these pages
    assert tuned["released"] < 20  # release_freed_memory hands them back
    assert default["kept"] < 20  # glibc's default: unmapped at once (and mapped and zero-filled again next time)


def test_worker_processes_start_with_the_same_settings():
    environment = WORKER_PROCESS_CONFIG["distributed.nanny.pre-spawn-environ"]
    assert {key: environment[key] for key in allocator.ENVIRONMENT} == allocator.ENVIRONMENT
    assert int(allocator.ENVIRONMENT["MALLOC_MMAP_THRESHOLD_"]) == allocator.HEAP_BYTES

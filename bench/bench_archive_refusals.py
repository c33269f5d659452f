"""Benchmark: what refusing each hostile labelled-image upload costs (``tests/io/test_image_archives.py::HOSTILE``).

    python bench/bench_archive_refusals.py

Per case, in a fresh process: the upload's size, the seconds :func:`fl_core.io.image_archives.save_labelled_set` takes
to refuse it, the process's peak RSS during the refusal above its RSS before (Linux ``VmHWM`` after resetting it), and
the first words of the message. Target (docs/results.md, "Shared server"): every hostile input refused in a few
seconds and < 1 GB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
from fl_core.errors import DataError
from fl_core.io.image_archives import save_labelled_set
from tests.io.test_image_archives import HOSTILE

def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))

name, build, _ = HOSTILE[sys.argv[1]]
data = build()
Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
before, start = kib("VmRSS"), time.perf_counter()
try:
    with tempfile.TemporaryDirectory() as folder:
        save_labelled_set([(name, data)], Path(folder) / "set")
    message = "NOT REFUSED"
except DataError as err:
    message = str(err)
print(json.dumps({"mib": len(data) / 2**20, "seconds": time.perf_counter() - start,
                  "peak_mib": (kib("VmHWM") - before) / 1024, "message": message}))
"""


def main() -> None:
    sys.path.insert(0, str(REPO))
    from tests.io.test_image_archives import HOSTILE

    print(f"{'case':34s} {'upload MiB':>10s} {'seconds':>8s} {'peak +MiB':>9s}  message")
    for case in HOSTILE:
        done = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True, cwd=REPO,
                              env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=600)
        if done.returncode:
            print(f"{case:34s} failed: {done.stderr.strip().splitlines()[-1]}")
            continue
        row = json.loads(done.stdout.splitlines()[-1])
        print(f"{case:34s} {row['mib']:10.2f} {row['seconds']:8.3f} {row['peak_mib']:9.1f}  {row['message'][:70]}")


if __name__ == "__main__":
    main()

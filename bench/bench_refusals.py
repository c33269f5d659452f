"""Benchmark: what refusing each hostile input costs, and how much memory loading a legitimate checkpoint holds.

    python bench/bench_refusals.py [--only hostile|legit] [--legit-mb 256] [--repo PATH] [--timeout 120]

Hostile inputs: every entry of ``tests/test_bounded_inputs.py::HOSTILE`` (images and checkpoints small on disk but
costly to open) is built in a temporary folder and met by the command a user would run (``python -m fl_core
inspect|energy ...``) in a fresh process. Per input: its class, file size, the process's peak RSS while refusing
(Linux ``VmHWM``, reset once the CLI's imports are done), what the refusal added to the RSS after the imports, the
refusal's own seconds and the whole process's, the exit code and the first words of the message. Target
(docs/results.md, "Shared server"): every hostile input refused in a few seconds and < 1 GB.

Legitimate loads: checkpoints of one big tensor (the worst case for temporaries) of ``--legit-mb`` MB, as safetensors
float16 and float32 and as a torch ``.pt``; the peak RSS that ``load_state_dict`` adds, as a multiple of the file.

``--repo`` runs the commands against another checkout (e.g. ``git worktree add /tmp/before <commit>``) for
before/after numbers; an older checkout may need gigabytes for the hostile inputs, so use ``--only legit`` there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.test_bounded_inputs import HOSTILE, MEASURE_CHILD, write_input  # noqa: E402

CLI_CHILD = r"""
import atexit, json, os, runpy, sys, time
from pathlib import Path

def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))

import fl_core.cli
fl_core.cli.build_parser()  # every command's imports: what follows is the refusal's own cost
Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
baseline, start = kib("VmRSS"), time.perf_counter()

@atexit.register
def report() -> None:
    Path(os.environ["FL_BENCH_MEASURE"]).write_text(json.dumps({
        "baseline_mib": baseline / 1024, "peak_mib": kib("VmHWM") / 1024, "seconds": time.perf_counter() - start}))

sys.argv = ["fl_core", *sys.argv[1:]]
runpy.run_module("fl_core", run_name="__main__")
"""


def measure_command(argv: list[str], repo: Path, timeout: float) -> dict:
    """Run ``python -m fl_core ARGV`` in ``repo`` with :data:`CLI_CHILD` around it; its measurements, exit code,
    stderr and wall time."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-c", CLI_CHILD, *argv], capture_output=True, text=True, cwd=repo,
                                  timeout=timeout, env={**os.environ, "FL_BENCH_MEASURE": report.name})
        except subprocess.TimeoutExpired:
            return {"rc": "timeout", "stderr": f"still running after {timeout:.0f} s", "wall": timeout}
        measured = json.loads(Path(report.name).read_text() or "{}")
    return {**measured, "rc": done.returncode, "stderr": done.stderr, "wall": time.perf_counter() - start}


def hostile_table(root: Path, repo: Path, timeout: float) -> None:
    print(f"{'input class':42s} {'file':>9s} {'peak RSS':>9s} {'added':>7s} {'refusal':>8s} {'process':>8s} "
          f"{'exit':>5s} {'stderr':>6s}  message")
    for entry in HOSTILE:
        path, argv = write_input(entry, root)
        result = measure_command([*argv, "--quiet"], repo, timeout)
        lines = result["stderr"].strip().splitlines()
        size = path.stat().st_size
        size_text = f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{size / 1024:.1f} KB" if size >= 1024 \
            else f"{size} B"
        peak = f"{result['peak_mib']:.0f} MB" if "peak_mib" in result else "-"
        added = f"+{result['peak_mib'] - result['baseline_mib']:.0f}" if "peak_mib" in result else "-"
        refusal = f"{result['seconds']:.2f} s" if "seconds" in result else "-"
        message = (lines[-1] if lines else "").removeprefix("error: ")
        print(f"{entry.kind:42s} {size_text:>9s} {peak:>9s} {added:>7s} {refusal:>8s} {result['wall']:6.1f} s "
              f"{result['rc']!s:>5s} {len(lines):>3d} ln  {' '.join(message.split()[:9])[:80]}")


def legit_files(root: Path, megabytes: int) -> list[Path]:
    """One big conv tensor (plus a small first layer) of ``megabytes`` MB as float16/float32 safetensors and .pt."""
    gen = torch.Generator().manual_seed(0)
    big = {"conv1.weight": torch.randn(8, 3, 3, 3, generator=gen),
           "big.weight": torch.randn(megabytes * 2**20 // 4 // 2304, 256, 3, 3, generator=gen)}
    paths = [root / "half.safetensors", root / "float.safetensors", root / "float.pt"]
    save_file({k: v.half() for k, v in big.items()}, str(paths[0]))
    save_file(big, str(paths[1]))
    torch.save(big, paths[2])
    return paths


def legit_table(root: Path, repo: Path, megabytes: int) -> None:
    paths = legit_files(root, megabytes)
    out = subprocess.run([sys.executable, "-c", MEASURE_CHILD, json.dumps([{"load": str(p)} for p in paths])],
                         capture_output=True, text=True, cwd=repo, check=True)
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    print(f"{'legitimate load':22s} {'file':>8s} {'after imports':>14s} {'added':>8s} {'added/file':>11s} {'time':>7s}")
    for path, result in zip(paths, results):
        file_mb = path.stat().st_size / 2**20
        print(f"{path.name:22s} {file_mb:5.0f} MB {result['baseline_mib']:11.0f} MB {result['added_mib']:5.0f} MB "
              f"{result['added_mib'] / file_mb:10.2f}x {result['seconds']:5.1f} s  rc {result['rc']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("hostile", "legit"), help="run one of the two tables")
    parser.add_argument("--legit-mb", type=int, default=256, help="size of the legitimate checkpoints")
    parser.add_argument("--repo", type=Path, default=REPO, help="FilterLens checkout to run the commands in")
    parser.add_argument("--timeout", type=float, default=120, help="seconds before a command counts as hung")
    args = parser.parse_args()
    commit = subprocess.run(["git", "log", "--oneline", "-1"], cwd=args.repo, text=True, capture_output=True)
    print(f"checkout: {args.repo} ({commit.stdout.strip()[:70]})")
    with tempfile.TemporaryDirectory() as folder:
        if args.only != "legit":
            hostile_table(Path(folder), args.repo, args.timeout)
        if args.only != "hostile":
            print()
            legit_table(Path(folder), args.repo, args.legit_mb)


if __name__ == "__main__":
    main()

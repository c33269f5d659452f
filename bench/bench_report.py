"""Time of the checkpoint report per section and in total (target: a weights-only ResNet's full HTML report in
well under a minute on 2 CPU cores).

    python bench/bench_report.py [--device cpu] [--images bundled] [--case NAME ...]

Cases: ``resnet20`` (the real CIFAR-10 ResNet-20 fixture, weights-only, skipped when absent), ``resnet18`` (a
torchvision ResNet-18 at random init saved to a temp file and loaded weights-only), ``demo`` (``demo:tiny_vgg``),
``lab_run`` (the shipped Training Lab run ``lab_vgg_true_s0``: 13 first-layer snapshots, with the trajectory) and
``mobilenet`` (the real MobileNetV2 fixture with its architecture: master keys and scale-space fits). Each case
prints loading, every section, writing the HTML, and the total, in seconds, after one warm-up of the imports.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from fl_core.io.checkpoints import save_state_dict
from fl_core.lab.runs import SHIPPED_RUNS_DIR
from fl_core.report.build import PART_TITLES, ReportSettings, build_report
from fl_core.report.html import report_html
from fl_core.report.series import load_series

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("FL_FIXTURES", REPO.parent / "shared" / "fixtures")) / "checkpoints"
CASES = ("resnet20", "resnet18", "demo", "lab_run", "mobilenet")


def case_spec(name: str, scratch: Path) -> tuple[str, tuple] | None:
    """The spec and preprocessing overrides of a case (``None`` when its fixture is absent)."""
    if name == "resnet20":
        path = FIXTURES / "resnet20_cifar10.th"
        return (f"weights:{path}", ()) if path.is_file() else None
    if name == "resnet18":
        import torchvision

        path = scratch / "resnet18_random_init.safetensors"
        torch.manual_seed(0)
        save_state_dict(torchvision.models.resnet18().state_dict(), path)
        return f"weights:{path}", ()
    if name == "demo":
        return "demo:tiny_vgg", ()
    if name == "lab_run":
        return f"weights:{SHIPPED_RUNS_DIR / 'lab_vgg_true_s0'}", ()
    path = FIXTURES / "mobilenet_v2_imagenet.pt"
    return (f"torchvision:mobilenet_v2={path}", (("mean", (0.5,) * 3), ("std", (0.5,) * 3))) if path.is_file() else None


def bench_case(name: str, spec: str, overrides: tuple, settings: ReportSettings, device: str) -> None:
    start = time.perf_counter()
    models = load_series([spec], overrides)
    loaded = time.perf_counter()
    report = build_report(models, settings=settings, device=device)
    built = time.perf_counter()
    document = report_html(report)
    written = time.perf_counter()
    print(f"\n{name}: {spec} ({len(models)} checkpoint(s), {len(document) / 2**20:.1f} MiB of HTML)")
    print(f"  {'loading':40s} {loaded - start:6.2f} s")
    for part, title in PART_TITLES.items():
        if part in report.timings:
            note = "  (skipped)" if part in report.skipped else ""
            print(f"  {title:40s} {report.timings[part]:6.2f} s{note}")
    print(f"  {'writing the HTML':40s} {written - built:6.2f} s")
    print(f"  {'total':40s} {written - start:6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--images", default="bundled")
    parser.add_argument("--case", action="append", choices=CASES, help="cases to run (default: all)")
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}, CPU cores: {os.cpu_count()}, device: {args.device}")
    settings = ReportSettings(images=args.images)
    with tempfile.TemporaryDirectory() as scratch:
        build_report(load_series(["demo:tiny_vgg"]), args.images, seeds=1, device=args.device)
        for name in args.case or CASES:
            found = case_spec(name, Path(scratch))
            if found is None:
                print(f"\n{name}: fixture absent, skipped")
                continue
            bench_case(name, *found, settings, args.device)


if __name__ == "__main__":
    main()

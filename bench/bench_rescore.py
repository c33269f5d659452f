"""Re-scoring throughput: FilterLens vs a plain torchvision ``ImageFolder`` + ``DataLoader`` + ``model(x)`` loop on the
same model, images, batch size, workers and device, and how the cost grows with the variants scored together (the
original plus 0, 1, 3 and 6 swapped ones, all depthwise layers — or those of ``--stages`` — swapped by the fitting
methods in order). Variants run only from their first swapped module on (:mod:`fl_core.networks.partial_forward`); the 1
+ 6 point is also timed with every variant running the whole network (``share_prefix=False``), the cost before that
sharing.

Prints images/s of both loops; one table row per number of variants — seconds, seconds per variant, seconds per
variant added to the original alone, and the first two against one plain evaluation — with the growth exponent of
time with the variants as the last row; two ratios (targets in docs/results.md: throughput ratio ≥ 1; 1 + 6 variants
≤ 3× one plain evaluation); and the decode-only rate that bounds them. Times are the least of ``--repeats`` runs.
Example:

    python bench/bench_rescore.py --model torchvision:mobilenet_v2=mobilenet_v2_imagenet.pt --mean .5 .5 .5 \\
        --std .5 .5 .5 --crop-pct 0.875 --images ../shared/fixtures/imagenet-sample --max-images 200
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np
import torch
import torchvision
from _scaling import Column, best_time, scaling_note, scaling_table
from torch.utils.data import DataLoader, Subset
from torchvision import transforms

from fl_core.compute.device import resolve_device
from fl_core.io.images import folder_images
from fl_core.io.models import load_model
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.fitting import FIT_METHODS
from fl_core.masterkeys.rescore import analyze_rescore
from fl_core.masterkeys.swap import swap_filters


def plain_transform(config) -> transforms.Compose:
    """The classic torchvision evaluation transform for the model's preprocessing."""
    return transforms.Compose([
        transforms.Resize(config.resize_size, interpolation=transforms.InterpolationMode(config.interpolation)),
        transforms.CenterCrop(config.input_size), transforms.ToTensor(), transforms.Normalize(config.mean, config.std)])


def plain_loop(model, loader, device) -> float:
    """Top-1 of ``for x, y in loader: model(x)``."""
    model = model.to(device).eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x.to(device))
            correct += int((logits.argmax(dim=1).cpu() == y).sum())
            total += len(y)
    return correct / total


def decode_only(loader) -> None:
    for _ in loader:
        pass


def interleaved_best(fns: dict[str, Callable[[], object]], repeats: int, device) -> dict[str, float]:
    """The least time of each function over ``repeats`` rounds that call every one once in turn (so a load spike on
    a shared machine disturbs all of them alike, not one point)."""
    best = dict.fromkeys(fns, math.inf)
    for _ in range(max(1, repeats)):
        for name, fn in fns.items():
            best[name] = min(best[name], best_time(fn, 1, device)[0])
    return best


VARIANT_COLUMNS = (Column("variants", "d"), Column("seconds", ".2f", cost=True), Column("s/variant", ".2f"),
                   Column("s/added variant", ".2f"), Column("× plain 1", ".2f"), Column("per variant × plain 1", ".2f"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--images", required=True, help="ImageFolder tree")
    parser.add_argument("--max-images", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--device", default=None)
    parser.add_argument("--mean", type=float, nargs=3)
    parser.add_argument("--std", type=float, nargs=3)
    parser.add_argument("--crop-pct", type=float)
    parser.add_argument("--variants", type=int, nargs="+", default=[1, 2, 4, 7],
                        help="numbers of variants scored together (1 = the original alone; at most 7)")
    parser.add_argument("--repeats", type=int, default=2, help="time each point this many times, keep the least")
    parser.add_argument("--stages", type=int, nargs="+", default=None,
                        help="swap only these stages' depthwise layers (default: all; the last stage: e.g. 4)")
    args = parser.parse_args()
    device = resolve_device(args.device)
    loaded = load_model(args.model, input_overrides={"mean": args.mean, "std": args.std, "crop_pct": args.crop_pct})
    images = folder_images(args.images, limit=args.max_images)
    tree = torchvision.datasets.ImageFolder(args.images, plain_transform(loaded.input_config))
    picks = np.linspace(0, len(tree) - 1, len(images)).round().astype(int).tolist()
    loader = DataLoader(Subset(tree, picks), batch_size=args.batch_size, num_workers=args.workers)
    n = len(images)
    print(f"{loaded.label}, {n} images, batch {args.batch_size}, {args.workers} worker(s), device {device}, "
          f"{torch.get_num_threads()} threads")
    decode_only(loader)  # warm the file cache for both loops
    decode_seconds, _ = best_time(lambda: decode_only(loader), args.repeats)
    model = loaded.copy_model()
    plain_seconds, plain_top1 = best_time(lambda: plain_loop(model, loader, device), args.repeats, device)
    bank = depthwise_bank(loaded)
    swaps = [swap_filters(bank, method, stages=args.stages) for method in FIT_METHODS]

    def score(variants: int, share_prefix: bool = True):
        return analyze_rescore(loaded, images, swaps=swaps[: variants - 1], device=device, batch_size=args.batch_size,
                       workers=args.workers, share_prefix=share_prefix)

    measured = {v: best_time(lambda v=v: score(v), args.repeats, device) for v in args.variants}
    ours = measured[1][1] if 1 in measured else score(1)
    print(f"decode only            {n / decode_seconds:8.1f} images/s")
    print(f"plain torchvision loop {n / plain_seconds:8.1f} images/s   top-1 {plain_top1:.3f}")
    print(f"FilterLens rescore     {ours.images_per_second:8.1f} images/s   top-1 {ours.top1:.3f}")
    alone = measured[1][0] if 1 in measured else None
    rows = [[v, seconds, seconds / v, (seconds - alone) / (v - 1) if alone and v > 1 else None,
             seconds / plain_seconds, seconds / v / plain_seconds] for v, (seconds, _) in measured.items()]
    print(scaling_table(VARIANT_COLUMNS, rows))
    print(scaling_note(args.repeats, "variants"))
    most = max(measured)
    print(f"top-1 with {most} variants: original {measured[most][1].top1:.3f}, "
          + ", ".join(f"{v.method} {v.top1:.3f}" for v in measured[most][1].swaps))
    print(f"ratio throughput FilterLens / plain        = {ours.images_per_second * plain_seconds / n:.2f}  "
          "(target ≥ 1)")
    if 7 in measured:
        best = interleaved_best({"plain": lambda: plain_loop(model, loader, device), "shared": lambda: score(7),
                                 "whole": lambda: score(7, share_prefix=False)}, args.repeats, device)
        starts = sorted({v.computed_from or "the input" for v in measured[7][1].swaps})
        print(f"ratio time (1 + 6 variants) / plain 1      = {best['shared'] / best['plain']:.2f}  (target ≤ 3; "
              f"≤ 2.5 stage-wise; swapped variants ran from {', '.join(starts)})")
        print(f"  the same, whole network per variant      = {best['whole'] / best['plain']:.2f}  (these two: least "
              f"of {args.repeats} rounds timing the plain loop and both in turn)")
    share = max(plain_seconds - decode_seconds, 0.0) / plain_seconds
    print(f"forward share of the plain loop            = {share:.2f}  (7 variants cost about 1 + 6 × this when "
          "decoding and forward passes overlap)")


if __name__ == "__main__":
    main()

"""Re-scoring throughput: FilterLens vs a plain torchvision ``ImageFolder`` + ``DataLoader`` + ``model(x)`` loop on the
same model, images, batch size, workers and device, and the cost of scoring the original plus six swapped variants.

Prints images/s of both loops and two ratios (DESIGN targets: throughput ratio ≥ 1; 1 + 6 variants ≤ 3× one plain
evaluation), plus the decode-only rate that bounds them. Example:

    python bench/bench_rescore.py --model torchvision:mobilenet_v2=mobilenet_v2_imagenet.pt --mean .5 .5 .5 \\
        --std .5 .5 .5 --crop-pct 0.875 --images ../shared/fixtures/imagenet-sample --max-images 200
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torchvision
from torch.utils.data import DataLoader, Subset
from torchvision import transforms

from fl_core.backend import resolve_device
from fl_core.depthwise import depthwise_bank
from fl_core.evaluate import rescore
from fl_core.images import folder_images
from fl_core.models import load_model
from fl_core.scalefit import FIT_METHODS
from fl_core.swap import swap_filters


def plain_transform(config) -> transforms.Compose:
    """The classic torchvision evaluation transform for the model's preprocessing."""
    return transforms.Compose([
        transforms.Resize(config.resize_size, interpolation=transforms.InterpolationMode(config.interpolation)),
        transforms.CenterCrop(config.input_size), transforms.ToTensor(), transforms.Normalize(config.mean, config.std)])


def plain_loop(model, loader, device) -> tuple[float, float]:
    """(seconds, top-1) of ``for x, y in loader: model(x)``."""
    model = model.to(device).eval()
    correct = total = 0
    start = time.perf_counter()
    with torch.no_grad():
        for x, y in loader:
            logits = model(x.to(device))
            correct += int((logits.argmax(dim=1).cpu() == y).sum())
            total += len(y)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, correct / total


def decode_only(loader) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - start


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
    decode_seconds = decode_only(loader)
    plain_seconds, plain_top1 = plain_loop(loaded.copy_model(), loader, device)
    ours = rescore(loaded, images, device=device, batch_size=args.batch_size, workers=args.workers)
    bank = depthwise_bank(loaded)
    swaps = [swap_filters(bank, method) for method in FIT_METHODS]
    start = time.perf_counter()
    variants = rescore(loaded, images, swaps, device=device, batch_size=args.batch_size, workers=args.workers)
    variants_seconds = time.perf_counter() - start
    print(f"decode only            {n / decode_seconds:8.1f} images/s")
    print(f"plain torchvision loop {n / plain_seconds:8.1f} images/s   top-1 {plain_top1:.3f}")
    print(f"FilterLens rescore     {ours.images_per_second:8.1f} images/s   top-1 {ours.top1:.3f}")
    print(f"1 + 6 variants         {variants_seconds:8.1f} s (plain loop {plain_seconds:.1f} s)   top-1 "
          + ", ".join(f"{v.method} {v.top1:.3f}" for v in variants.swaps))
    ratio = ours.images_per_second * plain_seconds / n
    print(f"ratio throughput FilterLens / plain        = {ratio:.2f}  (target ≥ 1)")
    print(f"ratio time (1 + 6 variants) / plain 1      = {variants_seconds / plain_seconds:.2f}  (target ≤ 3)")
    share = max(plain_seconds - decode_seconds, 0.0) / plain_seconds
    print(f"forward share of the plain loop            = {share:.2f}  (7 variants cost about 1 + 6 × this when "
          "decoding and forward passes overlap)")


if __name__ == "__main__":
    main()

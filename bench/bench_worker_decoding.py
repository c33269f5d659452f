"""Re-scoring's image decoding as served (threads inside a daemonic process: a Dask worker may start no processes)
against the command line's (DataLoader worker processes) and in-process decoding, on the same model, images and
batches, interleaved (a load spike on a shared machine disturbs all of them alike), the least of ``--repeats`` runs.

Prints seconds, images/s and each time against the DataLoader processes'. Example:

    python bench/bench_worker_decoding.py --images ../shared/fixtures/imagenet-sample --max-images 128
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import time

from fl_core.io.images import folder_images
from fl_core.io.models import load_model
from fl_core.masterkeys.rescore import rescore

WAYS = {"DataLoader processes (command line)": False, "threads (in a Dask worker)": True, "in-process": None}
"""How the images are decoded: the process is marked daemonic (as a Dask worker is) for the threads, and re-scoring
is asked for no decoding workers for in-process."""


def timed_rescore(loaded, images, args, daemonic: bool | None) -> float:
    """Seconds of one re-score, this process marked daemonic as asked (``None``: decoded in-process)."""
    config = multiprocessing.current_process()._config
    config["daemon"] = bool(daemonic)
    try:
        began = time.perf_counter()
        rescore(loaded, images, replacements=("B",), batch_size=args.batch_size,
                workers=0 if daemonic is None else args.workers, progress=False)
        return time.perf_counter() - began
    finally:
        config["daemon"] = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo:mobilenet_v2")
    parser.add_argument("--images", required=True, help="ImageFolder tree")
    parser.add_argument("--max-images", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="decoding processes or threads")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded, images = load_model(args.model), folder_images(args.images, limit=args.max_images)
    best = dict.fromkeys(WAYS, math.inf)
    for _ in range(args.repeats):
        for name, daemonic in WAYS.items():
            best[name] = min(best[name], timed_rescore(loaded, images, args, daemonic))
    reference = best[next(iter(WAYS))]
    for name, seconds in best.items():
        print(f"{name:38s} {seconds:7.2f} s  {len(images) / seconds:6.1f} images/s  ×{seconds / reference:.2f}")


if __name__ == "__main__":
    main()

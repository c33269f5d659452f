"""Time and memory of a full Channel Axes layer analysis, as ratios to one forward pass over the same images.

For each (channels C, images N) the analysed layer is the last conv of a random-init SmallVGG whose stages are C/4,
C/2, C wide (32×32 inputs, 11 classes, random labels); calibration and evaluation sets have N images each. Stages:

* ``statistics`` — the one streaming pass + both axes, vs one forward pass over the N calibration images;
* ``lesions``    — mean/zero-ablation and peer replacement of all C channels (3C + 1 copies, batched replay), vs one
  forward pass over the N evaluation images; ``per copy`` divides by 3C + 1, i.e. compares with running each
  lesioned network separately (1.0 = no saving);
* ``pruning``    — 4 criteria × 4 pruning points, physically pruned and evaluated, vs one forward pass;
* ``memory``     — peak resident memory above the process's level before the stage (CPU; Linux ``VmHWM``, reset
  per stage) or peak CUDA memory, vs the same for one forward pass.

Each configuration runs in a fresh subprocess so memory peaks do not leak between rows. Usage::

    python bench/bench_channels.py                 # C ∈ {32, 64, 128, 256}, N ∈ {128, 512}
    python bench/bench_channels.py --channels 64 --images 256 1024
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")


def _memory_mb() -> tuple[float, float]:
    """(current, peak) in MiB: CUDA allocations when a GPU is used, else resident memory."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _measured(fn):
    """Run ``fn()``; return (result, seconds, MiB of peak memory above the level before)."""
    import torch

    _reset_peak()
    before, _ = _memory_mb()
    start = time.perf_counter()
    value = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return value, seconds, max(_memory_mb()[1] - before, 0.0)


def run_one(channels: int, images: int) -> dict:
    """One configuration, in this process."""
    import torch

    from fl_core.backend import inference_autocast, resolve_device
    from fl_core.calibration import ChannelData, LabelledInputs
    from fl_core.channels import ChannelSettings, add_intervention_columns, importance_scores, layer_axes
    from fl_core.interventions import channel_interventions
    from fl_core.models import InputConfig, LoadedModel
    from fl_core.nets import SmallVGG
    from fl_core.pruning import PruningSettings, prune_curves

    torch.manual_seed(0)
    device = resolve_device(None)
    net = SmallVGG(num_classes=11, widths=(channels // 4, channels // 2, channels)).eval().requires_grad_(False)
    loaded = LoadedModel(spec="bench", label="bench", model=net, state_dict=net.state_dict(),
                         input_config=InputConfig(input_size=32, crop_pct=1.0))
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2 * images, 3, 32, 32, generator=generator)
    y = torch.randint(0, 11, (2 * images,), generator=generator)
    data = ChannelData(LabelledInputs(x=x[:images], y=y[:images]), LabelledInputs(x=x[images:], y=y[images:]),
                       classes=tuple(map(str, range(11))), description="random", seed=0)
    layer = [name for name, m in net.named_modules() if isinstance(m, torch.nn.Conv2d)][-1]
    settings = ChannelSettings(cluster_seeds=10)
    model = loaded.copy_model().to(device)

    def forward():
        with inference_autocast(device):
            for batch, _ in data.calibration.batches(settings.batch_size):
                model(batch.to(device))

    _, _, forward_mb = _measured(forward)  # the first pass allocates: its memory peak
    _, forward_s, _ = _measured(forward)  # a warm pass: its time
    (site, _, local, table), stats_s, stats_mb = _measured(
        lambda: layer_axes(model, layer, data, settings, device, None))
    interventions, lesion_s, lesion_mb = _measured(lambda: channel_interventions(
        model, site, data.evaluation, local.post_means, local.replacement_peers, local.replacement_beta,
        local.replacement_intercept, device=device, batch_size=settings.batch_size,
        memory_bytes=settings.memory_bytes))
    scores = importance_scores(add_intervention_columns(table, interventions))
    pruning = PruningSettings(criteria=("local", "target", "l1", "random"), finetune_steps=0)
    _, pruning_s, pruning_mb = _measured(lambda: prune_curves(
        model, layer, data.calibration, data.evaluation, scores, pruning, device=device))
    copies = 3 * channels + 1
    return {"channels": channels, "images": images, "device": str(device), "forward_s": forward_s,
            "statistics": stats_s / forward_s, "lesions": lesion_s / forward_s,
            "lesions_per_copy": lesion_s / forward_s / copies, "lesion_mode": interventions.effects.mode,
            "pruning": pruning_s / forward_s, "forward_mb": forward_mb, "statistics_mb": stats_mb,
            "lesions_mb": lesion_mb, "pruning_mb": pruning_mb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--channels", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--images", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--one", type=int, nargs=2, metavar=("C", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(*args.one)))
        return
    header = (f"{'C':>5} {'N':>5} {'forward s':>9} | {'stats ×':>7} {'lesions ×':>9} {'per copy ×':>10} "
              f"{'pruning ×':>9} | {'fwd MB':>7} {'stats MB':>8} {'lesion MB':>9} {'prune MB':>8}")
    print(header)
    print("-" * len(header))
    for channels in args.channels:
        for images in args.images:
            out = subprocess.run([sys.executable, __file__, "--one", str(channels), str(images)], check=True,
                                 capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"{channels:>5} {images:>5} {r['forward_s']:>9.3f} | {r['statistics']:>7.1f} {r['lesions']:>9.1f} "
                  f"{r['lesions_per_copy']:>10.3f} {r['pruning']:>9.1f} | {r['forward_mb']:>7.0f} "
                  f"{r['statistics_mb']:>8.0f} {r['lesions_mb']:>9.0f} {r['pruning_mb']:>8.0f}", flush=True)
    print("ratios: stage time / one forward pass over the same N images; per copy: lesions ÷ (3C + 1) copies "
          "(1.0 = as slow as one full pass per lesion); MB: peak memory above the level before the stage.")


if __name__ == "__main__":
    main()

"""How the time and memory of a full Channel Axes layer analysis grow with the layer's channels, in seconds and as
ratios to one forward pass over the same images.

For each (channels C, images N) the analysed layer is the last conv of a random-init SmallVGG whose stages are C/4,
C/2, C wide (32×32 inputs, 11 classes, random labels); calibration and evaluation sets have N images each. Stages:

* ``statistics`` — the one streaming pass + both axes, vs one forward pass over the N calibration images;
* ``lesions``    — mean/zero-ablation and peer replacement of all C channels (3C copies run from the first changed
  module on, :mod:`fl_core.networks.partial_forward`), vs one forward pass over the N evaluation images; ``per copy``
  divides by 3C + 1, i.e. compares with running each lesioned network separately (1.0 = no saving);
* ``pruning``    — 4 criteria × 4 pruning points, physically pruned and evaluated (each from the first layer that
  reads the remaining channels), vs one forward pass;
* ``memory``     — peak resident memory above the process's level before the stage (CPU; Linux ``VmHWM``, reset
  per stage) or peak CUDA memory, vs the same for one forward pass.

Each time is the least of ``--repeats`` runs; each configuration runs in a fresh subprocess so memory peaks do not
leak between rows. One table per N, one row per C, and as the last row the growth exponent of each cost against C
(a conv layer's FLOPs grow as C²).

``--defaults SPEC [--layer NAME]`` times ``analyze_channels`` with the library's defaults beside its estimate.
``--page SPEC [--data SOURCE]`` instead times the Channel Axes page's job for a model's default layer at the page's
default settings (:func:`fl_ui.channels.default_request`), in seconds per stage, once, next to one forward pass over
the evaluation images. Usage::

    python bench/bench_channels.py                 # C ∈ {16, 32, 64, 128}, N = 128
    python bench/bench_channels.py --channels 64 128 256 --images 256 1024
    python bench/bench_channels.py --page demo:mobilenet_v2      # the bundled photos' crops, as the page opens
    python bench/bench_channels.py --page demo:mobilenet_v2 --data ../shared/fixtures/imagenet-sample
    python bench/bench_channels.py --defaults demo:squeezenet1_0 --layer features.3.expand3x3   # library defaults
    python bench/bench_channels.py --defaults module:two_convolutions    # issue 43's small module, its estimate
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _scaling import Column, best_time, scaling_note, scaling_table

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


def _measured(fn, repeats: int, device):
    """Run ``fn()`` ``repeats`` times; return (result, least seconds, MiB of peak memory above the level before)."""
    _reset_peak()
    before, _ = _memory_mb()
    seconds, value = best_time(fn, repeats, device)
    return value, seconds, max(_memory_mb()[1] - before, 0.0)


def run_one(channels: int, images: int, repeats: int) -> dict:
    """One configuration, in this process."""
    import torch

    from fl_core.channelaxes.analysis import ChannelSettings, add_intervention_columns, importance_scores, layer_axes
    from fl_core.channelaxes.calibration import ChannelData, LabelledInputs
    from fl_core.channelaxes.interventions import channel_interventions
    from fl_core.channelaxes.pruning import PruningSettings, prune_curves
    from fl_core.compute.device import inference_autocast, resolve_device
    from fl_core.io.models import LoadedModel
    from fl_core.io.nets import SmallVGG
    from fl_core.io.preprocessing import InputConfig

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

    _, forward_s, forward_mb = _measured(forward, repeats + 1, device)  # the first pass allocates: its memory peak
    (site, _, local, table), stats_s, stats_mb = _measured(
        lambda: layer_axes(model, layer, data, settings, device, None), repeats, device)
    interventions, lesion_s, lesion_mb = _measured(lambda: channel_interventions(
        model, site, data.evaluation, local.post_means, local.replacement_peers, local.replacement_beta,
        local.replacement_intercept, device=device, batch_size=settings.batch_size,
        memory_bytes=settings.memory_bytes), repeats, device)
    scores = importance_scores(add_intervention_columns(table, interventions))
    pruning = PruningSettings(criteria=("local", "target", "l1", "random"), finetune_steps=0)
    _, pruning_s, pruning_mb = _measured(lambda: prune_curves(
        model, layer, data.calibration, data.evaluation, scores, pruning, device=device), repeats, device)
    return {"channels": channels, "images": images, "device": str(device), "forward_s": forward_s,
            "statistics_s": stats_s, "lesions_s": lesion_s, "pruning_s": pruning_s,
            "lesion_mode": interventions.effects.mode, "forward_mb": forward_mb, "statistics_mb": stats_mb,
            "lesions_mb": lesion_mb, "pruning_mb": pruning_mb}


COLUMNS = (Column("C", "d"), Column("forward s", ".3f", cost=True), Column("stats s", ".3f", cost=True),
           Column("lesions s", ".3f", cost=True), Column("pruning s", ".3f", cost=True), Column("stats ×", ".1f"),
           Column("lesions ×", ".1f"), Column("per copy ×", ".3f"), Column("pruning ×", ".1f"),
           Column("fwd MB", ".0f", cost=True), Column("stats MB", ".0f", cost=True),
           Column("lesion MB", ".0f", cost=True), Column("prune MB", ".0f", cost=True))


def row(channels: int, images: int, repeats: int) -> list:
    """One table row, measured in a fresh subprocess."""
    out = subprocess.run([sys.executable, __file__, "--one", str(channels), str(images), "--repeats", str(repeats)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    forward = r["forward_s"]
    return [channels, forward, r["statistics_s"], r["lesions_s"], r["pruning_s"], r["statistics_s"] / forward,
            r["lesions_s"] / forward, r["lesions_s"] / forward / (3 * channels + 1), r["pruning_s"] / forward,
            r["forward_mb"], r["statistics_mb"], r["lesions_mb"], r["pruning_mb"]]


def page_job(spec: str, source: str) -> None:
    """Print the seconds of the page's default-layer job (:func:`fl_ui.channels.default_request`: the request the
    page makes before any setting is changed) and of one forward pass over its evaluation images."""
    import time

    import torch

    from fl_core.channelaxes.analysis import analyze_channels
    from fl_core.channelaxes.calibration import channel_data
    from fl_core.compute import allocator
    from fl_core.compute.device import inference_autocast, resolve_device
    from fl_core.io.models import load_model
    from fl_ui.channels import default_request

    allocator.tune()  # as in a worker (fl_core.survey.engine.WORKER_PROCESS_CONFIG)
    request = default_request(spec, images=source)
    settings, device = request.settings, resolve_device(None)
    loaded = load_model(spec)
    init = load_model(loaded.init_spec) if request.compare_init else None
    data = channel_data(loaded, request.source, request.n_calibration, request.n_evaluation, seed=settings.axes.seed)
    evaluation = data.evaluation.materialized(settings.memory_bytes)
    model = loaded.copy_model().to(device).eval()
    start = time.perf_counter()
    with inference_autocast(device):
        for x, _ in evaluation.batches(settings.batch_size):
            model(x.to(device))
    forward = time.perf_counter() - start
    start = time.perf_counter()
    result = analyze_channels(loaded, data, settings, init=init, device=device)
    total = time.perf_counter() - start
    stages = "  ".join(f"{name} {seconds:.1f} s" for name, seconds in result.timings.items())
    effects = result.interventions.effects
    print(f"{spec}, layer {settings.layer} ({result.site.n_channels} channels), {data.description}: "
          f"{len(data.calibration)} + {len(evaluation)} images, lesions {', '.join(settings.lesion_kinds)}, "
          f"{len(settings.pruning.criteria)} pruning criteria, initialization {'compared' if init else 'none'}, "
          f"{torch.get_num_threads()} threads, {device}")
    print(f"page job {total:.1f} s ({stages}); one forward pass over the evaluation images {forward:.2f} s")
    print(f"lesions ran from {effects.computed_from or 'the input'} ({effects.mode}"
          f"{f', {effects.reader} by the changed channel' if effects.reader else ''}); pruned networks from "
          f"{result.pruning.computed_from or 'the input'}")


SMALL_MODULE = "module:two_convolutions"
"""``--defaults`` of this name: the small user module of issue 43's bar, two convolutions and a linear head analysed on
``channel_data(net, TensorDataset(64 random 32-px images), n_calibration=32, n_evaluation=32)``."""


def small_module_data():
    """The two-convolution module and its labelled tensors (:data:`SMALL_MODULE`)."""
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from fl_core.channelaxes.calibration import channel_data
    from fl_core.io.models import LoadedModel

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    loaded = LoadedModel.from_module(net, name="two_convolutions")
    images, labels = torch.rand(64, 3, 32, 32), torch.randint(0, 10, (64,))
    return loaded, lambda: channel_data(loaded, TensorDataset(images, labels), n_calibration=32, n_evaluation=32)


def library_defaults(spec: str, layer: str | None) -> None:
    """Print the seconds of ``analyze_channels(spec)`` with the library's defaults (the model's default layer, or
    ``layer``), stage by stage beside :func:`~fl_core.channelaxes.estimate.estimate_channels` asked twice (its time,
    process CPU time and what it assumes), the labels of the crops (``channel_data``) timed as a stage of their own,
    and the load average before and after (``spec`` :data:`SMALL_MODULE`: the bar's small module)."""
    import os
    import time

    import torch

    from fl_core.channelaxes.analysis import analyze_channels
    from fl_core.channelaxes.calibration import channel_data
    from fl_core.channelaxes.estimate import estimate_channels
    from fl_core.channelaxes.site import channel_layer
    from fl_core.compute import allocator
    from fl_core.io.models import load_model

    allocator.tune()  # as the command line does (fl_core.cli.main)
    loaded, make_data = small_module_data() if spec == SMALL_MODULE else (load_model(spec), None)
    layer = channel_layer(loaded, layer).name
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {torch.get_num_threads()} threads")
    start = time.perf_counter()
    data = make_data() if make_data else None
    asked = []
    for _ in range(2):
        wall, cpu = time.perf_counter(), time.process_time()
        asked.append((estimate_channels(loaded, data, layer=layer), time.perf_counter() - wall,
                      time.process_time() - cpu))
    estimate = asked[0][0]
    start, cpu = time.perf_counter(), time.process_time()
    if data is None:
        data = channel_data(loaded)
    labels = time.perf_counter() - start
    result = analyze_channels(loaded, data, layer=layer, progress=False)
    total, cpu = time.perf_counter() - start, time.process_time() - cpu
    timings = ({"labels": labels} if "labels" in estimate.stages else {}) | result.timings
    stages = "  ".join(f"{name} {seconds:.1f} s (est. {estimate.stages.get(name, 0):.1f})"
                       for name, seconds in timings.items())
    print(f"{spec}, layer {layer} ({result.site.n_channels} channels), library defaults ({result.data}): "
          f"{total:.1f} s ({cpu:.1f} s of CPU time), estimated {estimate.seconds:.1f} s = "
          f"{estimate.seconds / total:.2f}× ({stages})")
    print("estimate asked twice: " + "; ".join(f"{e.seconds:.1f} s in {took:.2f} s ({used:.2f} CPU-s)"
                                                 for e, took, used in asked) + f"; {estimate.basis}")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--channels", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--images", type=int, nargs="+", default=[128])
    parser.add_argument("--repeats", type=int, default=3, help="time each stage this many times, keep the least")
    parser.add_argument("--one", type=int, nargs=2, metavar=("C", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--page", metavar="SPEC", help="time the page's default-layer job of this model instead")
    parser.add_argument("--data", default="bundled", help="the page job's images: 'bundled' (their labelled crops, "
                        "as the page opens) or a labelled ImageFolder")
    parser.add_argument("--defaults", metavar="SPEC", help="time analyze_channels(SPEC) with the library's defaults")
    parser.add_argument("--layer", help="with --defaults: this layer instead of the model's default one")
    args = parser.parse_args()
    if args.defaults:
        library_defaults(args.defaults, args.layer)
        return
    if args.page:
        page_job(args.page, args.data)
        return
    if args.one:
        print(json.dumps(run_one(*args.one, args.repeats)))
        return
    for images in args.images:
        print(f"\nN = {images} calibration and {images} evaluation images")
        print(scaling_table(COLUMNS, [row(channels, images, args.repeats) for channels in args.channels]), flush=True)
    print("×: stage time / one forward pass over the same N images; per copy: lesions ÷ (3C + 1) copies "
          "(1.0 = as slow as one full pass per lesion); MB: peak memory above the level before the stage.")
    print(scaling_note(args.repeats, "channels C"))


if __name__ == "__main__":
    main()

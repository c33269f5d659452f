"""How long :func:`~fl_core.channelaxes.analysis.analyze_channels` will take, known before it starts.

**Work.** Each stage runs parts of the network on some images, in batched passes (:func:`stage_work`,
:func:`stage_passes`): the bundled crops' labels, when they are the network's decisions, and the statistics run the
whole network on the images (the statistics also accumulate the layer's channel moments); every lesion kind runs one
copy per channel from after the layer on, on the evaluation images, the copies batched as the analysis plans them;
every pruned network (criterion × fraction) runs from the layer's readers on, plus the fine-tune's forward and backward
passes. The work is counted in the cost of each convolution and of the modules after it up to the next one, per image
and per pass: their multiply-accumulates (MACs), or what they measurably cost.

**Cost.** The network's forward pass is timed module by module (:func:`forward_profile`): :data:`PROBE_REPEATS`
passes of 1 and of :data:`PROBE_IMAGES` images in turn, after an untimed one, the median of each part giving its cost
per image and per pass; the layer's moments and substitutions are timed alike (:func:`layer_seconds`). Measured, not
counted in MACs, because a small network's time goes to memory-bound modules (activations, pooling) that have no
MACs; a median of several short passes, because one pass on a loaded machine is as likely as not to wait for a core;
and on a CPU in this process's **CPU time in one thread**, because a machine busy with other work stretches the wall
clock of a pass many times over, and the CPU time of several threads too (each waits, spinning, for the others at
every operation), the CPU time of one thread hardly at all (MobileNetV2's passes of 8 images at a load of 14 on 2
cores: 0.20–0.24 CPU-s in one thread, 0.55–1.7 in two). Each stage is its cost times its measured ratio to the probe's
(:data:`STAGE_FACTORS`). Timings are kept for :data:`PROFILE_SECONDS` per architecture and device, so estimates asked
together agree, then taken again.

**Seconds.** On a CPU the CPU seconds become wall-clock seconds at the speed the analysis will get (:func:`cpu_speed`):
it runs in as many threads as the load average leaves idle cores (:func:`~fl_core.compute.device.analysis_threads`), all
of them on an idle machine, one beside other work, which then gets the share of a core the timed passes got (their CPU
time over their wall-clock time). The estimate **assumes the machine stays as busy as it is when asked**
(:attr:`ChannelsEstimate.basis` says how busy that was): a run that starts while others start theirs takes longer.

**Several layers, seeds, networks.** Layers analysed together share the labels, statistics and initialization passes
and add up their lesions and pruning curves (:func:`layers_work`); the initialization runs the statistics pass once
per seed, twice with its BatchNorm recalibration; pruning the layers together to FLOPs targets runs whole networks,
each recovered (the ``network pruning`` stage).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import nn

from fl_core.arguments import ImagesLike, ModelLike, as_images, as_model, as_settings
from fl_core.channelaxes.calibration import ChannelData, is_crops, photo_class_mapping
from fl_core.channelaxes.interventions import CPU_PASS_BYTES, Substitutions, plan_passes, substituted
from fl_core.channelaxes.layerstats import patch_column_sums
from fl_core.channelaxes.moments import ChannelMoments
from fl_core.channelaxes.settings import ChannelDataSettings, ChannelOverrides, ChannelSettings
from fl_core.channelaxes.site import channel_layer
from fl_core.compute.device import (
    DeviceLike,
    analysis_threads,
    cpu_layout,
    cpu_threads,
    inference_autocast,
    load_average,
    resolve_device,
    statistics_dtype,
)
from fl_core.io.layers import ConvLayer, conv_inventory
from fl_core.io.models import LoadedModel
from fl_core.results import Result

T = TypeVar("T")

if TYPE_CHECKING:
    import pandas as pd
    from typing_extensions import Unpack

STAGE_FACTORS = {"labels": 2.8, "statistics": 1.1, "interventions": 0.73, "pruning": 1.2, "initialization": 1.1,
                 "network pruning": 1.2}
"""One thread's CPU seconds of each stage per CPU second of the same work in the timed passes (:func:`forward_profile`):
the labels' pass runs the shared model as it is (not channels-last) after the crops are cut and resized to the input
(1.9 CPU-s of MobileNetV2's 320); the lesioned copies run with their BatchNorms folded and the first reader adding one
channel's term; each pruned network is traced and checked against its own full pass before it is scored. Fitted on
MobileNetV2's default layer and the two-convolution module ``module:two_convolutions``, analysed in one thread on 2
CPU cores at a load average of 13–15 (``python bench/bench_channels.py --defaults SPEC``; docs/results.md, issue
43). ``network pruning`` (whole pruned networks scored and recovered) is not fitted: it takes the one-layer
pruning's."""
COPIES_PASS_SECONDS = 0.006
"""One thread's CPU seconds of the lesion engine's own work in each batched pass of lesioned copies (its hooks, the
copies' bookkeeping, their losses), beyond the modules it runs: fitted with the interventions' factor of
:data:`STAGE_FACTORS` on its two runs, 1,024 passes of two samples (the two-convolution module) against 320 of 66
(MobileNetV2)."""
PROBE_IMAGES = 4
"""Images of each timed forward pass (:func:`forward_profile`)."""
PROBE_REPEATS = 3
"""Timed forward passes, after an untimed one; each module's time is their median."""
PROFILE_SECONDS = 60.0
"""How long a profile serves estimates of the same model on the same device before it is timed again."""
SHARED_STAGES = ("labels", "statistics", "initialization")
"""Stages one pass does for every layer analysed together (:func:`layers_work`)."""


def conv_macs(layer: ConvLayer) -> int:
    """Multiply-accumulates of one convolution per image: ``out · in/groups · kh · kw · side²`` (0 when the probe
    pass did not reach it)."""
    kh, kw = layer.kernel_size
    return layer.out_channels * layer.in_channels // layer.groups * kh * kw * (layer.output_size or 0) ** 2


@dataclass(frozen=True)
class LayerCosts:
    """What one image costs in each convolution of a network and in the modules after it up to the next convolution
    (activations, pooling, the classifier head), in :func:`~fl_core.io.layers.conv_inventory` order: MACs
    (:func:`layer_macs`) or seconds (:func:`forward_profile`); with seconds, also what each batched pass costs
    whatever its size (launching the modules' operations, waiting for the threads of a busy machine).

    Attributes:
        conv, after: per image, each convolution and the modules after it.
        conv_pass, after_pass: per pass, the same parts (none: nothing).
    """

    conv: tuple[float, ...]
    after: tuple[float, ...]
    conv_pass: tuple[float, ...] = ()
    after_pass: tuple[float, ...] = ()

    @property
    def total(self) -> float:
        """A whole forward pass, per image."""
        return sum(self.conv) + sum(self.after)

    def after_layer(self, index: int) -> float:
        """The network after convolution ``index``, per image: the modules after it, then every later convolution's
        part."""
        return self.after[index] + sum(self.conv[index + 1:]) + sum(self.after[index + 1:])

    @property
    def total_pass(self) -> float:
        """A whole forward pass, per pass."""
        return sum(self.conv_pass) + sum(self.after_pass)

    def after_layer_pass(self, index: int) -> float:
        """The network after convolution ``index``, per pass."""
        if not self.conv_pass:
            return 0.0
        return self.after_pass[index] + sum(self.conv_pass[index + 1:]) + sum(self.after_pass[index + 1:])


def layer_macs(loaded: LoadedModel) -> LayerCosts:
    """The MACs of each convolution per image (:func:`conv_macs`; nothing for the modules between them)."""
    macs = tuple(float(conv_macs(lay)) for lay in conv_inventory(loaded))
    return LayerCosts(macs, (0.0,) * len(macs))


def stage_work(loaded: LoadedModel, layer: str, n_calibration: int, n_evaluation: int, settings: ChannelSettings,
               init: bool = False, labels: bool = False, costs: LayerCosts | None = None,
               moments: float | None = None, substitution: tuple[float, float] = (0.0, 0.0),
               device: DeviceLike = "cpu") -> dict[str, float]:
    """Each stage of :func:`~fl_core.channelaxes.analysis.analyze_channels` in the ``costs`` of the parts of the
    network it runs (module docstring; default: MACs, :func:`layer_macs`), per image and per batched pass
    (:func:`stage_passes`): ``labels`` (the network's decisions on every image, when ``labels``), ``statistics``
    (with ``moments``, the per-image cost of the layer's channel moments in the same unit: default the MACs of their
    Gram matrices, :func:`moments_macs`), ``interventions`` (with ``substitution``, the cost of putting the copies'
    substitutions into the activation, per copy and image and per pass), ``pruning`` and ``initialization`` (when
    ``init``), the stages the settings run on ``device``."""
    costs = costs or layer_macs(loaded)
    layers = conv_inventory(loaded)
    names = [lay.name for lay in layers]
    found = layer in names
    start = names.index(layer) if found else 0
    channels = layers[start].out_channels if found else 0
    passes = stage_passes(layers, start, loaded.input_config.input_size, n_calibration, n_evaluation, settings,
                          resolve_device(device))
    whole, after = (costs.total, costs.total_pass), (costs.after_layer(start), costs.after_layer_pass(start))
    moments = (moments_macs(layers[start]) if moments is None else moments) * found
    work = {"labels": (n_calibration + n_evaluation) * whole[0] + passes["labels"] * whole[1]} if labels else {}
    work["statistics"] = n_calibration * (whole[0] + moments) + passes["statistics"] * whole[1]
    work["interventions"] = (len(settings.lesion_kinds) * channels * n_evaluation * (after[0] + substitution[0])
                             + passes["interventions"] * (after[1] + substitution[1]))
    if settings.pruning is not None:
        networks = len(settings.pruning.criteria) * len(settings.pruning.fractions)
        finetune = 3 * settings.pruning.finetune_steps * settings.pruning.finetune_batch * whole[0]
        work["pruning"] = networks * (n_evaluation * after[0] + finetune) + passes["pruning"] * after[1]
    if init:  # each seed's statistics pass, and its BatchNorm recalibration pass
        work["initialization"] = settings.init_seeds * (1 + settings.init_recalibrate) * work["statistics"]
    return work


def layers_work(loaded: LoadedModel, layers: Sequence[str], n_calibration: int, n_evaluation: int,
                settings: ChannelSettings, init: bool = False, labels: bool = False, costs: LayerCosts | None = None,
                timed: dict[str, tuple[float, tuple[float, float]]] | None = None, device: DeviceLike = "cpu"
                ) -> dict[str, float]:
    """:func:`stage_work` of several layers analysed together: the passes they share (labels, statistics, the
    initialization's) once, the per-layer stages (lesions, pruning) summed, and the layers pruned together to each
    FLOPs target (``network pruning``: every criterion's whole network scored twice and recovered). ``timed``: each
    layer's ``(moments, substitution)`` in the unit of ``costs`` (:func:`layer_seconds`; default their MACs)."""
    timed = timed or {}
    parts = [stage_work(loaded, layer, n_calibration, n_evaluation, settings, init, labels, costs=costs,
                        moments=timed[layer][0] if layer in timed else None,
                        substitution=timed[layer][1] if layer in timed else (0.0, 0.0), device=device)
             for layer in layers]
    work = {stage: (max if stage in SHARED_STAGES else sum)(part.get(stage, 0.0) for part in parts)
            for stage in parts[0]}
    pruning = settings.pruning
    if pruning is not None and pruning.flops_targets:
        networks = len(pruning.criteria) * len(pruning.flops_targets)
        total = (costs or layer_macs(loaded)).total
        work["network pruning"] = networks * (2 * n_evaluation + 3 * pruning.recovery_steps * pruning.finetune_batch
                                              ) * total
    return work


def stage_passes(layers: list[ConvLayer], start: int, input_size: int, n_calibration: int, n_evaluation: int,
                 settings: ChannelSettings, device: torch.device) -> dict[str, int]:
    """The batched passes of each stage of an analysis of convolution ``start`` of ``layers``: ``batch_size`` images
    at a time, the crops' labels 64; the lesioned copies run together as
    :func:`~fl_core.channelaxes.interventions.plan_passes` plans them (the largest activation after the site taken as
    the largest convolution output from the layer on); each pruned network once per batch of the evaluation images."""
    batches = -(-n_evaluation // settings.batch_size)
    copies = len(settings.lesion_kinds) * layers[start].out_channels
    largest = max(4 * lay.out_channels * (lay.output_size or 1) ** 2 for lay in layers[start:])
    images, per_pass = plan_passes(max(largest, 4 * 3 * input_size ** 2), copies, settings.batch_size,
                                   settings.memory_bytes, CPU_PASS_BYTES // largest if device.type == "cpu" else None)
    networks = 0 if settings.pruning is None else len(settings.pruning.criteria) * len(settings.pruning.fractions)
    return {"labels": -(-(n_calibration + n_evaluation) // 64), "statistics": -(-n_calibration // settings.batch_size),
            "interventions": -(-copies // per_pass) * -(-n_evaluation // images) if copies else 0,
            "pruning": networks * batches}


def moments_macs(layer: ConvLayer) -> float:
    """The MACs of one image's channel moments of a layer in the statistics pass: two C×C Gram matrices over its
    positions (the pre-activation's, and that of the half the image falls in), ``2 · side² · C²``."""
    return 2.0 * (layer.output_size or 0) ** 2 * layer.out_channels ** 2


@dataclass(frozen=True)
class ForwardProfile:
    """What each part of a network's forward pass costs on a device, and when it was timed.

    Attributes:
        costs: per image and per pass, each convolution and the modules after it (:class:`LayerCosts`): seconds of
            CPU time in one thread on a CPU, wall-clock seconds on an accelerator.
        device: where it was timed.
        share: on a CPU, the CPU seconds per wall-clock second the timed passes got (1 on an idle core, less beside
            other work); 1 on an accelerator.
        timed_at: ``time.monotonic()`` when it was timed.
    """

    costs: LayerCosts
    device: str
    share: float
    timed_at: float


QUIET_EFFICIENCY = 0.88
"""Speed of each of several threads, as a share of one thread's, that an analysis keeps on an idle CPU (MobileNetV2's
default layer with the library's defaults on 2 idle cores: 38.5 CPU-s in 21.8 s)."""


def cpu_speed(threads: int, share: float) -> float:
    """Seconds of one thread's CPU work done per second of wall-clock time by an analysis in ``threads`` threads
    (:func:`~fl_core.compute.device.analysis_threads`) where one thread gets ``share`` of a core: ``threads ·``
    :data:`QUIET_EFFICIENCY` (several threads run only where the load leaves them idle cores), else ``share``."""
    return threads * QUIET_EFFICIENCY * min(share, 1.0) if threads > 1 else share


_RECENT: dict[tuple, tuple[float, object]] = {}
"""Timings of the last :data:`PROFILE_SECONDS` (``time.monotonic()`` when taken, the timing), by what was timed:
the same network loaded again, a module passed again, or the same layer shape, shares one."""
_RECENT_LOCK = threading.Lock()


def recent(key: tuple, measure: Callable[[], T]) -> T:
    """``measure()``, or its value for ``key`` when one was taken within the last :data:`PROFILE_SECONDS`."""
    now = time.monotonic()
    with _RECENT_LOCK:
        for old in [k for k, (taken, _) in _RECENT.items() if now - taken >= PROFILE_SECONDS]:
            del _RECENT[old]
        if key in _RECENT:
            return _RECENT[key][1]  # type: ignore[return-value]
    value = measure()
    with _RECENT_LOCK:
        _RECENT[key] = (time.monotonic(), value)
    return value


def forward_profile(loaded: LoadedModel, device: DeviceLike = None) -> ForwardProfile:
    """The seconds per image of each convolution of ``loaded`` and of the modules after it on ``device``
    (module docstring): the one timed within the last :data:`PROFILE_SECONDS` for the same architecture (class,
    convolutions, input size) and device, else timed now on a private copy laid out as the analysis runs it
    (:func:`~fl_core.compute.device.cpu_layout`)."""
    device = resolve_device(device)
    key = ("forward", type(loaded._require_model()).__name__, loaded.conv_layers, loaded.input_config.input_size,
           str(device))

    def timed() -> ForwardProfile:
        costs, share = timed_costs(loaded, device)
        return ForwardProfile(costs, str(device), share, time.monotonic())

    return recent(key, timed)


def layer_seconds(layer: ConvLayer, device: DeviceLike = None) -> tuple[float, tuple[float, float]]:
    """What the analysis does with a layer's activation beyond running the network, in seconds, kept as the profile
    is: its channel moments in the statistics pass, per image (:func:`timed_moments`), and putting a lesioned copy's
    substitution into it, per copy and image and per call (:func:`timed_substitution`)."""
    device = resolve_device(device)
    key = ("layer", layer.out_channels, layer.output_size, str(device))
    return recent(key, lambda: (timed_moments(layer, device), timed_substitution(layer, device)))


def timed_substitution(layer: ConvLayer, device: torch.device) -> tuple[float, float]:
    """Seconds per copy and image, and per call, of :func:`~fl_core.channelaxes.interventions.substituted` on random
    activations of the layer's output shape: calls of one copy of one image and of two copies of two images in turn,
    :data:`PROBE_REPEATS` of each after an untimed one, their medians ``t₁`` and ``t₄`` giving ``(t₄ − t₁) / 3`` per
    copy and image and ``t₁`` less that per call."""
    side, channels = layer.output_size or 1, layer.out_channels
    zeros = Substitutions.constant(torch.zeros(channels))
    calls = {1: (torch.randn(1, channels, side, side, device=device), zeros[:1]),
             4: (torch.randn(2, channels, side, side, device=device), zeros[:2])}
    times: dict[int, list[float]] = {1: [], 4: []}
    clock = work_clock(device)
    with one_thread(device):
        for samples in [4] + [1, 4] * PROBE_REPEATS:
            activations, subs = calls[samples]
            start = clock()
            substituted(activations, subs, len(activations))
            times[samples].append(clock() - start)
    one, four = statistics.median(times[1]), statistics.median(times[4][1:])
    per_sample = max(four - one, 0.0) / 3
    return per_sample, max(one - per_sample, 0.0)


def timed_moments(layer: ConvLayer, device: torch.device) -> float:
    """Seconds per image of a layer's statistics beyond the forward pass: two
    :class:`~fl_core.channelaxes.moments.ChannelMoments` updates of its output (:func:`moments_macs`) and the column
    sums of its input's patches (:func:`~fl_core.channelaxes.layerstats.patch_column_sums`), timed on random
    activations of their shapes (:data:`PROBE_IMAGES` images, fewer for large activations: :func:`probe_images`; the
    median of :data:`PROBE_REPEATS`, after an untimed one)."""
    side = layer.output_size or 1
    conv = nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride, layer.padding,
                     layer.dilation, layer.groups, bias=False, device="meta")
    images = probe_images(layer)
    output = torch.randn(images, layer.out_channels, side, side, device=device)
    image = torch.randn(images, layer.in_channels, side * layer.stride[0], side * layer.stride[1], device=device)
    dtype = statistics_dtype(device)
    times = []
    clock = work_clock(device)
    with one_thread(device):
        for _ in range(PROBE_REPEATS + 1):
            moments = ChannelMoments(layer.out_channels, device)
            start = clock()
            moments.update(output)
            moments.update(output)
            patch_column_sums(image, conv, dtype)
            times.append(clock() - start)
    return statistics.median(times[1:]) / images


def probe_images(layer: ConvLayer) -> int:
    """Images of the layer's timed statistics: :data:`PROBE_IMAGES`, fewer (at least 2) where the activations of that
    many would pass 2²² values (a 224-px map of 32 channels: 2 images), so the probe stays well under a second."""
    values = max(layer.out_channels, layer.in_channels) * (layer.output_size or 1) ** 2 * max(layer.stride) ** 2
    return max(2, min(PROBE_IMAGES, (1 << 22) // max(values, 1)))


def input_seconds(data: object, device: DeviceLike = None) -> float:
    """Seconds per image of reading ``data``'s images into model input, where they are not held in memory as such
    (an image folder, or a script's images resized and normalized batch by batch): two images timed, kept as the
    profile is (the crops are held: 0)."""
    if not isinstance(data, ChannelData) or data.calibration.in_memory or not len(data.calibration):
        return 0.0
    device = resolve_device(device)
    clock = work_clock(device)

    def timed() -> float:
        with one_thread(device):
            start = clock()
            data.calibration.head(2)
        return (clock() - start) / min(2, len(data.calibration))

    return recent(("reading", id(data.calibration), str(device)), timed)


@torch.inference_mode()
def timed_costs(loaded: LoadedModel, device: torch.device) -> tuple[LayerCosts, float]:
    """:class:`LayerCosts` in seconds (:func:`work_clock`, in one thread), and the timed passes' CPU seconds per
    wall-clock second on a CPU (1 elsewhere): every leaf module of a private copy timed in passes of 1 and of
    :data:`PROBE_IMAGES` random images, :data:`PROBE_REPEATS` of each in turn after an untimed one; a module's time
    goes to the convolution it is, or else to the last convolution before it (the first, for modules before any). Of
    each part, the median time ``t₁`` of the one-image passes and ``t_B`` of the others give the cost per image
    ``(t_B − t₁) / (B − 1)`` and per pass ``t₁`` less one image's."""
    model = cpu_layout(loaded.copy_model().to(device).eval(), device)
    names = [lay.name for lay in conv_inventory(loaded)]
    part: dict[str, int] = {}  # leaf -> its part: 2i for convolution i, 2i + 1 for the modules after it
    passes: list[list[float]] = []
    started: dict[str, float] = {}
    clock = work_clock(device)

    def before(name: str):
        def hook(_module, _args) -> None:
            started[name] = clock()
        return hook

    def after(name: str):
        def hook(_module, _args, _output) -> None:
            if name not in part:
                last = max(part.values(), default=0) // 2
                part[name] = 2 * names.index(name) if name in names else 2 * last + 1
            passes[-1][part[name]] += clock() - started[name]
        return hook

    leaves = [(name, module) for name, module in model.named_modules() if not any(module.children())]
    hooks = [handle for name, module in leaves for handle in (module.register_forward_pre_hook(before(name)),
                                                              module.register_forward_hook(after(name)))]
    size = loaded.input_config.input_size
    inputs = {batch: torch.randn(batch, 3, size, size, device=device) for batch in (1, PROBE_IMAGES)}
    order = [PROBE_IMAGES] + [1, PROBE_IMAGES] * PROBE_REPEATS
    try:
        with inference_autocast(device), one_thread(device):
            passes.append([0.0] * (2 * len(names)))
            model(inputs[order[0]])
            wall, cpu = time.perf_counter(), time.process_time()
            for batch in order[1:]:
                passes.append([0.0] * (2 * len(names)))
                model(inputs[batch])
            share = (time.process_time() - cpu) / max(time.perf_counter() - wall, 1e-9)
    finally:
        for handle in hooks:
            handle.remove()
    one = [statistics.median(column) for column in zip(*passes[1::2])]
    many = [statistics.median(column) for column in zip(*passes[2::2])]
    per_image = [max(b - a, 0.0) / (PROBE_IMAGES - 1) for a, b in zip(one, many)]
    per_pass = [max(a - image, 0.0) for a, image in zip(one, per_image)]
    costs = LayerCosts(tuple(per_image[0::2]), tuple(per_image[1::2]), tuple(per_pass[0::2]), tuple(per_pass[1::2]))
    return costs, min(share, 1.0) if device.type == "cpu" else 1.0


def one_thread(device: torch.device) -> contextlib.AbstractContextManager:
    """What the probes run in: one CPU thread on a CPU (module docstring), as they are elsewhere."""
    return cpu_threads(1) if device.type == "cpu" else contextlib.nullcontext()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def work_clock(device: torch.device) -> Callable[[], float]:
    """What the probes time on ``device``: this process's CPU time on a CPU (the probes run in one thread,
    :func:`one_thread`: a machine busy with other work slows the wall clock, hardly that thread's work), the wall clock
    on an accelerator (after synchronizing)."""
    if device.type == "cpu":
        return time.process_time

    def wall() -> float:
        _synchronize(device)
        return time.perf_counter()

    return wall


@dataclass(frozen=True)
class ChannelsEstimate(Result):
    """How long a channel analysis will take (:func:`estimate_channels`), and what the estimate assumes.

    Attributes:
        seconds: the whole analysis.
        stages: seconds per stage (the stages of :func:`stage_work`): ``labels`` (the crops labelled by the network's
            decisions), ``statistics``, ``interventions`` (lesions and peer replacement), ``pruning``, and
            ``initialization`` when an initialization is compared.
        macs_per_second: the convolutions' multiply-accumulates per second of wall-clock time a forward pass is
            expected to run at (the timed passes at the speed the analysis will get: :func:`cpu_speed`).
        basis: what the estimate assumes: the forward passes it timed, where, and how busy the machine was.
    """

    seconds: float
    stages: dict[str, float]
    macs_per_second: float
    basis: str = ""

    def text(self) -> str:
        """``about 40 s`` / ``about 3 min``."""
        return duration_text(self.seconds)

    def to_frame(self) -> pd.DataFrame:
        """One row per stage: its expected seconds."""
        import pandas as pd

        return pd.DataFrame({"stage": list(self.stages), "seconds": list(self.stages.values())})


def duration_text(seconds: float) -> str:
    """``about 40 s`` below 90 s, else ``about 3 min``."""
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"


def estimate_channels(model: ModelLike, data: ImagesLike | ChannelData | None = None,
                      settings: ChannelSettings | None = None, *, init: ModelLike | None = None,
                      device: DeviceLike = None, **setting_overrides: Unpack[ChannelOverrides]) -> ChannelsEstimate:
    """How long :func:`~fl_core.channelaxes.analysis.analyze_channels` with the same arguments will take (module
    docstring), the images counted without reading them (:func:`image_counts`).

    Args:
        model: the model (a spec string, :class:`~fl_core.io.models.LoadedModel` or ``nn.Module``).
        data: what ``analyze_channels`` would be given (``None``: the bundled crops).
        settings: the layer, interventions and pruning protocol (``None``: the defaults).
        init: the initialization compared, if any (its axes are estimated too).
        device: where the analysis would run (the forward passes are timed there).
        **setting_overrides: fields of ``settings`` to replace, by name.
    """
    loaded = as_model(model)
    settings = as_settings(ChannelSettings, settings, setting_overrides)
    layer = channel_layer(loaded, settings.layer).name
    labels = (data is None or is_crops(data)) and photo_class_mapping(loaded) is None
    return channels_estimate(loaded, layer, *image_counts(data), settings, init is not None, device, labels,
                             input_seconds(data, device))


def image_counts(data: object) -> tuple[int, int]:
    """Calibration and evaluation images a channel analysis of ``data`` takes
    (:func:`~fl_core.channelaxes.calibration.channel_data` at its default sizes), counted without decoding them."""
    if isinstance(data, ChannelData):
        return len(data.calibration), len(data.evaluation)
    if data is None or is_crops(data):
        return ChannelDataSettings.n_calibration, ChannelDataSettings.n_evaluation
    images = len(as_images(data, "data"))
    return (min(images // 2, ChannelDataSettings.n_calibration),
            min(images - images // 2, ChannelDataSettings.n_evaluation))


def channels_estimate(loaded: LoadedModel, layer: str | Sequence[str], n_calibration: int, n_evaluation: int,
                      settings: ChannelSettings, init: bool, device: DeviceLike = None, labels: bool = False,
                      reading: float = 0.0) -> ChannelsEstimate:
    """:func:`estimate_channels` of a resolved call (one layer, or several analysed together: :func:`layers_work`):
    the work in the costs of :func:`forward_profile` and :func:`layer_seconds` (and ``reading``, the seconds per image
    of reading images not held in memory: :func:`input_seconds`), times :data:`STAGE_FACTORS`, the lesion engine's own
    work per pass added (:data:`COPIES_PASS_SECONDS`); on a CPU, one thread's CPU seconds divided by the speed the
    analysis will get in the threads the load leaves it (:func:`cpu_speed`)."""
    device = resolve_device(device)
    profile = forward_profile(loaded, device)
    layers = conv_inventory(loaded)
    index = [lay.name for lay in layers]
    names = [layer] if isinstance(layer, str) else list(layer)
    timed = {name: layer_seconds(layers[index.index(name)], device) for name in names}
    work = layers_work(loaded, names, n_calibration, n_evaluation, settings, init, labels, costs=profile.costs,
                       timed=timed, device=device)
    work["statistics"] += (n_calibration + n_evaluation) * reading  # the evaluation set is read into memory once
    if init:
        work["initialization"] += settings.init_seeds * n_calibration * reading
    stages = {stage: amount * STAGE_FACTORS[stage] for stage, amount in work.items()}
    if device.type == "cpu" and "interventions" in stages:
        stages["interventions"] += COPIES_PASS_SECONDS * sum(stage_passes(
            layers, index.index(name), loaded.input_config.input_size, n_calibration, n_evaluation, settings,
            device)["interventions"] for name in names)
    load, threads = load_average(), analysis_threads(device)
    speed = cpu_speed(threads, profile.share) if device.type == "cpu" else 1.0
    stages = {stage: seconds / speed for stage, seconds in stages.items()}
    rate = layer_macs(loaded).total / max(profile.costs.total, 1e-12) * speed
    return ChannelsEstimate(seconds=sum(stages.values()), stages=stages, macs_per_second=rate,
                            basis=estimate_basis(profile, load, threads, speed))


def estimate_basis(profile: ForwardProfile, load: float | None, threads: int, speed: float) -> str:
    """What an estimate assumes, in words."""
    timed = (f"forward passes of 1 and {PROBE_IMAGES} images timed module by module on {profile.device} (the median "
             f"of {PROBE_REPEATS})")
    if profile.device != "cpu":
        return f"{timed}; assumes the device stays as busy as while they were timed"
    busy = "" if load is None else f" at a load average of {load:.1f} on {os.cpu_count() or 1} cores"
    return (f"{timed} in one thread's CPU time, getting {profile.share:.2f} of a core{busy}; the analysis in "
            f"{threads} thread{'s' * (threads != 1)} doing {speed:.2f} s of that work per second; assumes the "
            "machine stays that busy")

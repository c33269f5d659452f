"""How long :func:`~fl_core.channelaxes.analysis.analyze_channels` will take, known before it starts.

**Work.** Each stage runs parts of the network on some images (:func:`stage_work`): the bundled crops' labels, when
they are the network's decisions, and the statistics run the whole network on the images; every lesion kind runs one
copy per channel from after the layer on (the layer's own output is computed once), on the evaluation images; every
pruned network (criterion × fraction) runs from the layer on, plus the fine-tune's forward and backward passes. The
work is counted per image in the cost of each convolution and of the modules after it before the next one: their
multiply-accumulates (MACs), or their measured seconds.

**Seconds.** The network's forward pass is timed module by module (:func:`forward_profile`): :data:`PROBE_REPEATS`
passes of :data:`PROBE_IMAGES` images after an untimed one, the median of each module's time. Seconds, not MACs,
because a small network's time goes to memory-bound modules (activations, pooling) that have no MACs, and a median of
several short passes, because one pass on a loaded machine is as likely as not to wait for a core. Each stage is its
work in these seconds times its measured cost relative to a plain forward pass (:data:`STAGE_FACTORS`). The profile
is kept for :data:`PROFILE_SECONDS` per model and device, so estimates asked together agree, and then measured again,
so an estimate follows the machine's load: it assumes the machine stays as busy as it was while the profile was
timed (a run that starts on an idle machine while others start theirs takes longer than estimated).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from fl_core.arguments import ImagesLike, ModelLike, as_images, as_model, as_settings
from fl_core.backend import DeviceLike, cpu_layout, inference_autocast, resolve_device
from fl_core.channelaxes.calibration import ChannelData, is_crops, photo_class_mapping
from fl_core.channelaxes.settings import ChannelDataSettings, ChannelOverrides, ChannelSettings
from fl_core.channelaxes.site import channel_layer
from fl_core.io.layers import ConvLayer, conv_inventory
from fl_core.io.models import LoadedModel
from fl_core.results import Result

if TYPE_CHECKING:
    import pandas as pd
    from typing_extensions import Unpack

STAGE_FACTORS = {"labels": 1.0, "statistics": 1.0, "interventions": 1.0, "pruning": 1.0, "initialization": 1.0}
"""Seconds of each stage per second of the same work in plain forward passes (:func:`forward_profile`)."""
PROBE_IMAGES = 4
"""Images of each timed forward pass (:func:`forward_profile`)."""
PROBE_REPEATS = 5
"""Timed forward passes, after an untimed one; each module's time is their median."""
PROFILE_SECONDS = 60.0
"""How long a profile serves estimates of the same model on the same device before it is timed again."""


def conv_macs(layer: ConvLayer) -> int:
    """Multiply-accumulates of one convolution per image: ``out · in/groups · kh · kw · side²`` (0 when the probe
    pass did not reach it)."""
    kh, kw = layer.kernel_size
    return layer.out_channels * layer.in_channels // layer.groups * kh * kw * (layer.output_size or 0) ** 2


@dataclass(frozen=True)
class LayerCosts:
    """What one image costs in each convolution of a network and in the modules after it up to the next convolution
    (activations, pooling, the classifier head), in :func:`~fl_core.io.layers.conv_inventory` order: MACs
    (:func:`layer_macs`) or seconds (:func:`forward_profile`)."""

    conv: tuple[float, ...]
    after: tuple[float, ...]

    @property
    def total(self) -> float:
        """A whole forward pass."""
        return sum(self.conv) + sum(self.after)

    def after_layer(self, index: int) -> float:
        """The network after convolution ``index``: the modules after it, then every later convolution's part."""
        return self.after[index] + sum(self.conv[index + 1:]) + sum(self.after[index + 1:])

    def from_layer(self, index: int) -> float:
        """The network from convolution ``index`` on."""
        return self.conv[index] + self.after_layer(index)


def layer_macs(loaded: LoadedModel) -> LayerCosts:
    """The MACs of each convolution per image (:func:`conv_macs`; nothing for the modules between them)."""
    macs = tuple(float(conv_macs(lay)) for lay in conv_inventory(loaded))
    return LayerCosts(macs, (0.0,) * len(macs))


def stage_work(loaded: LoadedModel, layer: str, n_calibration: int, n_evaluation: int, settings: ChannelSettings,
               init: bool = False, labels: bool = False, costs: LayerCosts | None = None) -> dict[str, float]:
    """Each stage of :func:`~fl_core.channelaxes.analysis.analyze_channels` in the per-image ``costs`` of the parts of
    the network it runs (module docstring; default: MACs, :func:`layer_macs`): ``labels`` (the network's decisions on
    every image, when ``labels``), ``statistics``, ``interventions``, ``pruning`` and ``initialization`` (when
    ``init``), the stages the settings run."""
    costs = costs or layer_macs(loaded)
    names = [lay.name for lay in conv_inventory(loaded)]
    found = layer in names
    start = names.index(layer) if found else 0
    channels = conv_inventory(loaded)[start].out_channels if found else 0
    total = costs.total
    work = {"labels": (n_calibration + n_evaluation) * total} if labels else {}
    work["statistics"] = n_calibration * total
    work["interventions"] = len(settings.lesion_kinds) * channels * n_evaluation * costs.after_layer(start)
    if settings.pruning is not None:
        networks = len(settings.pruning.criteria) * len(settings.pruning.fractions)
        work["pruning"] = networks * (n_evaluation * costs.from_layer(start) + 3 * settings.pruning.finetune_steps
                                      * settings.pruning.finetune_batch * total)
    if init:
        work["initialization"] = n_calibration * total
    return work


@dataclass(frozen=True)
class ForwardProfile:
    """Seconds per image of each part of a network's forward pass on a device, and when they were timed.

    Attributes:
        costs: seconds per image of each convolution and of the modules after it (:class:`LayerCosts`).
        device: where it was timed.
        threads: the CPU threads torch used.
        timed_at: ``time.monotonic()`` when it was timed.
        load: the machine's load average over the last minute then (``None`` where the system has none).
    """

    costs: LayerCosts
    device: str
    threads: int
    timed_at: float
    load: float | None

    def basis(self) -> str:
        """What an estimate from this profile assumes, in words."""
        where = f"{self.device}, {self.threads} thread{'s' * (self.threads != 1)}"
        busy = (f"with a load average of {self.load:.1f} on {os.cpu_count()} cores" if self.load is not None else
                "as busy as it was")
        return (f"{PROBE_REPEATS} forward passes of {PROBE_IMAGES} images timed on {where} {busy}; assumes the machine "
                "stays that busy")


_PROFILES: dict[tuple, ForwardProfile] = {}
"""Profiles timed within :data:`PROFILE_SECONDS`, by architecture (class, convolutions, input size), device and
threads: the same network loaded again, or a module passed again, shares one."""
_PROFILES_LOCK = threading.Lock()


def forward_profile(loaded: LoadedModel, device: DeviceLike = None) -> ForwardProfile:
    """The seconds per image of each convolution of ``loaded`` and of the modules after it on ``device``
    (module docstring): the one timed within the last :data:`PROFILE_SECONDS`, else timed now on a private copy laid
    out as the analysis runs it (:func:`~fl_core.backend.cpu_layout`)."""
    device = resolve_device(device)
    threads = torch.get_num_threads()
    key = (type(loaded._require_model()).__name__, loaded.conv_layers, loaded.input_config.input_size, str(device),
           threads)
    now = time.monotonic()
    with _PROFILES_LOCK:
        for old in [k for k, profile in _PROFILES.items() if now - profile.timed_at >= PROFILE_SECONDS]:
            del _PROFILES[old]
        recent = _PROFILES.get(key)
    if recent is not None:
        return recent
    profile = ForwardProfile(timed_costs(loaded, device), str(device), threads, time.monotonic(), _load_average())
    with _PROFILES_LOCK:
        _PROFILES[key] = profile
    return profile


@torch.inference_mode()
def timed_costs(loaded: LoadedModel, device: torch.device) -> LayerCosts:
    """:class:`LayerCosts` in seconds per image: every leaf module of a private copy timed in :data:`PROBE_REPEATS`
    passes of :data:`PROBE_IMAGES` random inputs (after an untimed one), the median of each; a module's time goes to
    the convolution it is, or else to the last convolution before it (the first, for modules before any)."""
    model = cpu_layout(loaded.copy_model().to(device).eval(), device)
    names = [lay.name for lay in conv_inventory(loaded)]
    seconds: dict[str, list[float]] = {}
    order: list[str] = []
    started: dict[str, float] = {}

    def before(name: str):
        def hook(_module, _args) -> None:
            _synchronize(device)
            started[name] = time.perf_counter()
        return hook

    def after(name: str):
        def hook(_module, _args, _output) -> None:
            _synchronize(device)
            seconds.setdefault(name, []).append(time.perf_counter() - started[name])
            if name not in order:
                order.append(name)
        return hook

    leaves = [(name, module) for name, module in model.named_modules() if not any(module.children())]
    hooks = [handle for name, module in leaves for handle in (module.register_forward_pre_hook(before(name)),
                                                              module.register_forward_hook(after(name)))]
    size = loaded.input_config.input_size
    x = torch.randn(PROBE_IMAGES, 3, size, size, device=device)
    try:
        with inference_autocast(device):
            model(x)
            seconds.clear()
            for _ in range(PROBE_REPEATS):
                model(x)
    finally:
        for handle in hooks:
            handle.remove()
    conv, rest = [0.0] * len(names), [0.0] * len(names)
    index = 0
    for name in order:
        per_pass = statistics.median(seconds[name]) * len(seconds[name]) / PROBE_REPEATS / PROBE_IMAGES
        if name in names:
            index = names.index(name)
            conv[index] += per_pass
        else:
            rest[index] += per_pass
    return LayerCosts(tuple(conv), tuple(rest))


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this system (Windows)
        return None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class ChannelsEstimate(Result):
    """How long a channel analysis will take (:func:`estimate_channels`), and what the estimate assumes.

    Attributes:
        seconds: the whole analysis.
        stages: seconds per stage (the stages of :func:`stage_work`): ``labels`` (the crops labelled by the network's
            decisions), ``statistics``, ``interventions`` (lesions and peer replacement), ``pruning``, and
            ``initialization`` when an initialization is compared.
        macs_per_second: the convolutions' multiply-accumulates per second of the timed forward passes.
        basis: what the estimate assumes: the forward passes it timed, where, and how busy the machine was then.
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
    return channels_estimate(loaded, layer, *image_counts(data), settings, init is not None, device, labels)


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


def channels_estimate(loaded: LoadedModel, layer: str, n_calibration: int, n_evaluation: int,
                      settings: ChannelSettings, init: bool, device: DeviceLike = None, labels: bool = False
                      ) -> ChannelsEstimate:
    """:func:`estimate_channels` of a resolved call: :func:`stage_work` in the seconds of :func:`forward_profile`,
    times :data:`STAGE_FACTORS`."""
    profile = forward_profile(loaded, device)
    work = stage_work(loaded, layer, n_calibration, n_evaluation, settings, init, labels, costs=profile.costs)
    stages = {stage: amount * STAGE_FACTORS[stage] for stage, amount in work.items()}
    rate = layer_macs(loaded).total / max(profile.costs.total, 1e-12)
    return ChannelsEstimate(seconds=sum(stages.values()), stages=stages, macs_per_second=rate, basis=profile.basis())

"""How long :func:`~fl_core.channelaxes.analysis.analyze_channels` will take, known before it starts.

Each stage's work is counted in multiply-accumulates (MACs) of the network's convolutions (:func:`stage_work`): the
bundled crops' labels, when they are the network's decisions, and the statistics run the whole network on the images;
every lesion kind runs one copy per channel from after the layer on (the layer's own output is computed once), on the
evaluation images; every pruned network (criterion × fraction) runs from the layer on, plus the fine-tune's forward
and backward passes; the initialization runs the whole network once per seed, twice with its BatchNorm recalibration.
Several layers analysed together share the labels, statistics and initialization passes and add up their lesions and
pruning curves (:func:`layers_work`). The seconds are that work divided by the rate this device runs the model at
(:func:`forward_rate`: one timed forward pass of a few images) and multiplied by each stage's measured cost per MAC
relative to a plain forward pass (:data:`STAGE_FACTORS`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from fl_core.arguments import ImagesLike, ModelLike, as_images, as_model, as_settings
from fl_core.backend import DeviceLike, inference_autocast, resolve_device
from fl_core.channelaxes.calibration import ChannelData, is_crops, photo_class_mapping
from fl_core.channelaxes.settings import ChannelDataSettings, ChannelOverrides, ChannelSettings
from fl_core.io.layers import ConvLayer, conv_inventory, find_layer
from fl_core.io.models import LoadedModel
from fl_core.results import Result

if TYPE_CHECKING:
    from typing_extensions import Unpack

STAGE_FACTORS = {"labels": 1.0, "statistics": 1.0, "interventions": 1.0, "pruning": 1.0, "initialization": 1.0,
                 "network pruning": 1.0}
"""Seconds per MAC of each stage relative to one plain forward pass of the same model: 1, an upper bound; measured on
2 CPU cores (``python bench/bench_channels.py --defaults SPEC``) the lesions ran at 0.4 (MobileNetV2's default layer)
to 0.8 (SqueezeNet's features.3.expand3x3) of it and the other stages at 0.6-1.0, so the estimate errs long."""
SHARED_STAGES = ("labels", "statistics", "initialization")
"""Stages one pass does for every layer analysed together (:func:`layers_work`)."""
PROBE_IMAGES = 8
"""Images of the timed forward pass (:func:`forward_rate`), after one untimed pass of the same shape."""


def conv_macs(layer: ConvLayer) -> int:
    """Multiply-accumulates of one convolution per image: ``out · in/groups · kh · kw · side²`` (0 when the probe
    pass did not reach it)."""
    kh, kw = layer.kernel_size
    return layer.out_channels * layer.in_channels // layer.groups * kh * kw * (layer.output_size or 0) ** 2


def stage_work(loaded: LoadedModel, layer: str, n_calibration: int, n_evaluation: int, settings: ChannelSettings,
               init: bool = False, labels: bool = False) -> dict[str, float]:
    """Each stage of :func:`~fl_core.channelaxes.analysis.analyze_channels` in MACs of convolutions (module
    docstring): ``labels`` (the network's decisions on every image, when ``labels``), ``statistics``,
    ``interventions``, ``pruning`` and ``initialization`` (when ``init``), the stages the settings run."""
    layers = conv_inventory(loaded)
    macs = [conv_macs(lay) for lay in layers]
    names = [lay.name for lay in layers]
    total = float(sum(macs))
    start = names.index(layer) if layer in names else 0
    channels = layers[start].out_channels if layer in names else 0
    work = {"labels": (n_calibration + n_evaluation) * total} if labels else {}
    work["statistics"] = n_calibration * total
    work["interventions"] = len(settings.lesion_kinds) * channels * n_evaluation * sum(macs[start + 1:])
    if settings.pruning is not None:
        networks = len(settings.pruning.criteria) * len(settings.pruning.fractions)
        work["pruning"] = networks * (n_evaluation * sum(macs[start:]) + 3 * settings.pruning.finetune_steps
                                      * settings.pruning.finetune_batch * total)
    if init:  # each seed's statistics pass, and its BatchNorm recalibration pass
        work["initialization"] = settings.init_seeds * (1 + settings.init_recalibrate) * n_calibration * total
    return work


def layers_work(loaded: LoadedModel, layers: Sequence[str], n_calibration: int, n_evaluation: int,
                settings: ChannelSettings, init: bool = False, labels: bool = False) -> dict[str, float]:
    """:func:`stage_work` of several layers analysed together: the passes they share (labels, statistics, the
    initialization's) once, the per-layer stages (lesions, pruning) summed."""
    parts = [stage_work(loaded, layer, n_calibration, n_evaluation, settings, init, labels) for layer in layers]
    work = {stage: (max if stage in SHARED_STAGES else sum)(part.get(stage, 0.0) for part in parts)
            for stage in parts[0]}
    pruning = settings.pruning
    if pruning is not None and pruning.flops_targets:  # the layers pruned together: whole networks, each recovered
        networks = len(pruning.criteria) * len(pruning.flops_targets)
        total = float(sum(conv_macs(lay) for lay in conv_inventory(loaded)))
        work["network pruning"] = networks * (2 * n_evaluation + 3 * pruning.recovery_steps * pruning.finetune_batch
                                              ) * total
    return work


@torch.inference_mode()
def forward_rate(loaded: LoadedModel, device: torch.device | str | None = None, images: int = PROBE_IMAGES) -> float:
    """MACs of convolutions per second of ``loaded`` on ``device``: one forward pass of ``images`` random inputs at
    the model's input size, timed after an untimed one of the same shape."""
    device = resolve_device(device)
    model = loaded.forward_copy(device)
    size = loaded.input_config.input_size
    x = torch.randn(images, 3, size, size, device=device)
    with inference_autocast(device):
        model(x)
        _synchronize(device)
        start = time.perf_counter()
        model(x)
        _synchronize(device)
    seconds = max(time.perf_counter() - start, 1e-6)
    return images * sum(conv_macs(lay) for lay in conv_inventory(loaded)) / seconds


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class ChannelsEstimate(Result):
    """The expected duration of a channel analysis.

    Attributes:
        seconds: the whole analysis.
        stages: seconds per stage (:func:`stage_work`'s).
        macs_per_second: the rate the model ran at on the device (:func:`forward_rate`).
    """

    seconds: float
    stages: dict[str, float]
    macs_per_second: float

    def text(self) -> str:
        """``about 40 s`` / ``about 3 min``."""
        return duration_text(self.seconds)


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
        device: where the analysis would run (the rate is timed there).
        **setting_overrides: fields of ``settings`` to replace, by name.
    """
    loaded = as_model(model)
    settings = as_settings(ChannelSettings, settings, setting_overrides)
    layer = find_layer(loaded, settings.layer).name
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


def channels_estimate(loaded: LoadedModel, layer: str | Sequence[str], n_calibration: int, n_evaluation: int,
                      settings: ChannelSettings, init: bool, device=None, labels: bool = False) -> ChannelsEstimate:
    """:func:`estimate_channels` of a resolved call (one layer, or several analysed together: :func:`layers_work`):
    the work at the :func:`forward_rate` of ``loaded``."""
    rate = forward_rate(loaded, device)
    work = layers_work(loaded, [layer] if isinstance(layer, str) else layer, n_calibration, n_evaluation, settings,
                       init, labels)
    stages = {stage: amount * STAGE_FACTORS[stage] / rate for stage, amount in work.items()}
    return ChannelsEstimate(seconds=sum(stages.values()), stages=stages, macs_per_second=rate)

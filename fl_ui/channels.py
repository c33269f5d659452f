"""Cached Channel Axes analyses for the page (results are shared between sessions and only read), the page's default
request (ready before a shared server listens), and how long a request will take before it starts.

A request is a :class:`~fl_ui.jobs.ChannelAxesRequest`, the key of :data:`channel_axes_result`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from fl_core.channelaxes.analysis import ChannelAxesResult, ChannelSettings, default_channel_layer
from fl_core.channelaxes.calibration import CROPS
from fl_core.channelaxes.pruning import PruningSettings
from fl_core.io.images import BUNDLED, is_bundled
from fl_core.io.layers import ConvLayer, conv_inventory
from fl_ui import jobs
from fl_ui.cache import get_model, pooled
from fl_ui.state import Selection

channel_axes_result = pooled(jobs.channel_axes_job, max_entries=16)
"""The page's channel analysis of one layer (:func:`fl_ui.jobs.channel_axes_job`), keyed by its
:class:`~fl_ui.jobs.ChannelAxesRequest` (the model, the data, the settings), computed on the engine; the last 16
requests stay at hand (a layer already analysed shows at once)."""

DEFAULT_CHANNEL_SPEC = "demo:mobilenet_v2"
"""The page's model before any is added: the real ImageNet MobileNetV2 that ships as a demo."""
PAGE_PRUNING = PruningSettings(criteria=("local", "target", "l1", "bn_gamma", "random"), finetune_steps=0)
"""The page's pruning protocol before any choice: fewer criteria and no fine-tune, so the first view comes quickly."""
PAGE_CALIBRATION, PAGE_EVALUATION = 256, 64
"""The page's image counts before any choice (the lesions run each channel's network on every evaluation image)."""
PAGE_LESIONS = ("mean", "replace")
"""The page's interventions before any choice: mean-ablation and peer replacement (zero-ablation on request)."""
FALLBACK_MACS_PER_SECOND = 2e9
"""Multiply-accumulates per second assumed before this server has timed any analysis (a 2-core CPU's order)."""


def data_source(images: str) -> str:
    """The sidebar's image choice as a channel-analysis source: bundled photos → their labelled crops."""
    return CROPS if is_bundled(images) else images


def analysable_layers(spec: str, overrides: tuple) -> list[ConvLayer]:
    """Convolutions with at least two output channels (peers need company)."""
    return [lay for lay in conv_inventory(get_model(spec, overrides)) if lay.out_channels >= 2]


def channel_models(selection: Selection) -> list[str]:
    """What the page offers: the sidebar's models, then the shipped ImageNet MobileNetV2."""
    return list(dict.fromkeys([*selection.specs, DEFAULT_CHANNEL_SPEC]))


def default_request(spec: str | None = None, overrides: tuple = (), images: str = BUNDLED,
                    device: str = "auto") -> jobs.ChannelAxesRequest:
    """The request the page makes for a model (default: :data:`DEFAULT_CHANNEL_SPEC`) before any setting is changed:
    its default layer (:func:`~fl_core.channelaxes.analysis.default_channel_layer`), the page's image counts,
    interventions and pruning protocol, and the comparison with the initialization where the model names one."""
    spec = spec or DEFAULT_CHANNEL_SPEC
    layer = default_channel_layer(analysable_layers(spec, overrides))
    return jobs.ChannelAxesRequest(spec, overrides, data_source(images), PAGE_CALIBRATION, PAGE_EVALUATION,
                          ChannelSettings(layer=layer, lesion_kinds=PAGE_LESIONS, pruning=PAGE_PRUNING),
                          bool(get_model(spec, overrides).init_spec), device)


def warm_default_result() -> None:
    """Compute the page's default request (:func:`default_request`) into the cache and time it
    (:func:`learn_durations`): a shared server (:mod:`fl_ui.serve`) does this before it listens, so the first visit
    shows the default layer at once and every later request has an estimate."""
    learn_durations(channel_axes_result(default_request()))


# ----------------------------------------------------------------------------------------------- durations


def conv_macs(layer: ConvLayer) -> int:
    """Multiply-accumulates of one convolution per image: ``out · in/groups · kh · kw · side²`` (0 when the probe
    pass did not reach it)."""
    kh, kw = layer.kernel_size
    return layer.out_channels * layer.in_channels // layer.groups * kh * kw * (layer.output_size or 0) ** 2


def stage_work(spec: str, overrides: tuple, n_calibration: int, n_evaluation: int, settings: ChannelSettings,
               compare_init: bool) -> dict[str, float]:
    """Each stage of :func:`~fl_core.channelaxes.analysis.analyze_channels` as multiply-accumulates of convolutions:
    the statistics (and the initialization's) run the whole network on the calibration images; every lesion kind and
    every pruned network (per criterion and fraction, plus the fine-tune's forward and backward passes) run the
    network from the layer on, on the evaluation images."""
    layers = conv_inventory(get_model(spec, overrides))
    macs = [conv_macs(lay) for lay in layers]
    names = [lay.name for lay in layers]
    total = float(sum(macs))
    after = float(sum(macs[names.index(settings.layer):])) if settings.layer in names else total
    channels = next((lay.out_channels for lay in layers if lay.name == settings.layer), 0)
    work = {"statistics": n_calibration * total,
            "interventions": len(settings.lesion_kinds) * channels * n_evaluation * after}
    if settings.pruning is not None:
        networks = len(settings.pruning.criteria) * len(settings.pruning.fractions)
        work["pruning"] = networks * (n_evaluation * after + 3 * settings.pruning.finetune_steps
                                      * settings.pruning.finetune_batch * total)
    if compare_init and get_model(spec, overrides).init_spec:
        work["initialization"] = n_calibration * total
    return work


@dataclass(frozen=True)
class Estimate:
    """How long a request will take: ``seconds``, and what the rate comes from (``basis``, for the page)."""

    seconds: float
    basis: str


_RATES: dict[str | None, dict[str, float]] = {}
"""Seconds per multiply-accumulate of each stage, by model spec (``None``: the latest analysis of any model)."""
_RATES_LOCK = threading.Lock()


def learn_durations(result: ChannelAxesResult, overrides: tuple = ()) -> None:
    """Remember the seconds per multiply-accumulate of each stage of a finished analysis (its ``timings``) of the
    model ``result.spec`` with these preprocessing ``overrides``."""
    work = stage_work(result.spec, overrides, result.n_calibration, result.n_evaluation, result.settings,
                      result.init_spec is not None)
    rates = {stage: seconds / work[stage] for stage, seconds in result.timings.items() if work.get(stage)}
    with _RATES_LOCK:
        _RATES[result.spec] = _RATES[None] = rates


def estimated_duration(request: jobs.ChannelAxesRequest) -> Estimate:
    """The duration of a request: its :func:`stage_work` times the rates this server measured for the same model,
    else for the latest model analysed, else :data:`FALLBACK_MACS_PER_SECOND`. Folders are decoded as they are
    read, which this leaves out."""
    with _RATES_LOCK:
        own, latest = _RATES.get(request.spec), _RATES.get(None)
    work = stage_work(request.spec, request.overrides, request.n_calibration, request.n_evaluation, request.settings,
                      request.compare_init)
    rates = own or latest or {}
    seconds = sum(amount * rates.get(stage, 1 / FALLBACK_MACS_PER_SECOND) for stage, amount in work.items())
    basis = ("timed on this model here" if own else "timed on another model here" if latest else
             "nothing timed on this server yet: a rough guess")
    return Estimate(seconds, basis)

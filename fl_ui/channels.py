"""Cached Channel Axes analyses for the page (results are shared between sessions and only read), the page's default
request (ready before a shared server listens), and how long a request will take before it starts.

A request is a :class:`~fl_ui.jobs.ChannelAxesRequest`, the key of :data:`channel_axes_result`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from fl_core.channelaxes.analysis import ChannelAxesResult
from fl_core.channelaxes.estimate import stage_work
from fl_core.channelaxes.settings import CROPS, ChannelDataSettings, ChannelSettings, PruningSettings
from fl_core.channelaxes.site import channel_layer, default_pruned_layers
from fl_core.io.images import BUNDLED
from fl_core.io.layers import ConvLayer, conv_inventory
from fl_core.io.sources import is_bundled
from fl_ui import jobs
from fl_ui.cache import get_model
from fl_ui.memo import pooled
from fl_ui.state import Selection

DEFAULT_CALIBRATION, DEFAULT_EVALUATION = ChannelDataSettings.n_calibration, ChannelDataSettings.n_evaluation
"""The page's first view asks for the library's default image counts."""

channel_axes_result = pooled(jobs.channel_axes_job, max_entries=16)
"""The page's channel analysis of one layer (:func:`fl_ui.jobs.channel_axes_job`), keyed by its
:class:`~fl_ui.jobs.ChannelAxesRequest` (the model, the data, the settings), computed on the engine; the last 16
requests stay at hand (a layer already analysed shows at once)."""

network_pruning_result = pooled(jobs.network_pruning_job, max_entries=8)
"""Several layers of one model pruned together to FLOPs targets (:func:`fl_ui.jobs.network_pruning_job`), keyed by
its :class:`~fl_ui.jobs.NetworkPruningRequest`, computed on the engine; the last 8 requests stay at hand."""

DEFAULT_CHANNEL_SPEC = "demo:mobilenet_v2"
"""The page's model before any is added: the real ImageNet MobileNetV2 that ships as a demo."""
NETWORK_PRUNING = PruningSettings(flops_targets=(0.1, 0.2, 0.3), recovery_steps=5)
"""The page's several-layer protocol once switched on: the paper's FLOPs targets up to 30 %, a short recovery (about
three minutes on the demo MobileNetV2's 16 expansions, 2 busy CPU cores)."""
FALLBACK_MACS_PER_SECOND = 2e9
"""Multiply-accumulates per second assumed before this server has timed any analysis (a 2-core CPU's order)."""


def data_source(images: str) -> str:
    """The sidebar's image choice as a channel-analysis source: bundled photos → their labelled crops."""
    return CROPS if is_bundled(images) else images


def analysable_layers(spec: str, overrides: tuple) -> list[ConvLayer]:
    """Convolutions with at least two output channels (peers need company)."""
    return [lay for lay in conv_inventory(get_model(spec, overrides)) if lay.out_channels >= 2]


def pruned_layers_default(spec: str, overrides: tuple) -> list[str]:
    """The layers the page prunes together until the user picks others
    (:func:`~fl_core.channelaxes.site.default_pruned_layers`)."""
    return default_pruned_layers(conv_inventory(get_model(spec, overrides)))


def network_request(analysis: jobs.ChannelAxesRequest, layers: tuple[str, ...], pruning: PruningSettings
                    ) -> jobs.NetworkPruningRequest:
    """The page's analysis request's model, images, estimator choices and device with ``layers`` pruned together as
    ``pruning`` says: only what the pruning reads, so a change of the analysed layer, interventions or initialization
    keeps the result."""
    settings = ChannelSettings(axes=analysis.settings.axes, pruning=pruning, batch_size=analysis.settings.batch_size,
                               memory_mb=analysis.settings.memory_mb)
    return jobs.NetworkPruningRequest(analysis.spec, analysis.overrides, analysis.source, analysis.n_calibration,
                                      analysis.n_evaluation, layers, settings, analysis.device)


def channel_models(selection: Selection) -> list[str]:
    """What the page offers: the sidebar's models, then the shipped ImageNet MobileNetV2."""
    return list(dict.fromkeys([*selection.specs, DEFAULT_CHANNEL_SPEC]))


def default_request(spec: str | None = None, overrides: tuple = (), images: str = BUNDLED,
                    device: str = "auto") -> jobs.ChannelAxesRequest:
    """The request the page makes for a model (default: :data:`DEFAULT_CHANNEL_SPEC`) before any setting is changed:
    the library's default layer (:func:`~fl_core.channelaxes.site.channel_layer`), its default image
    counts, interventions and pruning protocol, and the comparison with the initialization where the model names
    one."""
    spec = spec or DEFAULT_CHANNEL_SPEC
    layer = channel_layer(get_model(spec, overrides)).name
    return jobs.ChannelAxesRequest(spec, overrides, data_source(images), DEFAULT_CALIBRATION, DEFAULT_EVALUATION,
                                   ChannelSettings(layer=layer), bool(get_model(spec, overrides).init_spec), device)


def warm_default_result() -> None:
    """Compute the page's default request (:func:`default_request`) into the cache and time it
    (:func:`learn_durations`): a shared server (:mod:`fl_ui.serve`) does this before it listens, so the first visit
    shows the default layer at once and every later request has an estimate."""
    learn_durations(channel_axes_result(default_request()))


# ----------------------------------------------------------------------------------------------- durations


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
    work = stage_work(get_model(result.spec, overrides), result.layer, result.n_calibration, result.n_evaluation,
                      result.settings, result.init_spec is not None)
    rates = {stage: seconds / work[stage] for stage, seconds in result.timings.items() if work.get(stage)}
    with _RATES_LOCK:
        _RATES[result.spec] = _RATES[None] = rates


def estimated_duration(request: jobs.ChannelAxesRequest) -> Estimate:
    """The duration of a request: its :func:`~fl_core.channelaxes.estimate.stage_work` times the rates this server
    measured for the same model, else for the latest model analysed, else :data:`FALLBACK_MACS_PER_SECOND`. Folders
    are decoded as they are read, which this leaves out."""
    with _RATES_LOCK:
        own, latest = _RATES.get(request.spec), _RATES.get(None)
    loaded = get_model(request.spec, request.overrides)
    work = stage_work(loaded, request.settings.layer, request.n_calibration, request.n_evaluation, request.settings,
                      request.compare_init and bool(loaded.init_spec))
    rates = own or latest or {}
    seconds = sum(amount * rates.get(stage, 1 / FALLBACK_MACS_PER_SECOND) for stage, amount in work.items())
    basis = ("at the speed of this server's last analysis of this model, assuming the server is as busy as then"
             if own else "at the speed of this server's last analysis, of another model, assuming the server is as "
             "busy as then" if latest else "nothing timed on this server yet: a rough guess")
    return Estimate(seconds, basis)

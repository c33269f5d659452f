"""Cached Channel Axes analyses for the page (results are shared between sessions and only read)."""

from __future__ import annotations

from fl_core.backend import Progress
from fl_core.calibration import CROPS, channel_data
from fl_core.channels import ChannelAxesResult, ChannelSettings, analyze_channels
from fl_core.layers import ConvLayer, conv_inventory
from fl_core.pruning import PruningSettings
from fl_ui.cache import get_model, memoize


@memoize(max_entries=8)
def channel_axes_result(spec: str, overrides: tuple, source: str, layer: str, n_calibration: int,
                        n_evaluation: int, lesions: tuple[str, ...], criteria: tuple[str, ...],
                        fractions: tuple[float, ...], finetune_steps: int, compare_init: bool, seed: int,
                        device: str, progress: Progress | None = None) -> ChannelAxesResult:
    """:func:`fl_core.channels.analyze_channels` of one layer, keyed by every choice of the page."""
    loaded = get_model(spec, overrides)
    init = get_model(loaded.init_spec) if compare_init and loaded.init_spec else None
    data = channel_data(source, loaded, n_calibration, n_evaluation, seed=seed)
    pruning = PruningSettings(criteria=criteria, fractions=fractions, finetune_steps=finetune_steps,
                              seed=seed) if criteria else None
    return analyze_channels(loaded, data, layer, settings=ChannelSettings(lesion_kinds=lesions), pruning=pruning,
                            init=init, device=device, progress=progress)


def data_source(images: str) -> str:
    """The sidebar's image choice as a channel-analysis source: bundled photos → their labelled crops."""
    return CROPS if images in ("", "bundled") else images


def default_layer(layers: list[ConvLayer]) -> str:
    """A layer that shows something quickly: the last non-depthwise conv with at most 256 channels."""
    fitting = [lay for lay in layers if lay.kind != "depthwise" and lay.out_channels <= 256]
    return (fitting or layers)[-1].name


def analysable_layers(spec: str, overrides: tuple) -> list[ConvLayer]:
    """Convolutions with at least two output channels (peers need company)."""
    return [lay for lay in conv_inventory(get_model(spec, overrides)) if lay.out_channels >= 2]

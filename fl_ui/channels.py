"""Cached Channel Axes analyses for the page (results are shared between sessions and only read)."""

from __future__ import annotations

from fl_core.channelaxes.calibration import CROPS
from fl_core.io.images import is_bundled
from fl_core.io.layers import ConvLayer, conv_inventory
from fl_ui import jobs
from fl_ui.cache import get_model, pooled

channel_axes_result = pooled(jobs.channel_axes_job, max_entries=8)
"""The page's channel analysis of one layer (:func:`fl_ui.jobs.channel_axes_job`), keyed by the model, the
data and the :class:`~fl_core.channelaxes.analysis.ChannelSettings`, computed in a worker process."""


def data_source(images: str) -> str:
    """The sidebar's image choice as a channel-analysis source: bundled photos → their labelled crops."""
    return CROPS if is_bundled(images) else images


def analysable_layers(spec: str, overrides: tuple) -> list[ConvLayer]:
    """Convolutions with at least two output channels (peers need company)."""
    return [lay for lay in conv_inventory(get_model(spec, overrides)) if lay.out_channels >= 2]

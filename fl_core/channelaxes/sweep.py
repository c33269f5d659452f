"""Channel Axes over several layers of one network in one call, trained beside its initialization (several seeds):
how ρ and the ARI change with depth, with their intervals, and the paper's claims over all the layers.

:func:`sweep_channels` checks every layer before any image is read, then shares what can be shared
(:func:`~fl_core.channelaxes.analysis.analyze_layers`): one statistics pass of the trained network for all layers,
one per initialization seed; the lesions and pruning curves are per layer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch

from fl_core.arguments import ImagesLike, ModelLike, as_model, as_settings
from fl_core.channelaxes.analysis import ChannelAxesResult, LayerAxes, analyze_layers, layers_axes, resolve_layers
from fl_core.channelaxes.calibration import ChannelData, as_channel_data
from fl_core.channelaxes.claims import ClaimsTable, channel_claims
from fl_core.channelaxes.comparison import importance_scores
from fl_core.channelaxes.estimate import channels_estimate
from fl_core.channelaxes.pruning import NetworkPruningResult, prune_network
from fl_core.channelaxes.settings import ChannelOverrides, ChannelSettings
from fl_core.compute.device import DeviceLike, analysis_threads, cpu_layout, cpu_threads, resolve_device
from fl_core.compute.progress import Progress, ProgressLike, progress_callback, report, silent, sub_progress
from fl_core.errors import AnalysisError, ArgumentError
from fl_core.io.models import LoadedModel
from fl_core.results import Result, jsonable, with_model_columns

if TYPE_CHECKING:
    from typing_extensions import Unpack


@dataclass(frozen=True)
class ChannelSweepResult(Result):
    """The channel axes of several layers of one network (:func:`sweep_channels`).

    Attributes:
        spec, label: the model.
        layers: one :class:`~fl_core.channelaxes.analysis.ChannelAxesResult` per layer, in the order asked.
        settings: the estimator choices (shared by the layers).
        timings: seconds per stage, all layers together.
        network_pruning: the layers pruned together to the FLOPs targets of ``settings.pruning.flops_targets``
            (:func:`~fl_core.channelaxes.pruning.prune_network`; ``None``: not asked).
    """

    spec: str
    label: str
    layers: tuple[ChannelAxesResult, ...]
    settings: ChannelSettings
    timings: dict[str, float] = field(default_factory=dict)
    network_pruning: NetworkPruningResult | None = None

    _private_fields = ("layers", "network_pruning")

    _figures: ClassVar[dict[str, str]] = {
        "depth": "fl_core.channelaxes.plots:depth_figure",
        "claims": "fl_core.channelaxes.plots:claims_figure",
        "network_pruning": "fl_core.channelaxes.plots:network_pruning_figure",
    }

    def figure_inputs(self, kind: str) -> tuple:
        if kind == "network_pruning":
            if self.network_pruning is None:
                raise AnalysisError("No layers were pruned together: give the pruning settings flops_targets.")
            return (self.network_pruning,)
        return (self.claims(),) if kind == "claims" else (self,)

    def claims(self) -> ClaimsTable:
        """The paper's five claims measured over the layers (:func:`~fl_core.channelaxes.claims.channel_claims`),
        claim 4 on the layers pruned together when they were."""
        return channel_claims(self.layers, self.network_pruning)

    def depth_frame(self) -> pd.DataFrame:
        """One row per layer: its depth, channels, ρ and ARI with their intervals, trained and at initialization
        (over its seeds), the share of channels with measurable task information, and the shared mode."""
        rows = []
        for result in self.layers:
            init = result.init_summary
            significance = result.axes.significance
            init_significance = None if result.init_axes is None else result.init_axes.significance
            mode = None if result.init_axes is None else result.init_axes.shared_mode
            rows.append({
                "layer": result.layer, "depth": result.depth, "channels": result.site.n_channels,
                "spearman": result.axes.spearman, "spearman_low": _low(result.axes.spearman_ci),
                "spearman_high": _high(result.axes.spearman_ci), "ari": result.axes.ari,
                "ari_low": _low(result.axes.ari_ci), "ari_high": _high(result.axes.ari_ci),
                "init_spearman": np.nan if init is None else init.spearman,
                "init_spearman_low": np.nan if init is None else _low(init.spearman_ci),
                "init_spearman_high": np.nan if init is None else _high(init.spearman_ci),
                "init_ari": np.nan if result.init_axes is None else float(np.nanmean(
                    [s.ari for s in result.init_seeds_axes or (result.init_axes,)])),
                "init_ari_low": np.nan if init is None else _low(init.ari_ci),
                "init_ari_high": np.nan if init is None else _high(init.ari_ci),
                "significant_share": np.nan if significance is None else significance.significant_share,
                "init_significant_share": np.nan if init_significance is None
                else init_significance.significant_share,
                "init_shared_mode_share": np.nan if mode is None else mode.variance_share,
                "init_shared_mode_margin": np.nan if mode is None else abs(mode.margin_correlation),
            })
        return pd.DataFrame(rows)

    def to_frame(self) -> pd.DataFrame:
        """:meth:`depth_frame` with the model's label and spec first."""
        return with_model_columns(self.depth_frame(), self.label, self.spec)

    def to_dict(self) -> dict:
        """JSON-safe: ``layers`` (each layer's :meth:`ChannelAxesResult.to_dict`, the one-layer keys of docs/cli.md),
        ``depth`` (:meth:`depth_frame` records), ``claims`` (the paper's claims over all the layers) and
        ``network_pruning`` (the layers pruned together, or ``None``)."""
        out = super().to_dict()
        out.update({"layers": [layer.to_dict() for layer in self.layers],
                    "depth": self.depth_frame().to_dict(orient="records"), "claims": self.claims().rows(),
                    "network_pruning": None if self.network_pruning is None else self.network_pruning.to_dict()})
        return jsonable(out)


def _low(interval: list[float] | None) -> float:
    return interval[0] if interval else np.nan


def _high(interval: list[float] | None) -> float:
    return interval[1] if interval else np.nan


def sweep_channels(model: ModelLike, data: ImagesLike | ChannelData | None = None,
                   settings: ChannelSettings | None = None, *, layers: Sequence[str] | str = "all",
                   init: ModelLike | None = None, device: DeviceLike = None, progress: ProgressLike = None,
                   **setting_overrides: Unpack[ChannelOverrides]) -> ChannelSweepResult:
    """:func:`~fl_core.channelaxes.analysis.analyze_channels` of several layers in one call (module docstring).

    Args:
        model: the model (a spec string, :class:`~fl_core.io.models.LoadedModel` or ``nn.Module``).
        data: as :func:`~fl_core.channelaxes.analysis.analyze_channels` takes it.
        settings: the estimator choices, interventions and pruning protocol of every layer (its ``layer`` is
            ignored: ``layers`` names them); ``setting_overrides`` replace fields (``init_seeds=3``, ...).
        layers: convolution names, or ``"all"``: every convolution with at least two output channels. Each is
            checked before any image is read.
        init: the same architecture at initialization (a registry architecture at random init is drawn from
            ``init_seed`` on, ``init_seeds`` times).
        device: where to run.
        progress: ``progress(fraction, message)``; its first message is the expected duration.
        **setting_overrides: fields of ``settings`` to replace, by name.
    """
    settings = as_settings(ChannelSettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    with cpu_threads(analysis_threads(device)):  # all cores when idle; fewer beside other work
        loaded = as_model(model, progress=progress)
        chosen = resolve_layers(loaded, layers)
        data = as_channel_data(data, loaded, seed=settings.axes.seed)
        init = None if init is None else as_model(init, "init", progress)
        if progress is not silent:
            estimate = channels_estimate(loaded, [lay.name for lay in chosen], len(data.calibration),
                                         len(data.evaluation), settings, init is not None, device)
            report(progress, 0.0, f"{len(chosen)} layers: {estimate.text()} expected")
        together = settings.pruning is not None and bool(settings.pruning.flops_targets)
        results = analyze_layers(loaded, data, settings, chosen, init, device,
                                 sub_progress(progress, 0, 0.7 if together else 1))
        timings: dict[str, float] = {}
        for result in results:
            for stage, seconds in result.timings.items():
                shared = stage in ("statistics", "initialization")  # one pass for every layer
                timings[stage] = seconds if shared else timings.get(stage, 0) + seconds
        network = None
        if together:
            start = time.perf_counter()
            network = prune_layers_together(loaded, data, settings, results, device, sub_progress(progress, 0.7, 1))
            timings["network pruning"] = time.perf_counter() - start
        return ChannelSweepResult(spec=loaded.spec, label=loaded.label, layers=tuple(results), settings=settings,
                                  timings=timings, network_pruning=network)


def prune_layers(model: ModelLike, data: ImagesLike | ChannelData | None = None,
                 settings: ChannelSettings | None = None, *, layers: Sequence[str] | str,
                 device: DeviceLike = None, progress: ProgressLike = None,
                 **setting_overrides: Unpack[ChannelOverrides]) -> NetworkPruningResult:
    """``layers`` pruned together to ``settings.pruning.flops_targets`` (:func:`prune_layers_together`) without the
    rest of :func:`sweep_channels`: one statistics pass gives every layer's two axes (no lesions, one-layer pruning
    curves or intervals), then each criterion prunes the layers together and the fixed recovery fine-tune runs.
    Arguments as :func:`sweep_channels` takes them; ``settings.pruning`` must name FLOPs targets."""
    settings = as_settings(ChannelSettings, settings, setting_overrides)
    if settings.pruning is None or not settings.pruning.flops_targets:
        raise ArgumentError("Give the pruning settings one or more flops_targets to prune the layers together.")
    device, progress = resolve_device(device), progress_callback(progress)
    with cpu_threads(analysis_threads(device)):  # all cores when idle; fewer beside other work
        loaded = as_model(model, progress=progress)
        names = [lay.name for lay in resolve_layers(loaded, layers)]
        data = as_channel_data(data, loaded, seed=settings.axes.seed)
        report(progress, 0.0, f"statistics of {len(names)} layers on {len(data.calibration)} calibration images")
        template = cpu_layout(loaded.copy_model().to(device).eval(), device)
        axes = layers_axes(template, names, data, settings, device, sub_progress(progress, 0, 0.3))
        del template
        return prune_layers_together(loaded, data, settings, axes, device, sub_progress(progress, 0.3, 1))


def prune_layers_together(loaded: LoadedModel, data: ChannelData, settings: ChannelSettings,
                          results: Sequence[ChannelAxesResult | LayerAxes], device: torch.device,
                          progress: Progress | None) -> NetworkPruningResult:
    """The analysed layers (each one's ``site`` and per-channel ``table``) pruned together to
    ``settings.pruning.flops_targets``, each ranked by its own two-axis scores
    (:func:`~fl_core.channelaxes.analysis.importance_scores`) and the baselines, its removed channels' calibration
    means folded into its direct readers."""
    model = cpu_layout(loaded.copy_model().to(device).eval(), device)
    return prune_network(
        model, [r.site.layer for r in results], data.calibration, data.evaluation,
        {r.site.layer: importance_scores(r.table) for r in results}, settings.pruning, device=device,
        means={r.site.layer: r.table["activation_mean"].to_numpy() for r in results},
        readers={r.site.layer: r.site.consumers if r.site.foldable else () for r in results},
        batch_size=settings.batch_size, memory_bytes=settings.memory_bytes, resamples=settings.axes.bootstrap,
        seed=settings.axes.seed, progress=progress)

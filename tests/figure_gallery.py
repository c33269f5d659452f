"""Every figure of every family built once on small real results (the demo models, two bundled photos, the shipped
Training Lab runs, the shipped depthwise bank, a planted channel-axes net), so tests can check properties all figures
must have: readable log ticks, legends clear of the plot, titles that fit."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import plotly.graph_objects as go

SMALL = dict(seeds=3)


@functools.cache
def small_energy():
    """Energy profiles of the tiny demo and its initialization on two bundled photos."""
    from fl_core.firstlayer.energy import EnergySettings, analyze_energy
    from fl_core.io.images import bundled_images

    return analyze_energy(["demo:tiny_vgg", "demo:tiny_vgg_init"], bundled_images(["chelsea", "coffee"]),
                          EnergySettings(**SMALL))


@functools.cache
def first_layer_figures() -> dict[str, go.Figure]:
    from fl_core.firstlayer import plots
    from fl_core.firstlayer.whitening import WhiteningSettings, activation_maps, analyze_whitening
    from fl_core.io.images import bundled_images
    from fl_core.io.models import load_model

    models = [load_model("demo:tiny_vgg"), load_model("demo:tiny_vgg_init")]
    photos = bundled_images(["chelsea", "coffee"])
    energy = small_energy()
    whitening = analyze_whitening(models, photos, WhiteningSettings(**SMALL))
    maps = activation_maps(models[0], photos.image(0), photos.names[0])  # coffee: landscape
    return {"profile": plots.profile_figure(energy), "profile_linear": plots.profile_figure(energy, log_y=False),
            "spectrum": plots.spectrum_figure(energy), "correlation": plots.correlation_figure(energy),
            "components": plots.components_figure(energy), "filters": plots.filters_figure(energy.models[0]),
            "autocorrelation": plots.autocorrelation_figure(whitening),
            "activation_maps": plots.activation_maps_figure(maps.image, maps.maps, "maps")}


@functools.cache
def report_figures() -> dict[str, go.Figure]:
    from fl_core.io.models import load_model
    from fl_core.report import plots
    from fl_core.report.build import ReportSettings, build_report

    report = build_report([load_model("demo:tiny_vgg_init"), load_model("demo:tiny_vgg")],
                          settings=ReportSettings(max_images=2, **SMALL))
    return {"weight_norms": plots.weight_norms_figure(report.weights),
            "trajectory_profiles": plots.trajectory_profiles_figure(report.trajectory),
            "trajectory_summary": plots.trajectory_summary_figure(report.trajectory)}


@functools.cache
def lab_figures() -> dict[str, go.Figure]:
    from fl_core.lab import plots
    from fl_core.lab.claims import run_trajectory
    from fl_core.lab.runs import SHIPPED_RUNS_DIR, list_runs, load_run

    runs = [load_run(folder) for folder in list_runs(SHIPPED_RUNS_DIR)]
    trajectory = run_trajectory(runs[0])
    return {"trajectory": plots.trajectory_figure(trajectory),
            "fit_over_steps": plots.fit_over_steps_figure(trajectory),
            "training_curves": plots.training_curves_figure(runs[:2])}


@functools.cache
def channel_axes_figures() -> dict[str, go.Figure]:
    from fl_core.channelaxes import plots
    from fl_core.channelaxes.analysis import ChannelSettings, analyze_channels
    from fl_core.channelaxes.pruning import PruningSettings

    from .channelaxes.planted_nets import duplicate_world

    loaded, data = duplicate_world(n_calibration=200, n_evaluation=100)
    pruning = PruningSettings(criteria=("local", "l1"), fractions=(0.2, 0.4), finetune_steps=0)
    settings = replace(ChannelSettings(cluster_seeds=2, cluster_k=2), layer="conv", pruning=pruning)
    result = analyze_channels(loaded, data, settings, device="cpu")
    return {"axes_scatter": plots.axes_scatter_figure(result), "lesion_bars": plots.lesion_bars_figure(result),
            "pruning_curves": plots.pruning_curves_figure(result.pruning), "filter": plots.filter_figure(result, 0)}


@functools.cache
def master_key_figures() -> dict[str, go.Figure]:
    from fl_core.masterkeys import plots
    from fl_core.masterkeys.clustering import MasterKeySettings, analyze_master_keys
    from fl_core.masterkeys.fitting import FIT_METHODS, fit_published_filters
    from fl_core.masterkeys.scalespace import load_published_filters

    result = analyze_master_keys("demo:ppocrv6_det_small_dw7", settings=MasterKeySettings(restarts=2, sweep=(2, 3, 4)))
    published = load_published_filters()
    fits = {method: fit_published_filters(method) for method in FIT_METHODS[:3]}
    fit = fits["B"]
    assignment = result.published_assignment
    return {"key_filters": plots.key_filters_figure(published), "centroids": plots.centroids_vs_keys_figure(result),
            "stage_counts": plots.stage_counts_figure(assignment),
            "layer_counts": plots.layer_counts_figure(assignment),
            "comparison": plots.assignment_comparison_figure({"bank a": assignment, "bank b": assignment}),
            "composition": plots.composition_figure(result), "sweep": plots.sweep_figure(result.sweep, 3),
            "members": plots.members_figure(result), "models": plots.models_figure(fit.models(7), fit),
            "sigma_by_method": plots.sigma_by_method_figure(fits),
            "model_vs_learned": plots.model_vs_learned_figure(published[0], published[1], "one key"),
            "cross_section": plots.cross_section_figure(published[0], published[1])}


def gallery() -> dict[str, go.Figure]:
    """Every family's figures by ``family.name``."""
    families = {"firstlayer": first_layer_figures, "report": report_figures, "lab": lab_figures,
                "channelaxes": channel_axes_figures, "masterkeys": master_key_figures}
    return {f"{family}.{name}": fig for family, build in families.items() for name, fig in build().items()}


def axes(fig: go.Figure) -> dict[str, object]:
    """The figure's x and y axes by layout name (``xaxis``, ``yaxis2``, …)."""
    layout = fig.layout
    return {name: layout[name] for name in layout if name.startswith(("xaxis", "yaxis"))}


def axis_values(fig: go.Figure, name: str) -> np.ndarray:
    """The finite values the traces drawn on the axis ``name`` (``xaxis``, ``yaxis2``, …) put on it."""
    letter, number = name[0], name[5:]
    values = [finite(getattr(trace, letter)) for trace in fig.data
              if (getattr(trace, f"{letter}axis", None) or letter) == letter + number and getattr(trace, letter, None)
              is not None]
    return np.concatenate(values) if values else np.empty(0)


def finite(values) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    return array[np.isfinite(array)]

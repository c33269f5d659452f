"""FilterLens core library: what convolutional filters learn and why.

No Streamlit import anywhere in this package (a test enforces it): notebooks, the CLI (``python -m fl_core``) and
the dashboard pages all call the same functions. The public entry points are listed in ``__all__`` and importable from
here (``from fl_core import analyze_energy, load_model``); each is imported on first use, so ``import fl_core`` stays
light (the CLI's ``--help`` does not wait for torch), and the ``TYPE_CHECKING`` imports show type checkers the same
names. Each analysis family has one shape (:mod:`fl_core.arguments`)::

    analyze_<family>(models_or_model, data=None, settings=None, *, device=None, progress=None,
                     **setting_overrides) -> <Family>Result

and every result has ``to_dict()``, ``to_frame()``, ``plot(kind=None, **kw)`` (a plotly figure) and ``save(path)``
(``load_result(path)`` or ``<Result>.load(path)`` reads it back).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

PUBLIC_API: dict[str, tuple[str, ...]] = {
    "fl_core.errors": ("FilterLensError", "ModelSpecError", "CheckpointError", "WeightsUnavailableError", "DataError",
                       "AnalysisError", "ArgumentError"),
    "fl_core.io.models": ("load_model", "LoadedModel"),
    "fl_core.io.preprocessing": ("InputConfig",),
    "fl_core.io.checkpoints": ("load_state_dict",),
    "fl_core.io.images": ("open_images", "ImageSet", "BUNDLED"),
    "fl_core.io.layers": ("conv_inventory",),
    "fl_core.io.inspect": ("inspect_models", "InspectResult"),
    "fl_core.io.resultfiles": ("load_result",),
    "fl_core.firstlayer.patches": ("patch_pca", "PatchStatistics", "PatchPCA"),
    "fl_core.firstlayer.energy": ("analyze_energy", "EnergySettings", "EnergyResult"),
    "fl_core.firstlayer.whitening": ("analyze_whitening", "WhiteningSettings", "WhiteningResult"),
    "fl_core.channelaxes.calibration": ("channel_data", "ChannelData"),
    "fl_core.channelaxes.analysis": ("analyze_channels", "ChannelSettings", "ChannelAxesResult"),
    "fl_core.channelaxes.estimate": ("estimate_channels",),
    "fl_core.channelaxes.layerstats": ("AxisSettings",),
    "fl_core.channelaxes.pruning": ("PruningSettings",),
    "fl_core.masterkeys.depthwise": ("depthwise_bank",),
    "fl_core.masterkeys.clustering": ("analyze_master_keys", "MasterKeySettings", "MasterKeyResult"),
    "fl_core.masterkeys.assignment": ("analyze_scale_space",),
    "fl_core.masterkeys.fitting": ("fit_published_filters", "ScaleSpaceSettings", "ScaleSpaceResult"),
    "fl_core.masterkeys.swap": ("swap_filters",),
    "fl_core.masterkeys.rescore": ("rescore", "RescoreSettings", "RescoreResult"),
    "fl_core.masterkeys.recovery": ("RecoverySettings",),
    "fl_core.masterkeys.layersweep": ("sweep_layers", "LayerSweepSettings", "LayerSweepResult"),
    "fl_core.lab.train": ("TrainSettings",),
    "fl_core.lab.runs": ("train_run", "load_run", "RunSettings", "Run"),
    "fl_core.report.build": ("build_report", "ReportSettings", "Report"),
    "fl_core.report.html": ("report_html",),
}
"""Module → the public names it defines (configs as data: ``__all__`` and the lazy imports derive from it)."""

if TYPE_CHECKING:  # what type checkers and editors see; tests/test_core.py keeps it equal to PUBLIC_API
    from fl_core.channelaxes.analysis import ChannelAxesResult, ChannelSettings, analyze_channels
    from fl_core.channelaxes.calibration import ChannelData, channel_data
    from fl_core.channelaxes.estimate import estimate_channels
    from fl_core.channelaxes.layerstats import AxisSettings
    from fl_core.channelaxes.pruning import PruningSettings
    from fl_core.errors import (
        AnalysisError,
        ArgumentError,
        CheckpointError,
        DataError,
        FilterLensError,
        ModelSpecError,
        WeightsUnavailableError,
    )
    from fl_core.firstlayer.energy import EnergyResult, EnergySettings, analyze_energy
    from fl_core.firstlayer.patches import PatchPCA, PatchStatistics, patch_pca
    from fl_core.firstlayer.whitening import WhiteningResult, WhiteningSettings, analyze_whitening
    from fl_core.io.checkpoints import load_state_dict
    from fl_core.io.images import BUNDLED, ImageSet, open_images
    from fl_core.io.inspect import InspectResult, inspect_models
    from fl_core.io.layers import conv_inventory
    from fl_core.io.models import LoadedModel, load_model
    from fl_core.io.preprocessing import InputConfig
    from fl_core.io.resultfiles import load_result
    from fl_core.lab.runs import Run, RunSettings, load_run, train_run
    from fl_core.lab.train import TrainSettings
    from fl_core.masterkeys.assignment import analyze_scale_space
    from fl_core.masterkeys.clustering import MasterKeyResult, MasterKeySettings, analyze_master_keys
    from fl_core.masterkeys.depthwise import depthwise_bank
    from fl_core.masterkeys.fitting import ScaleSpaceResult, ScaleSpaceSettings, fit_published_filters
    from fl_core.masterkeys.layersweep import LayerSweepResult, LayerSweepSettings, sweep_layers
    from fl_core.masterkeys.recovery import RecoverySettings
    from fl_core.masterkeys.rescore import RescoreResult, RescoreSettings, rescore
    from fl_core.masterkeys.swap import swap_filters
    from fl_core.report.build import Report, ReportSettings, build_report
    from fl_core.report.html import report_html

_HOME = {name: module for module, names in PUBLIC_API.items() for name in names}
__all__ = ["__version__", *_HOME]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    if name not in _HOME:
        raise AttributeError(f"module 'fl_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))

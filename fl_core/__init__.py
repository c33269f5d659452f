"""FilterLens core library: what convolutional filters learn and why.

No Streamlit import anywhere in this package (a test enforces it): notebooks, the CLI (``python -m fl_core``) and
the dashboard pages all call the same functions. The public entry points are listed in ``__all__`` and importable from
here (``from fl_core import analyze_energy, load_model``); each is imported on first use, so ``import fl_core`` stays
light (the CLI's ``--help`` does not wait for torch). Each analysis family has one shape:
``analyze_<family>(source, data, settings, *, device=None, progress=None) -> Result``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

PUBLIC_API: dict[str, tuple[str, ...]] = {
    "fl_core.errors": ("FilterLensError", "ModelSpecError", "CheckpointError", "WeightsUnavailableError", "DataError",
                       "AnalysisError"),
    "fl_core.io.models": ("load_model", "LoadedModel"),
    "fl_core.io.preprocessing": ("InputConfig",),
    "fl_core.io.checkpoints": ("load_state_dict",),
    "fl_core.io.images": ("open_images", "ImageSet", "BUNDLED"),
    "fl_core.io.layers": ("conv_inventory",),
    "fl_core.io.inspect": ("inspect_models", "InspectResult"),
    "fl_core.firstlayer.patches": ("patch_pca", "PatchStatistics", "PatchPCA"),
    "fl_core.firstlayer.energy": ("analyze_energy", "EnergySettings", "EnergyResult"),
    "fl_core.firstlayer.whitening": ("analyze_whitening", "WhiteningSettings", "WhiteningResult"),
    "fl_core.channelaxes.calibration": ("channel_data",),
    "fl_core.channelaxes.analysis": ("analyze_channels", "ChannelSettings", "ChannelAxesResult"),
    "fl_core.channelaxes.pruning": ("PruningSettings",),
    "fl_core.masterkeys.depthwise": ("depthwise_bank",),
    "fl_core.masterkeys.clustering": ("analyze_master_keys", "MasterKeySettings", "MasterKeyResult"),
    "fl_core.masterkeys.fitting": ("fit_published_filters", "ScaleSpaceResult"),
    "fl_core.masterkeys.swap": ("swap_filters",),
    "fl_core.masterkeys.rescore": ("rescore", "RescoreResult"),
    "fl_core.masterkeys.recovery": ("RecoverySettings",),
    "fl_core.masterkeys.layersweep": ("sweep_layers", "LayerSweepResult"),
    "fl_core.lab.train": ("TrainSettings",),
    "fl_core.lab.runs": ("train_run", "load_run", "RunSettings", "Run"),
    "fl_core.report.build": ("build_report", "ReportSettings", "Report"),
    "fl_core.report.html": ("report_html",),
}
"""Module → the public names it defines (configs as data: ``__all__`` and the lazy imports derive from it)."""

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

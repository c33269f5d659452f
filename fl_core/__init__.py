"""FilterLens core library: what convolutional filters learn and why.

No Streamlit import anywhere in this package (a test enforces it): notebooks, the CLI (``python -m fl_core``) and
the dashboard pages all call the same functions. The public entry points are listed in ``__all__`` and importable from
here (``from fl_core import analyze_energy, load_model``); each is imported on first use, so ``import fl_core`` stays
light (the CLI's ``--help`` does not wait for torch), and the ``TYPE_CHECKING`` imports show type checkers the same
names with their own signatures (``import X as X``: re-exported; written from the registry by
``scripts/api_types.py``, checked by ``tests/test_api.py``). ``__all__`` derives from the analysis families' registry
(:mod:`fl_core.families`) and :data:`CORE_API`. Each analysis family has one shape (:mod:`fl_core.arguments`)::

    analyze_<family>(models_or_model, data=None, settings=None, *, device=None, progress=None,
                     **setting_overrides) -> <Family>Result

and every result has ``to_dict()``, ``to_frame()``, ``plot(kind=None, **kw)`` (a plotly figure) and ``save(path)``
(``load_result(path)`` or ``<Result>.load(path)`` reads it back).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fl_core.families import public_api

__version__ = "0.2.0"

CORE_API: dict[str, tuple[str, ...]] = {
    "fl_core.errors": ("FilterLensError", "ModelSpecError", "CheckpointError", "WeightsUnavailableError", "DataError",
                       "AnalysisError", "ArgumentError", "InstallError"),
    "fl_core.io.models": ("load_model", "LoadedModel"),
    "fl_core.io.preprocessing": ("InputConfig",),
    "fl_core.io.checkpoints": ("load_state_dict",),
    "fl_core.io.images": ("open_images", "ImageSet", "BUNDLED"),
    "fl_core.io.sources": ("ImageSource",),
    "fl_core.io.layers": ("conv_inventory",),
    "fl_core.io.resultfiles": ("load_result",),
    "fl_core.firstlayer.patches": ("patch_pca", "PatchStatistics", "PatchPCA"),
}
"""Public names that no analysis family owns: errors, models, images, patch statistics, saved results."""
PUBLIC_API: dict[str, tuple[str, ...]] = public_api(CORE_API)
"""Module → the public names it defines (configs as data: ``__all__`` and the lazy imports derive from it)."""

if TYPE_CHECKING:  # the registry's names as type checkers see them: written by scripts/api_types.py, do not edit
    from fl_core.channelaxes.analysis import ChannelAxesResult as ChannelAxesResult
    from fl_core.channelaxes.analysis import analyze_channels as analyze_channels
    from fl_core.channelaxes.calibration import ChannelData as ChannelData
    from fl_core.channelaxes.calibration import channel_data as channel_data
    from fl_core.channelaxes.estimate import ChannelsEstimate as ChannelsEstimate
    from fl_core.channelaxes.estimate import estimate_channels as estimate_channels
    from fl_core.channelaxes.settings import AxisSettings as AxisSettings
    from fl_core.channelaxes.settings import ChannelDataSettings as ChannelDataSettings
    from fl_core.channelaxes.settings import ChannelSettings as ChannelSettings
    from fl_core.channelaxes.settings import PruningSettings as PruningSettings
    from fl_core.errors import AnalysisError as AnalysisError
    from fl_core.errors import ArgumentError as ArgumentError
    from fl_core.errors import CheckpointError as CheckpointError
    from fl_core.errors import DataError as DataError
    from fl_core.errors import FilterLensError as FilterLensError
    from fl_core.errors import InstallError as InstallError
    from fl_core.errors import ModelSpecError as ModelSpecError
    from fl_core.errors import WeightsUnavailableError as WeightsUnavailableError
    from fl_core.firstlayer.energy import EnergyResult as EnergyResult
    from fl_core.firstlayer.energy import analyze_energy as analyze_energy
    from fl_core.firstlayer.patches import PatchPCA as PatchPCA
    from fl_core.firstlayer.patches import PatchStatistics as PatchStatistics
    from fl_core.firstlayer.patches import patch_pca as patch_pca
    from fl_core.firstlayer.settings import EnergySettings as EnergySettings
    from fl_core.firstlayer.settings import WhiteningSettings as WhiteningSettings
    from fl_core.firstlayer.whitening import WhiteningResult as WhiteningResult
    from fl_core.firstlayer.whitening import analyze_whitening as analyze_whitening
    from fl_core.io.checkpoints import load_state_dict as load_state_dict
    from fl_core.io.images import BUNDLED as BUNDLED
    from fl_core.io.images import ImageSet as ImageSet
    from fl_core.io.images import open_images as open_images
    from fl_core.io.inspect import InspectResult as InspectResult
    from fl_core.io.inspect import inspect_models as inspect_models
    from fl_core.io.layers import conv_inventory as conv_inventory
    from fl_core.io.models import LoadedModel as LoadedModel
    from fl_core.io.models import load_model as load_model
    from fl_core.io.preprocessing import InputConfig as InputConfig
    from fl_core.io.resultfiles import load_result as load_result
    from fl_core.io.sources import ImageSource as ImageSource
    from fl_core.lab.runs import Run as Run
    from fl_core.lab.runs import load_run as load_run
    from fl_core.lab.runs import train_run as train_run
    from fl_core.lab.settings import RunSettings as RunSettings
    from fl_core.lab.settings import TrainSettings as TrainSettings
    from fl_core.masterkeys.assignment import analyze_scale_space as analyze_scale_space
    from fl_core.masterkeys.clustering import MasterKeyResult as MasterKeyResult
    from fl_core.masterkeys.clustering import analyze_master_keys as analyze_master_keys
    from fl_core.masterkeys.depthwise import depthwise_bank as depthwise_bank
    from fl_core.masterkeys.fitting import ScaleSpaceResult as ScaleSpaceResult
    from fl_core.masterkeys.fitting import fit_published_filters as fit_published_filters
    from fl_core.masterkeys.layersweep import LayerSweepResult as LayerSweepResult
    from fl_core.masterkeys.layersweep import sweep_layers as sweep_layers
    from fl_core.masterkeys.rescore import RescoreResult as RescoreResult
    from fl_core.masterkeys.rescore import analyze_rescore as analyze_rescore
    from fl_core.masterkeys.rescore import rescore as rescore
    from fl_core.masterkeys.settings import LayerSweepSettings as LayerSweepSettings
    from fl_core.masterkeys.settings import MasterKeySettings as MasterKeySettings
    from fl_core.masterkeys.settings import RecoverySettings as RecoverySettings
    from fl_core.masterkeys.settings import RescoreSettings as RescoreSettings
    from fl_core.masterkeys.settings import ScaleSpaceSettings as ScaleSpaceSettings
    from fl_core.masterkeys.swap import swap_filters as swap_filters
    from fl_core.report.build import Report as Report
    from fl_core.report.build import build_report as build_report
    from fl_core.report.html import report_html as report_html
    from fl_core.report.settings import ReportSettings as ReportSettings
    from fl_core.report.settings import WeightSettings as WeightSettings
    from fl_core.report.weightstats import WeightStatistics as WeightStatistics
    from fl_core.report.weightstats import weight_statistics as weight_statistics
    from fl_core.survey.analysis import SurveyResult as SurveyResult
    from fl_core.survey.analysis import analyze_survey as analyze_survey
    from fl_core.survey.settings import SurveySettings as SurveySettings

_HOME = {name: module for module, names in PUBLIC_API.items() for name in names}
_PAIR_CHECKED: list[str] = []
"""The first public name imported, once torch and torchvision were checked to be a pair and a notebook's progress bars
set up (:func:`__getattr__`)."""
__all__ = ["__version__", *_HOME]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562); a torch and torchvision that do not work together fail
    there in one line that says what to install (:mod:`fl_core.compute.environment`), not in their own error."""
    if name not in _HOME:
        raise AttributeError(f"module 'fl_core' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(_HOME[name]), name)
    except (ImportError, RuntimeError, OSError) as err:
        from fl_core.compute.environment import explained_import_error
        from fl_core.errors import InstallError

        message = explained_import_error(err)
        if message is None or isinstance(err, InstallError):
            raise
        raise InstallError(message) from err
    if not _PAIR_CHECKED:
        _PAIR_CHECKED.append(name)
        from fl_core.compute.environment import text_progress_bars, warn_pair

        warn_pair()
        text_progress_bars()
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))

"""The analysis families, registered once each (as timm registers its models).

A :class:`Family` is data: its name, entry point, settings class, result class, command, further public names,
survey measure and report section. The public API (``fl_core.__all__``), the command line's subcommands and options,
the survey's families, the report's sections and the contract test over every family all derive from
:data:`FAMILIES`. Functions and classes are named as ``"module:name"`` and imported on first use, so this module, like
the settings modules, loads without torch: ``filterlens --help`` answers at once.

Adding a family: write its settings class (a light ``settings.py`` of its package), its entry point and result, its
figures, optionally its command (``fl_core/cli/<name>.py``), then one :func:`register_family` call at the end of this
module, and write the type checker's view of the public API again: ``python scripts/api_types.py`` (docs/DEVELOPING.md,
"Adding an analysis family").
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


def resolve(target: str) -> Any:
    """The object named by ``"module:name"``, its module imported on first use."""
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class SurveyMeasure:
    """What a survey measures per model for a family.

    Attributes:
        measure: ``"module:function"`` of ``function(loaded, survey_settings, device) -> {column: number}``, the
            columns exactly those of ``columns`` (a row whose measure returns others is an error); a measure that reads
            images takes them as ``images=`` too (an ``ImageSet`` a script gave as the survey's data, instead of
            ``survey_settings.images``); the family's own settings arrive as ``survey_settings.family_settings``
            (``None``: its defaults).
        columns: the numbers of each row and what they mean (the table's columns, in order).
        headline: the two numbers the survey figure shows side by side.
        label: the measure's name in the Survey page's picker and the ``--family`` help (default: the family's
            name).
        explanation: how to read the survey figure, for a student (default: what its two headline numbers are).
    """

    measure: str
    columns: Mapping[str, str]
    headline: tuple[str, str]
    label: str = ""
    explanation: str = ""

    def __post_init__(self) -> None:
        unknown = [name for name in self.headline if name not in self.columns]
        if unknown:
            raise ValueError(f"the survey headline names {unknown}, which are not among its columns")

    def explained(self) -> str:
        """:attr:`explanation`, or one built from the headline numbers' descriptions."""
        left, right = (self.columns[name] for name in self.headline)
        return self.explanation or f"Each dot is one model. **Left**: {left}. **Right**: {right}."


@dataclass(frozen=True)
class Family:
    """One analysis family: everything the public API, the command line, the survey and the report derive from.

    Attributes:
        name: the family's name: its command (``filterlens NAME``), its survey family and its test marker
            (``pytest -m family_NAME``).
        summary: one line: the command's help.
        function: the entry point, ``"module:name"``, in the one call shape
            ``function(models_or_model, data=None, settings=None, *, device=None, progress=None, **overrides)``
            (:mod:`fl_core.arguments`; an analysis of the weights alone annotates ``data: None = None``) unless
            :attr:`call_shape` says otherwise.
        settings: the settings class, ``"module:name"`` of a light module (``None``: the family has no settings).
        result: the result class, ``"module:name"``.
        command: the module of the family's command (``add_arguments(parser)``, ``run(args, progress)``); ``None``:
            none of its own.
        public: further public names of the family, ``"module:name"`` each (helpers, nested settings).
        survey: what a survey measures per model (``None``: not surveyed).
        report: the id and title of the family's section in the checkpoint report (``None``: no section); the report
            runs the entry point on the checkpoint with the family's default settings, and the section shows the
            result's figures (every kind of ``plot``) and its table (``to_frame``).
        how_to_read: two sentences for a student beside the report section: what its figures show and how to read
            them.
        call_shape: the entry point has the one call shape (``False``: a tool that analyses no model in it:
            ``inspect`` lists convolutions, ``train`` trains a network).
    """

    name: str
    summary: str
    function: str
    settings: str | None
    result: str
    command: str | None = None
    public: tuple[str, ...] = ()
    survey: SurveyMeasure | None = None
    report: tuple[str, str] | None = None
    how_to_read: str = ""
    call_shape: bool = True

    def entry_point(self) -> Callable[..., Any]:
        """The entry point (imports the family's modules)."""
        return resolve(self.function)  # type: ignore[no-any-return]

    def settings_class(self) -> type | None:
        """The settings class (light)."""
        return None if self.settings is None else resolve(self.settings)

    def result_class(self) -> type:
        """The result class (imports the family's modules)."""
        return resolve(self.result)  # type: ignore[no-any-return]

    def takes(self, parameter: str) -> bool:
        """The entry point has a parameter of that name (``device``, ``progress``)."""
        return parameter in inspect.signature(self.entry_point()).parameters

    def takes_images(self) -> bool:
        """The entry point reads images: its ``data`` is not annotated ``None`` (an analysis of the weights alone)."""
        data = inspect.signature(self.entry_point()).parameters.get("data")
        return data is not None and data.annotation not in (None, "None")

    def names(self) -> tuple[str, ...]:
        """Every public ``"module:name"`` of the family: entry point, settings, result, then :attr:`public`."""
        return tuple(n for n in (self.function, self.settings, self.result, *self.public) if n is not None)


FAMILIES: dict[str, Family] = {}
"""Registered families by name, in registration order (the order of the command line and the report)."""


def register_family(family: Family) -> Family:
    """Add ``family`` to :data:`FAMILIES` (a name, and a report section, registers once)."""
    if family.name in FAMILIES:
        raise ValueError(f"the analysis family {family.name!r} is registered twice")
    sections = {other.report[0]: other.name for other in FAMILIES.values() if other.report}
    if family.report and family.report[0] in sections:
        raise ValueError(f"the report section {family.report[0]!r} of {family.name!r} is "
                         f"{sections[family.report[0]]!r}'s already")
    FAMILIES[family.name] = family
    return family


def family_names(*, surveyed: bool = False) -> tuple[str, ...]:
    """The registered families' names (``surveyed``: those a survey measures)."""
    return tuple(name for name, family in FAMILIES.items() if family.survey is not None or not surveyed)


def report_sections() -> dict[str, Family]:
    """Section id → the family whose result it shows, in registration order (the report's order)."""
    return {family.report[0]: family for family in FAMILIES.values() if family.report}


def public_api(core: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Module → public names: ``core`` (what no family owns) and every family's :meth:`Family.names`."""
    api = {module: tuple(names) for module, names in core.items()}
    for family in FAMILIES.values():
        for target in family.names():
            module, name = target.split(":")
            api[module] = (*api.get(module, ()), name)
    return api


register_family(Family(
    "inspect", "list a model's convolutions, input preprocessing and load notes",
    "fl_core.io.inspect:inspect_models", None, "fl_core.io.inspect:InspectResult", command="fl_core.cli.inspect",
    call_shape=False))
register_family(Family(
    "energy", "first-layer (or any layer's) energy profiles, linear-theory fit, random-init baseline",
    "fl_core.firstlayer.energy:analyze_energy", "fl_core.firstlayer.settings:EnergySettings",
    "fl_core.firstlayer.energy:EnergyResult", command="fl_core.cli.energy",
    survey=SurveyMeasure("fl_core.survey.analysis:energy_values", {
        "theory_r": "Pearson r of the energy profile with the linear theory",
        "theory_r_log": "the same r on log values", "eta_t": "the fitted ηt",
        "random_init_r": "mean r of random-init banks of the same shape", "filters": "first-layer filters"},
        ("theory_r", "random_init_r"), label="energy profile vs linear theory", explanation=(
            "Each dot is one model. **Left**: how well the linear theory explains its first layer's energy profile "
            "(Pearson r; Chowers & Weiss find r ≈ 0.9 across trained architectures). **Right**: the same r for "
            "random-init filters of that shape, the baseline a trained layer should beat.")),
    report=("energy", "First-layer energy profile"),
    how_to_read=("Each point is how strongly the first-layer filters respond to one principal component of the "
                 "image patches (1 = smoothest, most variance); the dashed line is the linear theory with its one "
                 "fitted parameter ηt, and the grey band is what random filters of the same shape give. A high theory "
                 "r with a profile outside the random band means the layer learned what the theory predicts: early in "
                 "training it follows the spectrum, late it flattens it towards whitening (large ηt).")))
register_family(Family(
    "whitening", "spatial autocorrelation C(δ)/C(0) of RGB, learned, random-init and ZCA filter responses",
    "fl_core.firstlayer.whitening:analyze_whitening", "fl_core.firstlayer.settings:WhiteningSettings",
    "fl_core.firstlayer.whitening:WhiteningResult", command="fl_core.cli.whitening",
    survey=SurveyMeasure("fl_core.survey.analysis:whitening_values", {
        "whitening": "C(δ)/C(0) of the first layer's responses (lower: whiter)", "rgb": "C(δ)/C(0) of the RGB input",
        "zca": "C(δ)/C(0) of the ZCA whitening bank", "random": "C(δ)/C(0) of random-init banks (mean)"},
        ("whitening", "rgb"), label="whitening at a fixed distance", explanation=(
            "Each dot is one model. **Left**: how correlated the first layer's responses still are at the chosen "
            "distance, C(δ)/C(0): trained layers decorrelate (whiten) the image, so they sit left of the RGB input "
            "(**right**, the same for models with the same preprocessing).")),
    report=("whitening", "Whitening"),
    how_to_read=("Each curve says how alike two responses of the first layer are δ pixels apart (1 = identical). "
                 "Learned filters that fall faster than RGB and the random-init curve decorrelate their input "
                 "(whitening); the ideal ZCA bank is the limit.")))
register_family(Family(
    "train", "train a small CNN on labelled crops: first-layer snapshots, profile trajectory vs theory, paper claims",
    "fl_core.lab.runs:train_run", "fl_core.lab.settings:RunSettings", "fl_core.lab.runs:Run",
    command="fl_core.cli.train", public=("fl_core.lab.runs:load_run", "fl_core.lab.settings:TrainSettings"),
    call_shape=False))
register_family(Family(
    "masterkeys", "cluster depthwise filters (sign/scale invariant) and assign them to the 8 master key filters",
    "fl_core.masterkeys.clustering:analyze_master_keys", "fl_core.masterkeys.settings:MasterKeySettings",
    "fl_core.masterkeys.clustering:MasterKeyResult", command="fl_core.cli.masterkeys",
    public=("fl_core.masterkeys.depthwise:depthwise_bank",),
    survey=SurveyMeasure("fl_core.survey.analysis:masterkey_values", {
        "filters": "depthwise filters clustered", "kernel_size": "their kernel size",
        "median_abs_cosine": "median |cos| of a filter to its master key",
        **{f"key_{k}": f"share of the filters assigned to master key {k}" for k in range(1, 9)}},
        ("median_abs_cosine", "key_1"), label="master-key composition", explanation=(
            "Each dot is one model with depthwise filters. **Left**: the median |cos| of a filter to the master key "
            "it is assigned to (random filters: low). **Right**: the share of filters assigned to key 1, the "
            "Gaussian blob. Models without depthwise filters are rows with an error.")),
    report=("masterkeys", "Master keys and scale-space models"),
    how_to_read=("Every depthwise filter is assigned to the nearest of the 8 published master key filters (sign and "
                 "scale ignored), so the bars say which shapes the network uses in each stage. The scale-space table "
                 "gives the Gaussian-derivative model (σ, and α for key 7) fitted to the model's own mean filter of "
                 "each key; a cosine near 1 means the idealized model matches it.")))
register_family(Family(
    "scalespace", "σ of the idealized scale-space models of the 8 master keys by fitting method A-D",
    "fl_core.masterkeys.assignment:analyze_scale_space", "fl_core.masterkeys.settings:ScaleSpaceSettings",
    "fl_core.masterkeys.fitting:ScaleSpaceResult", command="fl_core.cli.scalespace",
    public=("fl_core.masterkeys.fitting:fit_published_filters",)))
register_family(Family(
    "weights", "per-layer weight statistics: norms, dead, duplicate and copied filters, non-finite weights",
    "fl_core.report.weightstats:weight_statistics", "fl_core.report.settings:WeightSettings",
    "fl_core.report.weightstats:WeightStatistics",
    survey=SurveyMeasure("fl_core.survey.analysis:weight_values", {
        "convolutions": "convolutions", "filters": "filters", "dead_share": "share of dead filters",
        "duplicate_share": "share of duplicate filters", "non_finite": "non-finite weights",
        "norm_mean": "mean filter norm"}, ("dead_share", "duplicate_share"), label="weight statistics",
        explanation=("Each dot is one model. **Left**: the share of dead filters (norm near 0) over every "
                     "convolution; **right**: the share of duplicates (a filter its peers reconstruct, R² ≥ 0.999).")),
    report=("weights", "Weight statistics"),
    how_to_read=("Each convolution's filters are summarised by their norms ‖w‖, the number of dead (zero) filters and "
                 "of duplicates, filters that their peers in the same layer reconstruct by least squares to R² ≈ 1 "
                 "from the weights alone. Dead or duplicate filters carry no information of their own and are "
                 "candidates for pruning; non-finite weights mean the training run diverged.")))
register_family(Family(
    "rescore", "swap depthwise filters for idealized models and re-score top-1/top-5 (torchrun for several GPUs)",
    "fl_core.masterkeys.rescore:analyze_rescore", "fl_core.masterkeys.settings:RescoreSettings",
    "fl_core.masterkeys.rescore:RescoreResult", command="fl_core.cli.rescore",
    public=("fl_core.masterkeys.rescore:rescore", "fl_core.masterkeys.swap:swap_filters",
            "fl_core.masterkeys.settings:RecoverySettings"),
    report=("accuracy", "Accuracy and channel axes"),
    how_to_read=("Top-1 and top-5 are the share of labelled images whose class is the model's first or among its five "
                 "first guesses. The channel-axes summary compares, for one layer, how replaceable each channel is by "
                 "its peers (local axis) with how much it tells about the class (target axis): a low Spearman ρ means "
                 "the two axes rank channels differently.")))
register_family(Family(
    "layersweep", "swap and zero each depthwise layer alone (the command: rescore --sweep)",
    "fl_core.masterkeys.layersweep:sweep_layers", "fl_core.masterkeys.settings:LayerSweepSettings",
    "fl_core.masterkeys.layersweep:LayerSweepResult"))
register_family(Family(
    "channels", "two axes per channel (local replaceability vs task relevance), lesions, peer replacement, pruning",
    "fl_core.channelaxes.analysis:analyze_channels", "fl_core.channelaxes.settings:ChannelSettings",
    "fl_core.channelaxes.analysis:ChannelAxesResult", command="fl_core.cli.channels",
    public=("fl_core.channelaxes.estimate:estimate_channels", "fl_core.channelaxes.estimate:ChannelsEstimate",
            "fl_core.channelaxes.calibration:channel_data", "fl_core.channelaxes.calibration:ChannelData",
            "fl_core.channelaxes.settings:ChannelDataSettings", "fl_core.channelaxes.settings:AxisSettings",
            "fl_core.channelaxes.settings:PruningSettings")))
register_family(Family(
    "report", "one self-contained offline HTML report of a checkpoint or of a run's checkpoints (--html PATH)",
    "fl_core.report.build:build_report", "fl_core.report.settings:ReportSettings", "fl_core.report.build:Report",
    command="fl_core.cli.report", public=("fl_core.report.html:report_html",)))
register_family(Family(
    "survey", "one analysis over many models (patterns, lists, folders), a row per model, on a Dask cluster's workers",
    "fl_core.survey.analysis:analyze_survey", "fl_core.survey.settings:SurveySettings",
    "fl_core.survey.analysis:SurveyResult", command="fl_core.cli.survey"))

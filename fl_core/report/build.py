"""The checkpoint report: every analysis that applies to a checkpoint (or to the checkpoints of one run), in one
result that :mod:`fl_core.report.html` writes as a self-contained HTML file.

Sections (:data:`SECTIONS`): what was loaded and every convolution with its kind; then one section per registered
family with a report section (:func:`fl_core.families.report_sections`), in registration order; and, for several
checkpoints, their trajectory. This module builds the sections of :data:`BUILT_HERE` itself: the first-layer energy
profile against the linear theory and the random-init band (:func:`fl_core.firstlayer.energy.analyze_energy`);
whitening curves (:func:`fl_core.firstlayer.whitening.analyze_whitening`); for depthwise models the master-key
assignment and the scale-space fit of the per-key mean filters (:mod:`fl_core.masterkeys.clustering`); per-layer
weight statistics (:mod:`fl_core.report.weightstats`); for a runnable model with labelled images, accuracy
(:func:`fl_core.masterkeys.rescore.rescore`) and the channel-axes summary of one layer
(:func:`fl_core.channelaxes.analysis.analyze_channels`). Every other registered section is the family's entry point
run on the last checkpoint with its default settings (:func:`family_result`; the images where it reads images), kept
in :attr:`Report.sections`. The detailed sections describe the last checkpoint (the trained state); a section that
does not apply is skipped with the reason.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch

from fl_core.arguments import ModelLike, as_models, as_settings
from fl_core.channelaxes.analysis import ChannelAxesResult, analyze_channels
from fl_core.channelaxes.calibration import channel_data
from fl_core.channelaxes.settings import ChannelSettings
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import Progress, ProgressLike, progress_callback, report, sub_progress
from fl_core.errors import AnalysisError, ArgumentError, FilterLensError
from fl_core.families import Family, report_sections
from fl_core.firstlayer.energy import EnergyResult, analyze_energy, pearson
from fl_core.firstlayer.settings import EnergySettings, WhiteningSettings
from fl_core.firstlayer.whitening import WhiteningResult, analyze_whitening
from fl_core.io.images import ImageSet, open_images
from fl_core.io.layers import conv_inventory, inventory_frame
from fl_core.io.models import LoadedModel
from fl_core.masterkeys.assignment import assign_to_master_keys, fit_model_master_keys
from fl_core.masterkeys.clustering import MasterKeyResult, analyze_master_keys
from fl_core.masterkeys.depthwise import depthwise_bank
from fl_core.masterkeys.fitting import ScaleSpaceResult
from fl_core.masterkeys.rescore import RescoreResult, analyze_rescore
from fl_core.masterkeys.settings import MasterKeySettings
from fl_core.report.settings import ReportOverrides, ReportSettings
from fl_core.report.weightstats import WeightStatistics, weight_statistics
from fl_core.results import Result, with_model_columns

if TYPE_CHECKING:
    import plotly.graph_objects as go
    from typing_extensions import Unpack

SECTIONS = {"loaded": "What was loaded", **{name: family.report[1] for name, family in report_sections().items()
                                            if family.report}, "trajectory": "Trajectory over training"}
"""Section id -> title, in report order: what was loaded, each registered family's section (:mod:`fl_core.families`),
the trajectory."""
PART_TITLES = {**SECTIONS, "channels": "Channel axes"}
BUILT_HERE = ("energy", "whitening", "masterkeys", "weights", "accuracy")
"""The registered sections whose results :func:`build_report` computes itself (on all checkpoints, with the report's
settings, or as a group); every other registered section is its family's own result (:func:`family_result`)."""
FAMILY_SECTIONS = tuple(name for name in report_sections() if name not in BUILT_HERE)
"""The registered sections that are their family's result on the last checkpoint (:attr:`Report.sections`)."""
SECTION_PARTS = {"loaded": (), "masterkeys": ("masterkeys", "scalespace"), "accuracy": ("accuracy", "channels")}
"""The results of a section that holds several (the others: the section's own)."""
FIGURE_PARTS = tuple(part for name in SECTIONS for part in SECTION_PARTS.get(name, (name,)))
"""The report's parts whose results draw figures (:meth:`Report.plot`), in report order."""
SUMMARY_CHANNEL_SETTINGS = ChannelSettings(lesion_kinds=(), pruning=None)
"""The report's channel-axes summary: both axes and their agreement, without the per-channel lesions (one forward
pass of the evaluation set per channel and kind: minutes on a CPU) or pruning curves; the Channel Axes page runs
those."""
"""Titles of everything that can be skipped: the sections, and the channel axes within the accuracy section."""


@dataclass(frozen=True)
class CheckpointTrajectory(Result):
    """The first layer, its theory fit, whitening and master-key composition across checkpoints in training order.

    Attributes:
        labels, specs: the checkpoints.
        lambdas: patch std per component (the shared patch PCA).
        profiles, theory: (S, D) max-normalized energy profiles and their fitted theory profiles.
        fits: each checkpoint's theory fit as its ``to_dict()`` (``eta_t``, ``r`` and whatever else the fit reports).
        eta_t, r: (S,) the fitted τ = ηt and Pearson r.
        random_init_r: (S,) mean theory-fit r of random-init banks of the same shape.
        vs_first: (S,) Pearson r between each profile and the first checkpoint's.
        whitening_distance: δ in pixels; whitening: (S,) C(δ)/C(0) of each checkpoint's first layer (``None`` when
            whitening was skipped); whitening_reference: RGB, random-init and ZCA values at δ.
        masterkey_counts: (S, 8) filters per master key (``None`` without depthwise filters); masterkey_templates:
            which reference filters.
    """

    labels: tuple[str, ...]
    specs: tuple[str, ...]
    lambdas: np.ndarray
    profiles: np.ndarray
    theory: np.ndarray
    fits: tuple[dict, ...]
    eta_t: np.ndarray
    r: np.ndarray
    random_init_r: np.ndarray
    vs_first: np.ndarray
    whitening_distance: int
    whitening: np.ndarray | None
    whitening_reference: dict[str, float]
    masterkey_counts: np.ndarray | None
    masterkey_templates: str | None

    _figures: ClassVar[dict[str, str]] = {
        "profiles": "fl_core.report.plots:trajectory_profiles_figure",
        "summary": "fl_core.report.plots:trajectory_summary_figure",
        "keys": "fl_core.report.plots:trajectory_keys_figure",
    }

    def to_frame(self) -> pd.DataFrame:
        """One row per checkpoint: every number of its theory fit, the random-init r, whitening, master keys."""
        fits = pd.DataFrame([dict(scalar_rows(fit)) for fit in self.fits])
        frame = pd.DataFrame({"checkpoint": self.labels, "spec": self.specs}).join(fits)
        frame = frame.assign(random_init_r=self.random_init_r, vs_first=self.vs_first)
        if self.whitening is not None:
            frame[f"whitening_at_{self.whitening_distance}"] = self.whitening
        if self.masterkey_counts is not None:
            for key in range(self.masterkey_counts.shape[1]):
                frame[f"key_{key + 1}"] = self.masterkey_counts[:, key]
        return frame


@dataclass(frozen=True)
class Report(Result):
    """Everything the report shows; ``to_dict()`` is the ``report`` CLI JSON.

    Attributes:
        settings: the :class:`ReportSettings`.
        images: description of the image source.
        models: ``describe()`` of every checkpoint, in training order.
        final: spec of the checkpoint the detailed sections describe (the last).
        layers: its convolutions with kind, geometry, the sections that analysed each and why others skipped it.
        energy, whitening, masterkeys, scalespace, weights, accuracy, channels, trajectory: the section results
            (``None`` when skipped).
        skipped: section id (or ``channels``, the channel axes within the accuracy section) -> why it was skipped.
        timings: section id (or ``channels``) -> seconds.
        sections: the results of the other registered families' sections (:data:`FAMILY_SECTIONS`) by section id,
            those that ran; each is also an attribute (``report.<id>``, ``None`` when skipped) and a key of
            ``to_dict()`` like the sections above.
    """

    settings: ReportSettings
    images: str
    models: tuple[dict, ...]
    final: str
    layers: tuple[dict, ...]
    energy: EnergyResult | None
    whitening: WhiteningResult | None
    masterkeys: MasterKeyResult | None
    scalespace: ScaleSpaceResult | None
    weights: WeightStatistics | None
    accuracy: RescoreResult | None
    channels: ChannelAxesResult | None
    trajectory: CheckpointTrajectory | None
    skipped: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    sections: dict[str, Result] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Result | None:
        """A registered family's section result by its id (``None`` when it did not run)."""
        if name in FAMILY_SECTIONS:
            return self.__dict__.get("sections", {}).get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_dict(self) -> dict:
        """JSON-safe dict of every public field, each of :attr:`sections` under its own id (``None``: skipped)."""
        data = super().to_dict()
        sections = data.pop("sections")
        return {**data, **{name: sections.get(name) for name in FAMILY_SECTIONS}}

    def to_frame(self) -> pd.DataFrame:
        """The convolutions of the final checkpoint with their weight statistics, led by its label and spec."""
        final = self.models[-1]
        layers = pd.DataFrame(list(self.layers))
        if self.weights is not None:
            layers = layers.merge(self.weights.to_frame().drop(columns=["model", "spec", "kind"]), on="layer",
                                  how="left")
        return with_model_columns(layers, final["label"], final["spec"])

    @classmethod
    def figure_kinds(cls) -> tuple[str, ...]:
        """The sections whose result draws a figure."""
        return FIGURE_PARTS

    def missing_figure(self, kind: str) -> str | None:
        if getattr(self, kind) is None:
            return f"The report skipped {kind}: {self.skipped.get(kind, 'it does not apply')}"
        return None

    def plot(self, kind: str | None = None, **kwargs) -> go.Figure:
        """The default figure of one section's result (``kind``: one of :meth:`plot_kinds`, the sections that ran,
        default the first); ``report.energy.plot("spectrum")`` draws a section's other figures."""
        kinds = self.plot_kinds()
        kind = kind or (kinds[0] if kinds else FIGURE_PARTS[0])
        if kind not in FIGURE_PARTS:
            raise ArgumentError(f"kind {kind!r}: a report draws the figures of {', '.join(map(repr, FIGURE_PARTS))}.")
        if (missing := self.missing_figure(kind)) is not None:
            raise AnalysisError(missing)
        return getattr(self, kind).plot(**kwargs)


_CLASHING = set(FAMILY_SECTIONS) & {f.name for f in dataclasses.fields(Report)}
if _CLASHING:
    raise ValueError(f"report sections {sorted(_CLASHING)} are named like fields of Report: register them under other "
                     "ids")


def scalar_rows(data: Mapping, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(dotted key, value) of every scalar of a nested dict (lists are left out)."""
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from scalar_rows(value, f"{name}.")
        elif not isinstance(value, list | tuple):
            yield name, value


class _Sections:
    """Runs each section, recording its time, and its skip reason when it raises a FilterLens error."""

    def __init__(self) -> None:
        self.skipped: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    def run(self, name: str, compute: Callable[[], object]) -> object | None:
        start = time.perf_counter()
        try:
            return compute()
        except FilterLensError as err:
            self.skipped.setdefault(name, str(err))
            return None
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start


def final_only(energy: EnergyResult, spec: str) -> EnergyResult:
    """The energy result of one model of a multi-model result (same patch PCA)."""
    chosen = tuple(m for m in energy.models if m.spec == spec)
    return dataclasses.replace(energy, models=chosen, correlation=np.eye(len(chosen)))


def final_whitening(whitening: WhiteningResult, spec: str) -> WhiteningResult:
    """The whitening result with the reference curves and one model's curve."""
    others = set(whitening.labels) - {spec}
    return dataclasses.replace(whitening, curves={k: v for k, v in whitening.curves.items() if k not in others},
                               labels={spec: whitening.labels[spec]})


def family_result(family: Family, loaded: LoadedModel, images: ImageSet, device: torch.device,
                  progress: Progress) -> Result:
    """A registered family's result on ``loaded`` with its default settings, for its report section: its entry point
    with the report's images where it reads images (:meth:`~fl_core.families.Family.takes_images`)."""
    options = {key: value for key, value in (("device", device), ("progress", progress)) if family.takes(key)}
    return family.entry_point()(loaded, images if family.takes_images() else None, **options)  # type: ignore[no-any-return]


def accuracy_skip_reason(loaded: LoadedModel, images: ImageSet) -> str | None:
    """Why accuracy and channel axes cannot run (``None`` when they can)."""
    if loaded.weights_only:
        return (f"{loaded.label} is weights-only: accuracy and channel axes need a runnable model. "
                f"{loaded.runnable_advice()}")
    if not images.labelled:
        return (f"No labelled images ({images.description}): accuracy and channel axes need an ImageFolder tree of "
                "the model's classes (a folder holding one folder of images per class).")
    return None


def build_trajectory(models: Sequence[LoadedModel], energy: EnergyResult | None, whitening: WhiteningResult | None,
                     counts: list[np.ndarray] | None, templates: str | None, distance: int) -> CheckpointTrajectory:
    """Collect each checkpoint's fit, whitening value and master-key counts (computed by the sections)."""
    if energy is None:
        raise AnalysisError("The trajectory follows the first-layer energy profile, which was skipped.")
    dims = {len(m.profile) for m in energy.models}
    if len(dims) > 1:
        raise AnalysisError("The checkpoints' first layers have different patch sizes, so they are not one run: "
                            "give the checkpoints of one training run.")
    profiles = np.stack([m.profile for m in energy.models])
    at = whitening.at(distance) if whitening is not None else {}
    return CheckpointTrajectory(
        labels=tuple(m.label for m in models), specs=tuple(m.spec for m in models), lambdas=energy.lambdas,
        profiles=profiles, theory=np.stack([m.theory.profile for m in energy.models]),
        fits=tuple(m.theory.to_dict() for m in energy.models),
        eta_t=np.array([m.theory.eta_t for m in energy.models]), r=np.array([m.theory.r for m in energy.models]),
        random_init_r=np.array([m.random_init.mean for m in energy.models]),
        vs_first=np.array([pearson(p, profiles[0]) for p in profiles]), whitening_distance=distance,
        whitening=None if whitening is None else np.array([at[m.spec] for m in models]),
        whitening_reference={k: at[k] for k in ("rgb", "random", "zca") if k in at},
        masterkey_counts=None if counts is None else np.stack(counts), masterkey_templates=templates)


def master_key_counts(models: Sequence[LoadedModel], kernel_size: int, method: str) -> list[np.ndarray]:
    """Filters per master key of each checkpoint (depthwise filters of ``kernel_size``)."""
    counts = []
    for loaded in models:
        bank = depthwise_bank(loaded)
        chosen = bank.select(kernel_size)
        filters, layer_index = bank.filters(chosen)
        counts.append(assign_to_master_keys(filters, layer_index, chosen, method).counts)
    return counts


FIRST_LAYER_ONLY = "energy, whitening: first layer only"
"""Why the energy and whitening sections skip a layer other than the first (the report says how to go further once,
beside the table, rather than in every row)."""


def layer_rows(loaded: LoadedModel, uses: dict[str, list[str]], reasons: dict[str, str]) -> tuple[dict, ...]:
    """The inventory of ``loaded`` with, per layer, the sections that analysed it and why others did not."""
    rows = []
    for row in inventory_frame(conv_inventory(loaded)).to_dict(orient="records"):
        name = row["layer"]
        rows.append({**row, "analysed": ", ".join(uses.get(name, [])), "skipped": reasons.get(name, "")})
    return tuple(rows)


def _layer_uses(loaded: LoadedModel, sections: _Sections, masterkeys: MasterKeyResult | None,
                channels: ChannelAxesResult | None) -> tuple[dict[str, list[str]], dict[str, str]]:
    uses: dict[str, list[str]] = {}
    reasons: dict[str, str] = {}
    analysed_depthwise = set(masterkeys.published_assignment.layers) if masterkeys else set()
    skipped_depthwise = {entry.split(" (")[0]: entry for entry in (masterkeys.skipped if masterkeys else ())}
    for lay in conv_inventory(loaded):
        used = ["weights"]
        if lay.kind == "first":
            used += [s for s in ("energy", "whitening") if s not in sections.skipped]
            missing = [f"{s}: {sections.skipped[s]}" for s in ("energy", "whitening") if s in sections.skipped]
            if missing:
                reasons[lay.name] = " ".join(missing)
        elif lay.kind == "depthwise":
            if lay.name in analysed_depthwise:
                used.append("master keys")
            elif lay.name in skipped_depthwise:
                reasons[lay.name] = f"master keys: {skipped_depthwise[lay.name]}"
            elif masterkeys is not None:
                reasons[lay.name] = (f"master keys: {lay.kernel_size[0]}×{lay.kernel_size[1]} filters; the analysis "
                                     f"takes the most frequent size, {masterkeys.kernel_size}×{masterkeys.kernel_size}")
            else:
                reasons[lay.name] = f"master keys: {sections.skipped.get('masterkeys', 'skipped')}"
        else:
            reasons[lay.name] = FIRST_LAYER_ONLY
        if channels is not None and lay.name == channels.layer:
            used.append("channel axes")
            reasons.pop(lay.name, None)
        uses[lay.name] = used
    return uses, reasons


def build_report(models: ModelLike | Sequence[ModelLike], data: str | None = None,
                 settings: ReportSettings | None = None, *, device: DeviceLike = None, progress: ProgressLike = None,
                 **setting_overrides: Unpack[ReportOverrides]) -> Report:
    """Run every section on the checkpoints (in training order; the last is described in detail).

    Args:
        models: one checkpoint, or the checkpoints of one run (:func:`fl_core.report.series.load_series`): spec
            strings, loaded models or ``nn.Module`` objects.
        data: the image source (``"bundled"``, a folder or an ImageFolder tree; default: ``settings.images``).
        settings: what to compute; ``setting_overrides`` replace fields (``seeds=2``, ``k=8``).
        **setting_overrides: fields of ``settings`` to replace, by name.
        device: where the statistics run.
        progress: ``progress(fraction, message)``.

    Raises:
        FilterLensError: no model, or the image source cannot be opened; a section that does not apply is skipped.
    """
    device, progress = resolve_device(device), progress_callback(progress)
    models = as_models(models, progress=progress)
    if data is not None:
        if not isinstance(data, str | Path):
            raise ArgumentError(f"data of a report is an image source string ('bundled', a folder or an ImageFolder "
                                f"tree), not {type(data).__name__}: the report opens it for each section.")
        setting_overrides = {**setting_overrides, "images": str(data)}
    settings = as_settings(ReportSettings, settings, setting_overrides)
    final = models[-1]
    images = open_images(settings.images, settings.max_images)
    sections = _Sections()
    ordered = [final, *models[:-1]]  # the final model's input space is the whitening reference
    energy = EnergySettings(seeds=settings.seeds)
    whitening = WhiteningSettings(max_distance=max(settings.max_distance, settings.trajectory_distance),
                                  seeds=settings.seeds)

    report(progress, 0.0, "energy profiles")
    energy_all = sections.run("energy", lambda: analyze_energy(models, images, energy, device=device,
                                                               progress=sub_progress(progress, 0.0, 0.35)))
    whitening_all = sections.run("whitening", lambda: analyze_whitening(
        ordered, images, whitening, device=device, progress=sub_progress(progress, 0.35, 0.55)))

    report(progress, 0.55, "master keys")
    masterkeys = sections.run("masterkeys", lambda: analyze_master_keys(
        depthwise_bank(final), settings=MasterKeySettings(k=settings.k, restarts=settings.restarts, seed=settings.seed,
                                                 method=settings.method), device=device,
        progress=sub_progress(progress, 0.55, 0.65)))
    scalespace = sections.run("masterkeys", lambda: fit_model_master_keys(depthwise_bank(final), settings.method)
                              ) if masterkeys is not None else None

    report(progress, 0.65, "weight statistics")
    weights = sections.run("weights", lambda: weight_statistics(final, device=device,
                                                                progress=sub_progress(progress, 0.65, 0.67)))
    families = {}
    for index, (name, family) in enumerate((name, report_sections()[name]) for name in FAMILY_SECTIONS):
        span = sub_progress(progress, 0.67 + 0.03 * index / len(FAMILY_SECTIONS),
                            0.67 + 0.03 * (index + 1) / len(FAMILY_SECTIONS))
        computed = sections.run(name, lambda family=family, span=span: family_result(family, final, images, device,
                                                                                      span))
        if computed is not None:
            families[name] = computed

    reason = accuracy_skip_reason(final, images)
    accuracy = channels = None
    if reason:
        sections.skipped["accuracy"] = reason
    else:
        report(progress, 0.7, "accuracy")
        accuracy = sections.run("accuracy", lambda: analyze_rescore(
            final, open_images(settings.images, settings.max_eval_images), replacements=(), device=device,
            progress=sub_progress(progress, 0.7, 0.8)))
        channels = sections.run("channels", lambda: analyze_channels(
            final, channel_data(final, settings.images, settings.n_calibration, settings.n_evaluation,
                                seed=settings.seed),
            dataclasses.replace(SUMMARY_CHANNEL_SETTINGS, layer=settings.channel_layer),
            device=device, progress=sub_progress(progress, 0.8, 0.95)))

    trajectory = None
    if len(models) > 1:
        report(progress, 0.95, "trajectory")
        counts = sections.run("trajectory", lambda: master_key_counts(models, masterkeys.kernel_size,
                                                                      settings.method)) if masterkeys else None
        trajectory = sections.run("trajectory", lambda: build_trajectory(
            models, energy_all, whitening_all, counts, masterkeys.published_assignment.templates if counts else None,
            settings.trajectory_distance))
    else:
        sections.skipped["trajectory"] = ("One checkpoint: the trajectory follows several checkpoints of one "
                                          "training run.")
    uses, reasons = _layer_uses(final, sections, masterkeys, channels)
    report(progress, 1.0, "report done")
    return Report(
        settings=settings, images=images.description, models=tuple(m.describe() for m in models), final=final.spec,
        layers=layer_rows(final, uses, reasons),
        energy=None if energy_all is None else final_only(energy_all, final.spec),
        whitening=None if whitening_all is None else final_whitening(whitening_all, final.spec),
        masterkeys=masterkeys, scalespace=scalespace, weights=weights, accuracy=accuracy, channels=channels,
        trajectory=trajectory, skipped=dict(sections.skipped), timings=dict(sections.timings), sections=families)

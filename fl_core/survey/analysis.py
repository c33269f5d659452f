"""A survey: one analysis family measured on many models, one row of numbers per model.

Each row is computed on its own (:func:`survey_row`), so a survey maps over an engine's workers (the ``survey``
command) or runs here in order (:func:`analyze_survey`). A model that fails to load or to analyse gives a row with its
error, never a stopped survey. The numbers per family (:data:`COLUMNS`, registered with each family in
:mod:`fl_core.families`):

* ``energy``: the first layer's energy profile e_i on the patch PCA of the images and its fit by the linear theory
  (Chowers & Weiss, Def. 2.2 and §3): Pearson ``theory_r`` (and on log values), ηt, and the mean r of random-init
  banks of the same shape (``random_init_r``);
* ``whitening``: the spatial autocorrelation C(δ)/C(0) of the first layer's responses at the distance δ, beside that
  of the RGB input, of the ZCA whitening bank and of random-init banks (the mean over seeds);
* ``masterkeys``: the depthwise filters (the most common kernel size) assigned to the 8 published master keys by the
  affine rule (B.6): the share of each key, and the median |cos| of a filter to its key;
* ``weights``: over every convolution, the shares of dead and of duplicate filters (a filter its peers reconstruct
  with R² ≥ 0.999), non-finite weights and the mean filter norm;

and those of every other family registered with a survey measure. A measure returns exactly the columns its family
registered (:func:`checked_values`: a misspelled one makes every row an error, not a column of NaN), and gets the
family's own settings as ``settings.family_settings`` (``None``: its defaults).
"""

from __future__ import annotations

import inspect
import logging
import numbers
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from fl_core.arguments import ImagesLike, ModelLike, as_images, as_model, as_settings, weights_only_data
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import ProgressLike, progress_callback, report
from fl_core.errors import AnalysisError, ArgumentError, FilterLensError, ModelSpecError
from fl_core.families import FAMILIES, resolve
from fl_core.io.demos import demo_manifest
from fl_core.io.images import ImageSet, open_images
from fl_core.io.models import LoadedModel, load_model
from fl_core.io.specs import ModelSpec
from fl_core.results import MODEL_COLUMNS, Result, numbers_as_numbers
from fl_core.survey.models import survey_models
from fl_core.survey.settings import FAMILIES as SURVEYED
from fl_core.survey.settings import SurveyOverrides, SurveySettings

log = logging.getLogger("filterlens")

COLUMNS: dict[str, dict[str, str]] = {name: dict(FAMILIES[name].survey.columns) for name in SURVEYED}
"""The numbers of each family's rows and what they mean (the table's columns, in order; from the registry)."""
HEADLINES: dict[str, tuple[str, str]] = {name: FAMILIES[name].survey.headline for name in SURVEYED}
"""The two numbers of each family that the survey figure shows side by side (from the registry)."""
LOCAL = "local"
"""The worker of a row computed in this process."""

if TYPE_CHECKING:
    from typing_extensions import Unpack


@dataclass(frozen=True)
class SurveyRow(Result):
    """One model of a survey.

    Attributes:
        spec, label: the model.
        model_family: its architecture family (the registry name's stem: ``convnext``, ``resnet``, ``mobilenetv3``;
            the source for a file or a demo: ``weights``, ``onnx``, ``demo``).
        values: the numbers of the survey's family (:data:`COLUMNS`), counts as integers; empty when it failed.
        worker: where it was computed (an engine worker's address, or ``local``).
        seconds: how long it took there.
        error: why it failed (``None`` when it did not).
    """

    spec: str
    label: str
    model_family: str
    values: dict[str, float | int] = field(default_factory=dict)
    worker: str = LOCAL
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class SurveyResult(Result):
    """A survey: the settings, one row per model in the order given, and its wall-clock seconds.

    Attributes:
        settings: what was measured.
        rows: one per model.
        seconds: the whole survey, start to last row.
    """

    settings: SurveySettings
    rows: tuple[SurveyRow, ...]
    seconds: float

    _figures: ClassVar[dict[str, str]] = {"survey": "fl_core.survey.plots:survey_figure"}

    @property
    def workers(self) -> tuple[str, ...]:
        """The workers that computed rows, sorted."""
        return tuple(sorted({row.worker for row in self.rows if row.error is None}))

    @property
    def worker_names(self) -> dict[str, str]:
        """Each row's worker address as ``worker 1``, ``worker 2``, ... (sorted by address; ``local`` stays), for
        readers who need to see the rows spread over the engine, not its internal addresses."""
        addresses = sorted({row.worker for row in self.rows} - {LOCAL})
        return {LOCAL: LOCAL} | {address: f"worker {i}" for i, address in enumerate(addresses, start=1)}

    @property
    def failed(self) -> tuple[SurveyRow, ...]:
        return tuple(row for row in self.rows if row.error is not None)

    def to_frame(self) -> pd.DataFrame:
        """One row per model: its label (``model``) and spec, model family, worker, seconds, error, then the family's
        numbers (missing where the row failed; counts stay integers where none did)."""
        columns = list(COLUMNS[self.settings.family])
        frame = pd.DataFrame([{"model": row.label, "spec": row.spec, "model_family": row.model_family,
                               "worker": row.worker, "seconds": row.seconds, "error": row.error,
                               **{name: row.values.get(name) for name in columns}} for row in self.rows],
                             columns=[*MODEL_COLUMNS, "model_family", "worker", "seconds", "error", *columns])
        return numbers_as_numbers(frame)


def model_family(spec: str) -> str:
    """The architecture family of a spec: the stem of its registry name (``convnext_atto`` → ``convnext``,
    ``mobilenetv3_large_100`` → ``mobilenetv3``); a demo's architecture's (``demo:squeezenet1_0``, built on
    ``torchvision:squeezenet1_0``, is a ``squeezenet`` like it; a small net by its name, ``tiny_vgg``), or the source
    of a file (``weights``, ``onnx``, and ``weights`` for a demo filter bank)."""
    try:
        parsed = ModelSpec.parse(spec)
    except ModelSpecError:
        return "unknown"
    if parsed.source == "demo":
        entry = demo_manifest().get(parsed.name)
        if entry is None:
            return "demo"
        return "weights" if entry.arch is None else model_family(entry.arch) if ":" in entry.arch else entry.arch
    if parsed.source not in ("timm", "torchvision"):
        return parsed.source
    stem = re.match(r"[a-z]+?(?:v\d+)?(?![a-z])", parsed.name.lower())
    return stem.group(0) if stem else parsed.name


def survey_images(settings: SurveySettings, images: ImageSet | None = None) -> ImageSet:
    """The images a row's patch statistics read: ``images`` (given as data by a script, at most ``max_images`` of them)
    or the settings' image source."""
    if images is None:
        return open_images(settings.images, settings.max_images)
    return images if settings.max_images is None else images.subset(range(min(settings.max_images, len(images))))


def energy_values(loaded: LoadedModel, settings: SurveySettings, device, images: ImageSet | None = None
                  ) -> dict[str, float | int]:
    from fl_core.firstlayer.energy import analyze_energy
    from fl_core.firstlayer.settings import EnergySettings

    energy = settings.family_settings or EnergySettings(seeds=settings.seeds)
    model = analyze_energy([loaded], survey_images(settings, images), energy, device=device, progress=False).models[0]
    return {"theory_r": model.theory.r, "theory_r_log": model.theory.r_log, "eta_t": model.theory.eta_t,
            "random_init_r": model.random_init.mean, "filters": int(model.n_filters)}


def whitening_values(loaded: LoadedModel, settings: SurveySettings, device, images: ImageSet | None = None
                     ) -> dict[str, float | int]:
    from fl_core.firstlayer.settings import WhiteningSettings
    from fl_core.firstlayer.whitening import analyze_whitening

    whitening = settings.family_settings or WhiteningSettings(max_distance=settings.distance, seeds=settings.seeds)
    if settings.distance > whitening.max_distance:
        raise ArgumentError(f"distance {settings.distance} is beyond the whitening settings' max_distance "
                            f"{whitening.max_distance}: raise max_distance or lower distance.")
    result = analyze_whitening([loaded], survey_images(settings, images), whitening, device=device, progress=False)
    at = int(np.flatnonzero(np.asarray(result.distances) == settings.distance)[0])
    return {"whitening": float(result.curves[loaded.spec][at]),
            **{name: float(result.curves[name][at]) for name in ("rgb", "zca", "random")}}


def masterkey_values(loaded: LoadedModel, settings: SurveySettings, device) -> dict[str, float | int]:
    from fl_core.masterkeys.clustering import analyze_master_keys

    result = analyze_master_keys(loaded, settings=settings.family_settings, device=device, progress=False)
    assignment = result.published_assignment
    shares = np.asarray(assignment.counts, dtype=float) / max(1, int(np.sum(assignment.counts)))
    return {"filters": int(result.n_filters), "kernel_size": int(result.kernel_size),
            "median_abs_cosine": float(assignment.median_abs_cosine),
            **{f"key_{k + 1}": float(share) for k, share in enumerate(shares)}}


def weight_values(loaded: LoadedModel, settings: SurveySettings, device) -> dict[str, float | int]:
    from fl_core.report.weightstats import weight_statistics

    stats = weight_statistics(loaded, settings=settings.family_settings, device=device, progress=False)
    totals = stats.totals
    filters = sum(layer.filters for layer in stats.layers)
    finite = [layer for layer in stats.layers if not layer.non_finite]
    norm_mean = (sum(layer.norm_mean * layer.filters for layer in finite) / sum(layer.filters for layer in finite)
                 if finite else np.nan)
    return {"convolutions": len(stats.layers), "filters": int(filters),
            "dead_share": totals["dead"] / max(1, filters), "duplicate_share": totals["duplicates"] / max(1, filters),
            "non_finite": int(totals["non_finite"]), "norm_mean": float(norm_mean)}


def checked_values(family: str, values: Mapping[str, Any]) -> dict[str, float | int]:
    """A measure's numbers, in the order its family registered them.

    Raises:
        AnalysisError: the measure returned other columns than its registration declares, or a value that is not a
            number (a bug in the family's measure: every row says so, rather than a column of NaN).
    """
    declared = list(COLUMNS[family])
    if set(values) != set(declared):
        missing, extra = sorted(set(declared) - set(values)), sorted(set(values) - set(declared))
        raise AnalysisError(f"the {family} survey measure returned the columns {sorted(values)}, its registration "
                            f"declares {declared} (missing: {missing}; not declared: {extra}): a bug in the measure "
                            "of fl_core.families")
    wrong = {name: value for name, value in values.items() if not isinstance(value, numbers.Real)
             or isinstance(value, bool)}
    if wrong:
        raise AnalysisError(f"the {family} survey measure returned values that are not numbers: {wrong!r}")
    return {name: values[name] for name in declared}


def error_text(error: BaseException) -> str:
    """What a failed row says: a FilterLens error's own message, otherwise the exception's type and text."""
    return str(error) if isinstance(error, FilterLensError) else f"{type(error).__name__}: {error}"


def reads_images(family: str) -> bool:
    """Whether a family's survey measure reads images (its function takes ``images``); the others read weights."""
    return "images" in inspect.signature(resolve(FAMILIES[family].survey.measure)).parameters


def survey_row(spec: str, settings: SurveySettings | None = None, *, device=None,
               load: Callable[[str], LoadedModel] = load_model, images: ImageSet | None = None) -> SurveyRow:
    """The survey's numbers for one model (``settings``: default ``SurveySettings()``; ``images``: instead of the
    settings' image source), or a row with the error (one bad model never stops a survey)."""
    settings = settings or SurveySettings()
    began = time.perf_counter()
    try:
        loaded = load(spec)
        measure = resolve(FAMILIES[settings.family].survey.measure)
        values = checked_values(settings.family, measure(loaded, settings, device,
                                                         **({"images": images} if images is not None else {})))
    except Exception as err:  # every failure becomes the row's error
        if not isinstance(err, FilterLensError):
            log.exception("survey row %s failed", spec)
        return SurveyRow(spec, spec, model_family(spec), seconds=time.perf_counter() - began, error=error_text(err))
    return SurveyRow(spec, loaded.label, model_family(spec), values, seconds=time.perf_counter() - began)


def analyze_survey(models: ModelLike | Sequence[ModelLike], data: ImagesLike | None = None,
                   settings: SurveySettings | None = None, *, device: DeviceLike = None,
                   progress: ProgressLike = None, **setting_overrides: Unpack[SurveyOverrides]) -> SurveyResult:
    """A survey computed here, one model after the other (``python -m fl_core survey`` spreads the rows over workers).

    Args:
        models: specs or registry name patterns (:func:`fl_core.survey.models.survey_models`), loaded models or
            ``nn.Module`` objects, one or a list.
        data: the images of the patch statistics (energy, whitening), as every family takes them: an image source
            string, an ``ImageSet``, a tensor batch, a ``Dataset`` or a ``DataLoader`` (default: ``settings.images``);
            the families of the weights alone (master keys, weights) ignore it with a notice.
        settings: what to measure (``None``: :class:`SurveySettings`'s defaults).
        device: where each row is computed (``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``).
        progress: ``progress(fraction, message)``; ``None``: a bar where a person is watching; ``False``: none.
        **setting_overrides: fields of ``settings`` replaced (``family="whitening"``, ``seeds=3``).
    """
    if isinstance(data, str | Path):
        setting_overrides = {**setting_overrides, "images": str(data)}
    settings = as_settings(SurveySettings, settings, setting_overrides)
    images = None
    if data is not None and not reads_images(settings.family):
        weights_only_data(data, f"a {settings.family} survey")
    elif data is not None and not isinstance(data, str | Path):
        images = as_images(data)
    device, progress = resolve_device(device), progress_callback(progress)
    given = list(models) if isinstance(models, Sequence) and not isinstance(models, str) else [models]
    objects: dict[str, LoadedModel] = {}
    for i, item in enumerate(given):
        if not isinstance(item, str):
            loaded = as_model(item, f"models[{i}]")
            objects[loaded.spec], given[i] = loaded, loaded.spec
    specs = survey_models(given, limit=settings.max_models, loaded=objects)
    began, rows = time.perf_counter(), []
    for done, spec in enumerate(specs):
        report(progress, done / len(specs), f"{done}/{len(specs)} models: {spec}")
        rows.append(survey_row(spec, settings, device=device, load=lambda s: objects.get(s) or load_model(s),
                               images=images))
    report(progress, 1.0, f"{len(specs)} models surveyed")
    return SurveyResult(settings, tuple(rows), time.perf_counter() - began)

"""Master keys: each depthwise filter assigned to the nearest of the 8 published master key filters, and a model's own
per-key mean filters with their scale-space fits (Babaiee et al., arXiv:2401.14469 / 2509.11711;
docs/methods.md, "Master keys").

**Assignment** (B.6, the authors' swap rule): k* = argmax_k |⟨y - ȳ, x_k⟩|, a = ⟨y, x_k*⟩, b = mean(y), with x_k the
centred unit published 7×7 filters; for other kernel sizes the idealized models of a fitting method at that size
(:func:`fl_core.masterkeys.fitting.idealized_templates`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd
import torch

from fl_core.arguments import ImagesLike, ModelLike, as_model, as_settings, weights_only_data
from fl_core.compute.device import DeviceLike, resolve_device
from fl_core.compute.progress import Progress, ProgressLike, progress_callback, report
from fl_core.errors import AnalysisError
from fl_core.io.models import LoadedModel
from fl_core.masterkeys.depthwise import DepthwiseBank, DepthwiseLayer, constant_filters, depthwise_bank
from fl_core.masterkeys.fitting import ScaleSpaceResult, fit_filters, fit_published_filters, idealized_templates
from fl_core.masterkeys.kmeans import centred_unit_vectors
from fl_core.masterkeys.scalespace import (
    AffineTemplateFit,
    affine_fit_to_templates,
    load_published_filters,
    normalize_learned_filter,
)
from fl_core.masterkeys.settings import FitMethod, ScaleSpaceOverrides, ScaleSpaceSettings
from fl_core.results import Result

N_MASTER_KEYS = 8

if TYPE_CHECKING:
    from typing_extensions import Unpack


def master_key_templates(kernel_size: int, method: FitMethod = "B") -> tuple[np.ndarray, str]:
    """The 8 reference filters at a kernel size and their description.

    7×7: the published filters; other odd sizes: the idealized models of ``method`` (σ fitted to the published
    filters) at that size.
    """
    if kernel_size == 7:
        return load_published_filters(), "the 8 published 7×7 master key filters"
    return idealized_templates(method, kernel_size), (f"the 8 idealized models (method {method}) at "
                                                      f"{kernel_size}×{kernel_size}")


@dataclass(frozen=True)
class PublishedAssignment(Result):
    """Each filter assigned to the nearest master key by the authors' affine rule (B.6), counted per layer/stage.

    Attributes:
        templates: which 8 reference filters were used.
        counts: (8,) filters per master key 1..8 (constant filters are not counted).
        mean_abs_cosine: (8,) mean |cos(y - ȳ, x_k)| of the filters assigned to each key (NaN when none).
        median_abs_cosine: median over the shaped filters of their best |cos(y - ȳ, x_k)| (to the key they are
            assigned to): one number for how close a bank is to the 8 keys (random filters: low).
        layers: layer names, rows of ``counts_per_layer``.
        counts_per_layer: (L, 8).
        stages: stage labels, rows of ``counts_per_stage``.
        counts_per_stage: (S, 8).
        n_constant: constant filters left out.
        fit: the per-filter fit (assignment, amplitude a, offset b, cosine); not serialised.
    """

    templates: str
    counts: np.ndarray
    mean_abs_cosine: np.ndarray
    median_abs_cosine: float
    layers: tuple[str, ...]
    counts_per_layer: np.ndarray
    stages: tuple[str, ...]
    counts_per_stage: np.ndarray
    n_constant: int
    fit: AffineTemplateFit

    _private_fields = ("fit",)

    _figures: ClassVar[dict[str, str]] = {
        "stages": "fl_core.masterkeys.plots:stage_counts_figure",
        "layers": "fl_core.masterkeys.plots:layer_counts_figure",
    }

    def to_frame(self) -> pd.DataFrame:
        """Counts per layer: one row per layer, columns ``key_1`` … ``key_8``."""
        frame = pd.DataFrame(self.counts_per_layer, columns=[f"key_{i + 1}" for i in range(N_MASTER_KEYS)])
        return frame.assign(layer=list(self.layers))[["layer", *frame.columns]]

    def stage_frame(self) -> pd.DataFrame:
        """Counts per stage: one row per stage."""
        frame = pd.DataFrame(self.counts_per_stage, columns=[f"key_{i + 1}" for i in range(N_MASTER_KEYS)])
        return frame.assign(stage=list(self.stages))[["stage", *frame.columns]]


def assign_to_master_keys(filters: torch.Tensor | np.ndarray, layer_index: np.ndarray,
                          layers: Sequence[DepthwiseLayer], method: FitMethod = "B") -> PublishedAssignment:
    """Assign each filter to one of the 8 master keys (module docstring) and count per layer and stage."""
    filters = np.asarray(filters, dtype=np.float64)
    templates, description = master_key_templates(filters.shape[-1], method)
    fit = affine_fit_to_templates(filters, templates)
    shaped = ~constant_filters(torch.from_numpy(filters)).numpy()
    per_layer = np.zeros((len(layers), N_MASTER_KEYS), dtype=int)
    np.add.at(per_layer, (layer_index[shaped], fit.assignment[shaped]), 1)
    stage_ids = sorted({lay.stage for lay in layers})
    labels = {lay.stage: lay.stage_label for lay in layers}
    per_stage = np.stack([per_layer[[lay.stage == s for lay in layers]].sum(axis=0) for s in stage_ids])
    counts = per_layer.sum(axis=0)
    cos_sums = np.bincount(fit.assignment[shaped], weights=np.abs(fit.cosine[shaped]), minlength=N_MASTER_KEYS)
    mean_cos = np.divide(cos_sums, counts, out=np.full(N_MASTER_KEYS, np.nan), where=counts > 0)
    best = np.abs(fit.cosine[shaped])
    return PublishedAssignment(templates=description, counts=counts, mean_abs_cosine=mean_cos,
                               median_abs_cosine=float(np.median(best)) if best.size else float("nan"),
                               layers=tuple(lay.name for lay in layers), counts_per_layer=per_layer,
                               stages=tuple(labels[s] for s in stage_ids), counts_per_stage=per_stage,
                               n_constant=int((~shaped).sum()), fit=fit)


def type_representatives(filters: torch.Tensor | np.ndarray, fit: AffineTemplateFit) -> dict[int, np.ndarray]:
    """Per master key (1..8) with members: the normalised mean of sign(a)·(y - ȳ)/‖y - ȳ‖ over its filters.

    These are a model's own "master keys" in the orientation of the templates, comparable to the published
    filters (which are zero-mean as well).
    """
    units = centred_unit_vectors(torch.as_tensor(filters, dtype=torch.float64)).numpy()
    shaped = np.linalg.norm(units, axis=1) > 0
    signs = np.where(fit.amplitude < 0, -1.0, 1.0)[shaped]
    sums = np.zeros((N_MASTER_KEYS, units.shape[1]))
    np.add.at(sums, fit.assignment[shaped], units[shaped] * signs[:, None])
    size = np.shape(filters)[-1]
    norms = np.linalg.norm(sums, axis=1)
    return {i + 1: (sums[i] / norms[i]).reshape(size, size) for i in range(N_MASTER_KEYS) if norms[i] > 0}


def bank_assignment(source: LoadedModel | DepthwiseBank, method: FitMethod = "B", *, kernel_size: int | None = None,
                    layers: Sequence[str] | None = None, stages: Sequence[int] | None = None) -> PublishedAssignment:
    """:func:`assign_to_master_keys` of a model's depthwise filters of one kernel size (default: the most frequent),
    without clustering them."""
    bank = source if isinstance(source, DepthwiseBank) else depthwise_bank(source)
    chosen = bank.select(kernel_size, layers, stages)
    filters, layer_index = bank.filters(chosen)
    return assign_to_master_keys(filters, layer_index, chosen, method)


def assignment_summary_frame(assignments: Mapping[str, PublishedAssignment]) -> pd.DataFrame:
    """One row per bank (by label): filters assigned, median best |cos| to the 8 keys, and the count per key."""
    return pd.DataFrame([{"bank": label, "filters": int(a.counts.sum()), "median_abs_cosine": a.median_abs_cosine,
                          **{f"key_{i + 1}": int(n) for i, n in enumerate(a.counts)}}
                         for label, a in assignments.items()])


def model_master_keys(source: LoadedModel | DepthwiseBank, method: FitMethod = "B", *,
                      kernel_size: int | None = None, layers: Sequence[str] | None = None,
                      stages: Sequence[int] | None = None) -> dict[int, np.ndarray]:
    """A model's own master keys: key (1..8) -> the per-key mean filter (:func:`type_representatives`) of its
    depthwise filters of one kernel size, assigned as in :func:`assign_to_master_keys`."""
    bank = source if isinstance(source, DepthwiseBank) else depthwise_bank(source)
    filters, _ = bank.filters(bank.select(kernel_size, layers, stages))
    return type_representatives(filters, bank_assignment(bank, method, kernel_size=kernel_size, layers=layers,
                                                         stages=stages).fit)


def fit_model_master_keys(source: LoadedModel | DepthwiseBank, method: FitMethod = "B", *,
                          kernel_size: int | None = None, layers: Sequence[str] | None = None,
                          stages: Sequence[int] | None = None, device: str | torch.device | None = None,
                          progress: Progress | None = None) -> ScaleSpaceResult:
    """σ (and α) of each master key *in a model*: the method's fit to its per-key mean filter
    (:func:`model_master_keys`); keys whose mean filter has no response to its normalising monomial (B.3) are
    left out.

    ``device`` is accepted for the family's call shape; the assignment and the grid searches run in NumPy.
    """
    bank = source if isinstance(source, DepthwiseBank) else depthwise_bank(source)
    report(progress, 0.0, "per-key mean filters")
    keys = model_master_keys(bank, method, kernel_size=kernel_size, layers=layers, stages=stages)
    fittable = {}
    for index, representative in keys.items():
        with contextlib.suppress(AnalysisError):
            normalize_learned_filter(representative, index)
            fittable[index] = representative
    size = next(iter(keys.values())).shape[-1]
    count = sum(lay.n_filters for lay in bank.select(kernel_size, layers, stages))
    report(progress, 0.2, f"fitting {len(fittable)} keys by method {method}")
    result = fit_filters(fittable, method, f"per-key mean filters of {bank.label} ({count:,} {size}×{size} "
                                           f"filters, keys {', '.join(map(str, fittable))})", bank.label, bank.spec)
    report(progress, 1.0, "scale-space fits done")
    return result


def analyze_scale_space(model: ModelLike | DepthwiseBank | None = None, data: ImagesLike | None = None,
                        settings: ScaleSpaceSettings | None = None, *, device: DeviceLike = None,
                        progress: ProgressLike = None,
                        **setting_overrides: Unpack[ScaleSpaceOverrides]) -> ScaleSpaceResult:
    """σ (and α) of the idealized model of each master key: of the 8 published filters (no ``model``), or of a
    model's per-key mean filters (:func:`fit_model_master_keys`).

    Args:
        model: none (the published filters), a model (spec string, :class:`LoadedModel` or ``nn.Module``) or its
            :class:`~fl_core.masterkeys.depthwise.DepthwiseBank`.
        data: not used: the filters are the data (images given as every family takes them are ignored
            with a notice, so one loop can pass the same data to every family).
        settings: the fitting method and, for a model, which filters; ``setting_overrides`` replace fields
            (``method="D1"``).
        **setting_overrides: fields of ``settings`` to replace, by name.
        device: as every analysis takes it (the grid searches run in NumPy).
        progress: ``progress(fraction, message)``.
    """
    weights_only_data(data, "analyze_scale_space")
    s = as_settings(ScaleSpaceSettings, settings, setting_overrides)
    device, progress = resolve_device(device), progress_callback(progress)
    if model is None:
        result = fit_published_filters(s.method)
        report(progress, 1.0, "scale-space fits done")
        return result
    source = model if isinstance(model, DepthwiseBank) else as_model(model, progress=progress)
    return fit_model_master_keys(source, s.method, kernel_size=s.kernel_size, layers=s.layers, stages=s.stages,
                                 device=device, progress=progress)

"""Cached wrappers for the Master Keys, Scale-Space Models and Swap & Re-score pages.

Depthwise banks are cached per model with ``st.cache_resource`` (read-only, like the models); analyses are memoized
by their arguments (:func:`fl_ui.memo.memoize`), so the pages can draw progress bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import streamlit as st

from fl_core.compute.progress import Progress
from fl_core.errors import FilterLensError
from fl_core.io.demos import demo_manifest
from fl_core.io.images import BUNDLED
from fl_core.masterkeys.assignment import (
    PublishedAssignment,
    bank_assignment,
    fit_model_master_keys,
    model_master_keys,
)
from fl_core.masterkeys.clustering import MasterKeyResult, analyze_master_keys
from fl_core.masterkeys.depthwise import DepthwiseBank, depthwise_bank
from fl_core.masterkeys.fitting import ScaleSpaceResult, fit_published_filters
from fl_core.masterkeys.settings import (
    DEFAULT_BATCH_SIZE,
    FIT_METHODS,
    LayerSweepSettings,
    MasterKeySettings,
    RescoreSettings,
)
from fl_core.masterkeys.swap import FilterSwap, swap_filters
from fl_ui import jobs
from fl_ui.cache import get_model
from fl_ui.memo import memoize, pooled
from fl_ui.messages import literal
from fl_ui.state import Selection

DEFAULT_DEPTHWISE_SPEC = "demo:ppocrv6_det_small_dw7"
"""Offline default: real trained 7×7 depthwise filters, weights only — the 384 of PP-OCRv6 det small, PaddleOCR's
text detector (scripts/make_depthwise_bank.py); a text detector, not an ImageNet classifier."""
BASELINE_DEPTHWISE_SPEC = "timm:convnext_atto"
"""The baseline shown beside it: a ConvNeXt (7×7 depthwise filters) at random init."""
OFFLINE_DEPTHWISE_SPECS = (DEFAULT_DEPTHWISE_SPEC, BASELINE_DEPTHWISE_SPEC)
DEFAULT_SWAP_SPEC = "demo:mobilenet_v2"
"""Offline default for swapping: the real ImageNet MobileNetV2 that ships as a demo (17 depthwise 3×3 layers)."""
DEFAULT_REPLACEMENTS = ("B", "centroid", "random")
"""The swaps Swap & Re-score scores before any choice: the idealized models, the own centroids and the baseline."""
RESCORE_IMAGES, RESCORE_K, RESCORE_SEED = 500, 8, 0
"""Swap & Re-score's image count (at most), clusters of the centroid swap and seed before any choice."""


@st.cache_resource(show_spinner=False, max_entries=16)
def _cached_bank(spec: str, overrides: tuple, sha256: str | None) -> DepthwiseBank:
    return depthwise_bank(get_model(spec, overrides))


def get_bank(spec: str, overrides: tuple = ()) -> DepthwiseBank:
    """The depthwise filters of a model (shared, read-only; re-extracted when its weight file changes)."""
    return _cached_bank(spec, overrides, get_model(spec, overrides).sha256)


def depthwise_specs(selection: Selection, full_models_only: bool = False,
                    defaults: Sequence[str] = OFFLINE_DEPTHWISE_SPECS) -> list[str]:
    """Selected models that have depthwise filters (full models only, if asked), then the offline ``defaults``."""
    found = []
    for spec in selection.specs:
        try:
            loaded = get_model(spec, selection.overrides_of(spec))
            if full_models_only and loaded.weights_only:
                continue
            get_bank(spec, selection.overrides_of(spec))
        except FilterLensError:
            continue
        found.append(spec)
    return list(dict.fromkeys([*found, *defaults]))


def unswappable_reason(spec: str, overrides: tuple = ()) -> str:
    """Why Swap & Re-score cannot take a sidebar model (it is weights-only, has no depthwise filters, or does not
    load), in Markdown for the page (the model's name and any error shown literally: :func:`fl_ui.messages.literal`)."""
    below = "Below: the network that ships with FilterLens."
    try:
        loaded = get_model(spec, overrides)
        name = literal(loaded.label)
        if loaded.weights_only:
            return (f"**{name}**: re-scoring runs the network, and this file holds only its weights. "
                    f"{literal(loaded.runnable_advice())} {below}")
        if not any(layer.kind == "depthwise" for layer in loaded.conv_layers):
            return (f"**{name} has no depthwise convolutions** (groups = channels), and Swap & Re-score replaces "
                    "depthwise filters by their idealized models: there is nothing to swap in it (its channels open "
                    f"on Channel Axes). {below}")
        get_bank(spec, overrides)
    except FilterLensError as err:
        return f"{literal(err)} {below}"
    return f"{name} cannot be swapped here. {below}"


def comparison_specs(spec: str, kernel_size: int, overrides: tuple = ()) -> list[str]:
    """``spec`` and the offline real bank and random-init baseline, those of them with k×k depthwise filters."""
    chosen = dict.fromkeys([spec, *OFFLINE_DEPTHWISE_SPECS])
    return [s for s in chosen if kernel_size in get_bank(s, overrides if s == spec else ()).kernel_sizes]


def bank_description(spec: str) -> str | None:
    """What a demo bank is (its manifest description), for the page's caption."""
    entry = demo_manifest().get(spec.removeprefix("demo:")) if spec.startswith("demo:") else None
    return entry.description if entry else None


@memoize(max_entries=16)
def master_key_result(spec: str, overrides: tuple, settings: MasterKeySettings, device: str,
                      progress: Progress | None = None) -> MasterKeyResult:
    """:func:`fl_core.masterkeys.clustering.analyze_master_keys` of one model."""
    return analyze_master_keys(get_bank(spec, overrides), settings=settings, device=device, progress=progress)


@memoize(max_entries=16)
def published_assignment(spec: str, overrides: tuple, kernel_size: int) -> PublishedAssignment:
    """:func:`fl_core.masterkeys.assignment.bank_assignment` of one model's k×k filters (no clustering)."""
    return bank_assignment(get_bank(spec, overrides), kernel_size=kernel_size)


@memoize(max_entries=16)
def model_scale_fit(spec: str, overrides: tuple, method: str, progress: Progress | None = None) -> ScaleSpaceResult:
    """:func:`fl_core.masterkeys.assignment.fit_model_master_keys` of one model (its most frequent kernel size)."""
    return fit_model_master_keys(get_bank(spec, overrides), method, progress=progress)


@memoize(max_entries=8)
def published_scale_fit(method: str) -> ScaleSpaceResult:
    """:func:`fl_core.masterkeys.fitting.fit_published_filters` once per server for every session (its grid search is
    Python work that holds the GIL: sessions opening the page together wait for one fit instead of each running it)."""
    return fit_published_filters(method)


@memoize(max_entries=16)
def model_keys(spec: str, overrides: tuple, method: str) -> dict[int, np.ndarray]:
    """:func:`fl_core.masterkeys.assignment.model_master_keys` of one model (its most frequent kernel size)."""
    return model_master_keys(get_bank(spec, overrides), method)


def warm_default_results() -> None:
    """Compute what the depthwise pages show on first open into the caches: the real bank's and the published
    filters' scale-space fits by every method with the bank's keys, and the published-key assignments of the bank and
    of its random-init baseline. A shared server (:mod:`fl_ui.serve`) does this before it listens (about a second), so
    its first visitors find them ready instead of running the GIL-holding grid searches in page threads."""
    for method in FIT_METHODS:
        published_scale_fit(method)
        model_scale_fit(DEFAULT_DEPTHWISE_SPEC, (), method)
        model_keys(DEFAULT_DEPTHWISE_SPEC, (), method)
    kernel = next(iter(get_bank(DEFAULT_DEPTHWISE_SPEC).kernel_sizes))
    for spec in OFFLINE_DEPTHWISE_SPECS:
        published_assignment(spec, (), kernel)


@memoize(max_entries=32)
def filter_swap(spec: str, overrides: tuple, replacement: str, stages: tuple[int, ...] | None, k: int, seed: int,
                device: str) -> FilterSwap:
    """:func:`fl_core.masterkeys.swap.swap_filters` of one model."""
    return swap_filters(get_bank(spec, overrides), replacement, stages=stages, k=k, seed=seed, device=device)


rescore_result = pooled(jobs.rescore_job, max_entries=16)
"""The original and the chosen swaps re-scored, recovered first if asked (:func:`fl_ui.jobs.rescore_job`), on
the engine."""

def default_rescore_request(spec: str = DEFAULT_SWAP_SPEC, images: str = BUNDLED,
                           device: str = "auto") -> jobs.ScoringRequest:
    """The request of :data:`rescore_result` that Swap & Re-score makes before any choice: every stage of the
    model's depthwise layers, :data:`DEFAULT_REPLACEMENTS`, no recovery."""
    return jobs.ScoringRequest(spec, (), images, RESCORE_IMAGES, RescoreSettings(
        replacements=DEFAULT_REPLACEMENTS, stages=tuple(get_bank(spec).stages), k=RESCORE_K, seed=RESCORE_SEED,
        batch_size=DEFAULT_BATCH_SIZE), device)


def warm_default_rescore() -> None:
    """Swap & Re-score's default view computed into the caches: the default swaps' filters in this process (the
    centroid swap clusters every depthwise filter: on a first visit the page stood grey for more than 10 s), then on
    the engine the re-score of :func:`default_rescore_request` and the sweep of every depthwise layer by method B
    (:data:`layer_sweep_result`)."""
    request = default_rescore_request()
    scoring = request.settings
    for replacement in scoring.replacements:
        for spec, stages in ((request.spec, scoring.stages), (DEFAULT_DEPTHWISE_SPEC, None)):  # and the real bank's
            filter_swap(spec, (), replacement, stages, scoring.k, scoring.seed, request.device)
    rescore_result(request)
    layer_sweep_result(replace(request, settings=LayerSweepSettings(
        replacement="B", stages=scoring.stages, k=scoring.k, seed=scoring.seed, batch_size=scoring.batch_size)))


layer_sweep_result = pooled(jobs.layer_sweep_job, max_entries=8)
"""Each depthwise layer swapped alone and zeroed alone (:func:`fl_ui.jobs.layer_sweep_job`), on the engine."""

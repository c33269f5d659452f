"""The pages' cached models, images and results.

Models are cached in :data:`MODELS` (shared across sessions and threads, never mutated: analyses that
change weights work on ``LoadedModel.copy_model()``, hooks go on ``LoadedModel.forward_copy()``). Results are
memoized by :func:`fl_ui.memo.memoize` (computed in the session's thread) or :func:`fl_ui.memo.pooled` (heavy:
computed by a worker of the engine), keyed by the selection. Results are frozen dataclasses shared between sessions:
pages only read them.
"""

from __future__ import annotations

import functools
import threading

import streamlit as st

from fl_core.compute.budgets import analysis_budget, patch_work
from fl_core.compute.progress import Progress
from fl_core.errors import FilterLensError
from fl_core.extras import require_extra
from fl_core.firstlayer.energy import EnergyResult, patch_geometry
from fl_core.firstlayer.plots import MAPS_SHOWN
from fl_core.firstlayer.settings import EnergySettings, WhiteningSettings
from fl_core.firstlayer.whitening import ActivationMaps, WhiteningResult, activation_maps
from fl_core.io.images import BUNDLED_PHOTOS, ImageSet, open_images
from fl_core.io.layers import find_layer
from fl_core.io.models import LoadedModel
from fl_core.io.paths import check_readable
from fl_core.io.sources import is_bundled, source_path
from fl_core.io.specs import ModelSpec, spec_file_stamp
from fl_ui import jobs
from fl_ui.engine import heavy_engine
from fl_ui.memo import memoize, pooled
from fl_ui.model_cache import ModelCache, load_spec
from fl_ui.uploads import upload_store


@st.cache_resource(show_spinner=False)
def start_engine() -> None:
    """Start (or connect to) the engine once per server, in the background (the first page does not wait); without
    the engine installed, one line says which extra to install."""
    require_extra("app", "The dashboard")
    threading.Thread(target=heavy_engine, name="filterlens-engine", daemon=True).start()


def load_verified(spec: str, overrides: tuple, stamp: str) -> LoadedModel:
    """:func:`fl_ui.model_cache.load_spec`, an upload refused when its content is not its address
    (:meth:`fl_ui.uploads.UploadStore.check_checkpoint`: a file changed on the server is never served)."""
    loaded = load_spec(spec, overrides, stamp)
    if path := ModelSpec.parse(spec).path:
        upload_store().check_checkpoint(path, loaded.sha256)
    return loaded


MODELS = ModelCache(load=load_verified)
"""The app's loaded models by spec, overrides and file stamp (:class:`fl_ui.model_cache.ModelCache`: bounded in bytes,
released when unused), uploads verified as they load (:func:`load_verified`)."""


def get_model(spec: str, overrides: tuple = ()) -> LoadedModel:
    """The loaded model for a spec (shared, read-only); its file only where this session's path policy lets it read
    (asked before the cache: :func:`fl_core.io.models.spec_file_stamp`)."""
    return MODELS.get(spec, overrides, spec_file_stamp(spec))


@st.cache_resource(show_spinner=False, max_entries=8)
def _cached_images(source: str, limit: int | None) -> ImageSet:
    images = open_images(source, limit)
    images.description = upload_store().shareable(images.description)
    return images


def get_images(source: str, limit: int | None = None) -> ImageSet:
    """An image source (bundled photos, a folder, a CIFAR folder), listed once per server; a folder only where this
    session's path policy lets it read (:func:`fl_core.io.paths.check_readable` of
    :func:`~fl_core.io.sources.source_path`, asked before the cache); an upload only while it is what was stored
    (:meth:`fl_ui.uploads.UploadStore.check_images`), and described as such, not by the server's folder
    (:meth:`fl_ui.uploads.UploadStore.shareable`)."""
    if path := source_path(source):
        check_readable(path)
        upload_store().check_images(path)
    return _cached_images(source, limit)


IN_THREAD_WORK = 1e9
"""Multiply-adds of patch statistics a page may compute in the server's own thread (about a second on 2 cores)."""


def is_heavy(models: jobs.ModelKeys, images: str, layer: str | None = None) -> bool:
    """Patch statistics run on the engine (their memory returned when the job ends) for a folder (up to a whole ImageNet
    split), or when the models' layers cost the bundled photos more than :data:`IN_THREAD_WORK`
    (:func:`fl_core.compute.budgets.patch_work` of :func:`fl_core.firstlayer.energy.patch_geometry`: a 7×7 first layer
    already does). A model or layer that cannot be found, or whose work is over the analysis budget, is left to the
    in-thread call, which refuses it at once."""
    if not is_bundled(images):
        return True
    try:
        layers = [(get_model(*key), find_layer(get_model(*key), layer)) for key in models]
    except FilterLensError:
        return False
    per_image = sum(patch_work(*geometry[:3], samples=geometry[3]) for geometry in
                    (patch_geometry(loaded, lay) for loaded, lay in layers))
    return per_image * len(BUNDLED_PHOTOS) > IN_THREAD_WORK and per_image <= analysis_budget().work


_energy_here = memoize(max_entries=32)(functools.partial(jobs.energy_job, load=get_model))
_whitening_here = memoize(max_entries=32)(functools.partial(jobs.whitening_job, load=get_model))
_energy_in_worker = pooled(jobs.energy_job, max_entries=32)
_whitening_in_worker = pooled(jobs.whitening_job, max_entries=32)


def energy_result(models: jobs.ModelKeys, images: str, settings: EnergySettings, subtract_init: bool, device: str,
                  progress: Progress | None = None) -> EnergyResult:
    """:func:`fl_core.firstlayer.energy.analyze_energy` for ``(spec, overrides)`` pairs (:func:`is_heavy`: on the
    engine)."""
    compute = _energy_in_worker if is_heavy(models, images, settings.layer) else _energy_here
    return compute(jobs.EnergyRequest(models, images, settings, subtract_init, device), progress=progress)


def whitening_result(models: jobs.ModelKeys, images: str, settings: WhiteningSettings, device: str,
                     progress: Progress | None = None) -> WhiteningResult:
    """:func:`fl_core.firstlayer.whitening.analyze_whitening` for ``(spec, overrides)`` pairs (:func:`is_heavy`: on
    the engine)."""
    compute = _whitening_in_worker if is_heavy(models, images) else _whitening_here
    return compute(jobs.WhiteningRequest(models, images, settings, device), progress=progress)


@memoize(max_entries=16)
def activation_maps_of(spec: str, overrides: tuple, images: str, name: str) -> ActivationMaps:
    """:func:`fl_core.firstlayer.whitening.activation_maps` of the image ``name`` of an image source."""
    source = get_images(images)
    return activation_maps(get_model(spec, overrides), source.image(source.names.index(name)), name, MAPS_SHOWN)

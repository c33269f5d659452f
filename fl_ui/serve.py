"""Serve the dashboard warm: ``streamlit run app.py`` from a clone, ``python -m fl_ui.serve [streamlit options]`` (the
Docker image's command) and ``filterlens app`` all serve :data:`fl_ui.asgi.app`, the dashboard with :func:`warm_start`
and its health check (:func:`routes`), configured by the package's own ``.streamlit/config.toml``
(:data:`SERVER_CONFIG`) wherever they start.

A plain Streamlit server imports torch, torchvision, timm and the analyses when the first visitor's script runs, in
a thread of the server: that import holds the GIL for seconds (loading torch's shared libraries), and every other
request, the health check included, waits. Streamlit serves a script that defines ``app = st.App(main_script,
lifespan=...)`` with uvicorn and runs the lifespan before it answers any request, so here the imports are made
(:func:`preload`, a few seconds) *before* the server answers its first health check; it then answers within seconds
of its start and never stalls on an import afterwards. The warm-up runs while it already listens
(:data:`WARM_UP_STEPS`: the engine's workers, Home's first view, the depthwise pages' fits; a visitor who comes first
waits for the same computations), then, with ``--warm`` (:data:`WARM_WORKER_VIEWS_ENV`), the default views that run on
the engine's workers (Channel Axes' default layer, Swap & Re-score's default re-score: a minute or more on 2 cores):
a visitor who comes first follows that job's progress, and a visitor's own job never waits behind it (the engine
cancels a warm-up that holds the worker a visitor's job waits for: :meth:`fl_ui.engine.Engine.yield_warm_ups`).

Two health checks: Streamlit's ``/_stcore/health`` answers "ok" while the server runs; :data:`HEALTH_PATH` answers "ok"
only once the warm-up is done and while heavy jobs can run (:func:`fl_ui.engine.engine_problem`), and otherwise 503
with the reason. The Docker image's ``HEALTHCHECK`` asks the second, so a server whose engine cannot recover is
restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import os
import pkgutil
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

LOG = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
SERVED_APP = HERE / "asgi.py"
"""The file ``python -m fl_ui.serve`` has Streamlit run: it defines :data:`fl_ui.asgi.app` (as the root ``app.py``
does for ``streamlit run app.py``)."""
SERVER_CONFIG = HERE / ".streamlit" / "config.toml"
"""The shared-server configuration (local address, no error details, viewer toolbar, no file watcher, ...). Streamlit
reads the ``.streamlit/config.toml`` beside its main script (:data:`SERVED_APP`) over the user's and the working
folder's, so it applies wherever the server starts; ``STREAMLIT_*`` variables and ``--server.*`` options override it."""
UPLOAD_MB_ENV = "FL_MAX_UPLOAD_MB"
"""The largest browser upload in MB (Streamlit's ``server.maxUploadSize``); default the checkpoint limit."""
HEALTH_PATH = "/api/health"
"""The served app's readiness: "ok" once warm and while heavy jobs can run, else 503 and why (module docstring)."""

PRELOADED_PACKAGES = ("fl_core", "fl_ui")
"""Every module of these packages is imported before serving (they import torch, torchvision, timm, plotly)."""
SWITCH_INTERVAL_S = 0.001
"""How long a thread holding the GIL may keep it when another asks (CPython's default is 5 ms). The event loop that
answers every request, the health check included, needs the GIL many times per request while page scripts compute
in their threads; a shorter interval hands it back sooner, at a small cost in the scripts' throughput."""
WARM_WORKER_VIEWS_ENV = "FL_WARM_WORKER_VIEWS"
"""``1`` (the default of ``python -m fl_ui.serve``, the Docker image's command): compute the heavy pages' first views
(:func:`warm_worker_views`) on the engine once the server listens; ``0`` (``filterlens app``'s default, ``--no-warm``)
leaves them to their first visitor: on a laptop, or on app replicas that share a cluster's workers, where each replica
would otherwise run the same jobs for its own cache."""


def import_packages() -> None:
    """Import every module of :data:`PRELOADED_PACKAGES`."""
    for package in PRELOADED_PACKAGES:
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if module.name not in ("fl_core.__main__", "fl_ui.dashboard", "fl_ui.asgi", __name__):  # scripts
                importlib.import_module(module.name)


def start_engine() -> None:
    """Start the embedded engine and wait until its workers have joined (or connect to ``FL_SCHEDULER``, whose
    workers may come and go: jobs wait for them in its queue)."""
    from fl_ui.engine import heavy_engine

    engine = heavy_engine()
    if engine.embedded:
        engine.wait_for_workers()


def decode_bundled_photos() -> None:
    """Decode the bundled photos once per process (in the first visitor's page thread, decoding them held the GIL)."""
    from fl_core.io.images import bundled_images

    photos = bundled_images()
    for index in range(len(photos)):
        photos.image(index)


def warm_depthwise_pages() -> None:
    """The depthwise pages' default results (:func:`fl_ui.masterkeys.warm_default_results`)."""
    from fl_ui.masterkeys import warm_default_results

    warm_default_results()


def warm_home() -> None:
    """Home's first view computed into the caches: the energy profiles and whitening of the sidebar's default
    models (a few seconds)."""
    from fl_core.firstlayer.settings import EnergySettings, WhiteningSettings
    from fl_ui.cache import energy_result, whitening_result
    from fl_ui.state import default_selection

    home = default_selection()
    energy_result(home.model_keys(), home.images, EnergySettings(), False, home.device)
    whitening_result(home.model_keys(), home.images, WhiteningSettings(), home.device)


def warm_worker_views() -> None:
    """The heavy pages' first views computed on the engine into the caches: Channel Axes' default layer (it also
    times the analysis, so later requests get an estimate) and Swap & Re-score's default re-score of the bundled
    photos. Each is one job that a visitor asking for it meanwhile follows. A warm-up that stops (the server shutting
    down, or a visitor's job needing its worker, cancels its job) or fails is logged in one line: the page computes
    its view when visited."""
    from fl_ui.channels import warm_default_result
    from fl_ui.masterkeys import warm_default_rescore

    for warm in (warm_default_result, warm_default_rescore):
        try:
            warm()
        except Exception as error:  # a background warm-up never takes the server down
            LOG.warning("%s did not finish: %s", warm.__name__, error)


WARM_UP_STEPS: tuple[Callable[[], None], ...] = (start_engine, decode_bundled_photos, warm_depthwise_pages,
                                                 warm_home)
"""What the server does once it listens, in order (add a step here to have something ready on first visit)."""
_WARM = threading.Event()
"""Set once :data:`WARM_UP_STEPS` have run."""


def preload() -> None:
    """Before the server listens: :func:`import_packages`, freeze what they created out of the garbage collector's
    generations (a full collection of it takes ~0.4 s, holding the GIL), and shorten the GIL switch interval
    (:data:`SWITCH_INTERVAL_S`)."""
    import_packages()
    gc.collect()
    gc.freeze()  # the ~0.5 M objects imported here are never scanned again by a full collection
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def warm_up() -> None:
    """Once the server listens: :data:`WARM_UP_STEPS`, then :func:`warm_worker_views` unless
    :data:`WARM_WORKER_VIEWS_ENV` is ``0``. A step that fails (the engine's scheduler unreachable) is logged and the
    server keeps serving: :data:`HEALTH_PATH` reports it while heavy jobs cannot run."""
    for step in WARM_UP_STEPS:
        try:
            step()
        except Exception:
            LOG.exception("the warm-up step %s failed", step.__name__)
    gc.collect()
    gc.freeze()
    _WARM.set()
    if os.environ.get(WARM_WORKER_VIEWS_ENV, "1") != "0":
        warm_worker_views()


def readiness() -> str | None:
    """Why this server cannot serve every page now (``None`` when it can): its warm-up runs, or its engine cannot
    run heavy jobs (:func:`fl_ui.engine.engine_problem`)."""
    if not _WARM.is_set():
        return "starting: the engine's workers and the pages' first views are being prepared"
    from fl_ui.engine import engine_problem

    return engine_problem()


async def health(_request: Any) -> Any:
    """:data:`HEALTH_PATH`: "ok", or 503 and the reason (:func:`readiness`; asks nothing of the scheduler)."""
    from starlette.responses import PlainTextResponse

    problem = readiness()
    return PlainTextResponse("ok" if problem is None else problem, status_code=200 if problem is None else 503)


def routes() -> list[Any]:
    """The served app's own routes beside Streamlit's: :data:`HEALTH_PATH`."""
    from starlette.routing import Route

    return [Route(HEALTH_PATH, health, methods=["GET", "HEAD"])]


@contextlib.asynccontextmanager
async def warm_start(_app: Any = None) -> AsyncIterator[None]:
    """The served app's lifespan: :func:`preload` (in a thread: Streamlit's runtime keeps its event loop) before the
    server answers any request, then :func:`warm_up` in the background."""
    await asyncio.to_thread(preload)
    threading.Thread(target=warm_up, name="filterlens-warm-up", daemon=True).start()
    yield


def max_upload_mb() -> int:
    """The largest browser upload in MB: :data:`UPLOAD_MB_ENV`, default the checkpoint limit (``FL_MAX_CHECKPOINT_MB``,
    :func:`fl_core.compute.budgets.max_checkpoint_mb`), so that any checkpoint the server would read can be uploaded."""
    from fl_core.compute.budgets import CHECKPOINT_VARIABLE, max_checkpoint_mb

    variable = UPLOAD_MB_ENV if os.environ.get(UPLOAD_MB_ENV) else CHECKPOINT_VARIABLE
    try:
        megabytes = int(float(os.environ[UPLOAD_MB_ENV])) if variable == UPLOAD_MB_ENV else int(max_checkpoint_mb())
    except ValueError:
        megabytes = 0
    if megabytes < 1:
        raise SystemExit(f"{variable}={os.environ[variable]!r}: give the largest upload as a number of MB, at least 1 "
                         f"(or unset it: {UPLOAD_MB_ENV} defaults to {CHECKPOINT_VARIABLE}, 1024).")
    return megabytes


def server_options() -> list[str]:
    """The Streamlit options every FilterLens server gets beside :data:`SERVER_CONFIG`: the upload limit."""
    return ["--server.maxUploadSize", str(max_upload_mb())]


def main(streamlit_args: Sequence[str] | None = None) -> int:
    """``streamlit run`` of :data:`SERVED_APP` with :func:`server_options` and ``streamlit_args`` (default: this
    command's own arguments; given later, they win), e.g. ``["--server.port", "8502"]``: the dashboard with
    :func:`warm_start`."""
    from streamlit.web import cli

    args = sys.argv[1:] if streamlit_args is None else list(streamlit_args)
    sys.argv = ["streamlit", "run", str(SERVED_APP), *server_options(), *args]
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())

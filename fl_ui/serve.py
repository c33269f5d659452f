"""Serve the dashboard warm: ``streamlit run app.py`` from a clone, ``python -m fl_ui.serve [streamlit options]`` (the
Docker image's command) and ``filterlens app`` all serve :data:`fl_ui.asgi.app`, the dashboard with :func:`warm_start`.

A plain Streamlit server imports torch, torchvision, timm and the analyses when the first visitor's script runs, in
a thread of the server: that import holds the GIL for seconds (loading torch's shared libraries), and every other
request, the health check included, waits. Streamlit serves a script that defines ``app = st.App(main_script,
lifespan=...)`` with uvicorn and runs the lifespan before it answers any request, so here the imports, the engine's
workers and Home's first view are made ready *before* the server answers its first health check, and it never stalls
afterwards. The default views that run on the engine's workers (Channel Axes' default layer, Swap & Re-score's default
re-score: a minute or more on 2 cores) are computed while the server already listens; a visitor who comes first
follows that job's progress, and a visitor's own job goes ahead of them in the queue (:class:`fl_ui.engine.Lane`).
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
SERVED_APP = Path(__file__).resolve().parent / "asgi.py"
"""The file ``python -m fl_ui.serve`` has Streamlit run: it defines :data:`fl_ui.asgi.app` (as the root ``app.py``
does for ``streamlit run app.py``)."""

PRELOADED_PACKAGES = ("fl_core", "fl_ui")
"""Every module of these packages is imported before serving (they import torch, torchvision, timm, plotly)."""
SWITCH_INTERVAL_S = 0.001
"""How long a thread holding the GIL may keep it when another asks (CPython's default is 5 ms). The event loop that
answers every request, the health check included, needs the GIL many times per request while page scripts compute
in their threads; a shorter interval hands it back sooner, at a small cost in the scripts' throughput."""
WARM_WORKER_VIEWS_ENV = "FL_WARM_WORKER_VIEWS"
"""``0``: leave the heavy pages' first views (:func:`warm_worker_views`) to their first visitor, e.g. on app replicas
that share a cluster's workers, where each replica would otherwise run the same jobs for its own cache."""


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
    down cancels its job) or fails is logged in one line: the page computes its view when visited."""
    from fl_ui.channels import warm_default_result
    from fl_ui.masterkeys import warm_default_rescore

    for warm in (warm_default_result, warm_default_rescore):
        try:
            warm()
        except Exception as error:  # a background warm-up never takes the server down
            LOG.warning("%s did not finish: %s", warm.__name__, error)


PRELOAD_STEPS: tuple[Callable[[], None], ...] = (import_packages, start_engine, decode_bundled_photos,
                                                 warm_depthwise_pages, warm_home)
"""What the server does before it listens, in order (add a step here to have something ready on first visit)."""


def preload() -> None:
    """Run :data:`PRELOAD_STEPS`; start :func:`warm_worker_views` in a background thread (the server listens
    meanwhile) unless :data:`WARM_WORKER_VIEWS_ENV` is ``0``; freeze what the steps created out of the garbage
    collector's generations (a full collection of it takes ~0.4 s, holding the GIL), and shorten the GIL switch
    interval (:data:`SWITCH_INTERVAL_S`)."""
    for step in PRELOAD_STEPS:
        step()
    if os.environ.get(WARM_WORKER_VIEWS_ENV, "1") != "0":
        threading.Thread(target=warm_worker_views, name="filterlens-warm", daemon=True).start()
    gc.collect()
    gc.freeze()  # the ~0.5 M objects imported here are never scanned again by a full collection
    sys.setswitchinterval(SWITCH_INTERVAL_S)


@contextlib.asynccontextmanager
async def warm_start(_app: Any = None) -> AsyncIterator[None]:
    """The served app's lifespan: :func:`preload` (in a thread: Streamlit's runtime keeps its event loop) before the
    server answers any request."""
    await asyncio.to_thread(preload)
    yield


def main(streamlit_args: Sequence[str] | None = None) -> int:
    """``streamlit run`` of :data:`SERVED_APP` with ``streamlit_args`` (default: this command's own arguments), e.g.
    ``["--server.port", "8502"]``: the dashboard with :func:`warm_start`."""
    from streamlit.web import cli

    args = sys.argv[1:] if streamlit_args is None else list(streamlit_args)
    sys.argv = ["streamlit", "run", str(SERVED_APP), *args]
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())

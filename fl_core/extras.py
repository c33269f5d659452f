"""The optional parts of an install: ``pip install filterlens`` is the library and the command line,
``filterlens[cluster]`` adds the Dask engine (``survey``), ``filterlens[app]`` the dashboard and the engine it runs
its heavy jobs on. A feature checks its extra before it imports it, so a missing one is one line saying what to
install, not a traceback."""

from __future__ import annotations

from importlib.util import find_spec

from fl_core.errors import MissingExtraError

EXTRAS = {"cluster": ("dask", "distributed"), "app": ("streamlit", "dask", "distributed")}
"""The modules each extra installs that its features import (``app`` also installs bokeh, which only a deployment's
Dask dashboard uses)."""


def require_extra(extra: str, feature: str) -> None:
    """Raise :class:`~fl_core.errors.MissingExtraError` naming ``pip install 'filterlens[extra]'`` when a module of
    ``extra`` is not installed (found without importing it)."""
    missing = [module for module in EXTRAS[extra] if find_spec(module) is None]
    if missing:
        raise MissingExtraError(f"{feature} needs {', '.join(missing)} (not installed): "
                                f"pip install 'filterlens[{extra}]'")

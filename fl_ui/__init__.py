"""Streamlit glue shared by the pages: sidebar selection, cached wrappers around fl_core, downloads, errors.

Pages stay thin: they read :func:`fl_ui.state.current_selection`, call the cached wrappers in
:mod:`fl_ui.cache`, and draw figures from :mod:`fl_core.figures` with :mod:`fl_ui.widgets`.
"""

from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent / "dashboard.py"
"""The dashboard's main script (Streamlit runs it for every visit; its pages are in ``views/`` beside it)."""

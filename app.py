"""FilterLens dashboard from a clone: ``streamlit run app.py``.

The dashboard is :data:`fl_ui.DASHBOARD` (its pages in ``fl_ui/views/``), inside the package so that an installed
wheel serves it too; this file runs it.
"""

import runpy

from fl_ui import DASHBOARD

runpy.run_path(str(DASHBOARD), run_name="__main__")

"""FilterLens dashboard from a clone: ``streamlit run app.py``.

The dashboard is :data:`fl_ui.DASHBOARD` (its pages in ``fl_ui/views/``), inside the package so that an installed
wheel serves it too. Streamlit finds ``app`` below and serves it warm: :func:`fl_ui.serve.warm_start` loads torch and
the analyses before the server answers, then starts the engine's workers and computes the pages' first views (the same
start as ``python -m fl_ui.serve``, :mod:`fl_ui.asgi`; ``.streamlit/config.toml`` here links to the package's server
configuration).
"""

import streamlit as st
from starlette.middleware import Middleware

from fl_ui import DASHBOARD
from fl_ui.serve import routes, warm_start
from fl_ui.sessions import BrowserCookie

app = st.App(DASHBOARD, lifespan=warm_start, routes=routes(), middleware=[Middleware(BrowserCookie)])

"""FilterLens dashboard from a clone: ``streamlit run app.py``.

The dashboard is :data:`fl_ui.DASHBOARD` (its pages in ``fl_ui/views/``), inside the package so that an installed
wheel serves it too. Streamlit finds ``app`` below and serves it warm: :func:`fl_ui.serve.warm_start` loads torch, the
analyses and the engine's workers before the server answers, then computes the heavy pages' first views (the same
start as ``python -m fl_ui.serve``, :mod:`fl_ui.asgi`).
"""

import streamlit as st
from starlette.middleware import Middleware

from fl_ui import DASHBOARD
from fl_ui.serve import warm_start
from fl_ui.sessions import BrowserCookie

app = st.App(DASHBOARD, lifespan=warm_start, middleware=[Middleware(BrowserCookie)])

"""The dashboard served warm (``python -m fl_ui.serve`` has Streamlit run this file; the root ``app.py`` says the same
for ``streamlit run app.py``): Streamlit finds ``app`` here, serves :data:`fl_ui.DASHBOARD` with uvicorn, runs
:func:`fl_ui.serve.warm_start` before it answers any request and answers its health check
(:data:`fl_ui.serve.HEALTH_PATH`); the ``.streamlit/config.toml`` beside this file configures the server."""

import streamlit as st
from starlette.middleware import Middleware

from fl_ui import DASHBOARD
from fl_ui.serve import routes, warm_start
from fl_ui.sessions import BrowserCookie

app = st.App(DASHBOARD, lifespan=warm_start, routes=routes(), middleware=[Middleware(BrowserCookie)])

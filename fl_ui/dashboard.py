"""The dashboard's main script, the one Streamlit runs for every visit (``streamlit run app.py`` runs it from a
clone): navigation over the pages in ``views/`` beside it, and the shared sidebar.

The page list is data (:data:`PAGES`, paths relative to this package); the shared sidebar (models, preprocessing,
images, device) is drawn here once per run and its selection stored in the session and the URL; both run under this
session's path policy (:func:`fl_ui.paths.users_paths`). It ships inside the package, so an installed wheel serves
the same dashboard.
"""

from __future__ import annotations

import logging
from pathlib import Path

import streamlit as st

from fl_ui.cache import MODELS, start_engine
from fl_ui.memory import release_closed_sessions, start_janitor
from fl_ui.paths import users_paths
from fl_ui.sidebar import render_sidebar
from fl_ui.state import url_notices_above

HERE = Path(__file__).resolve().parent
PAGES = (
    ("views/home.py", "Home", "🏠", ""),  # the default page is served at the root URL
    ("views/energy_profiles.py", "Energy Profiles", "📈", "energy"),
    ("views/whitening.py", "Whitening", "🌊", "whitening"),
    ("views/channel_axes.py", "Channel Axes", "🧭", "channel-axes"),
    ("views/training_lab.py", "Training Lab", "🧪", "training-lab"),
    ("views/master_keys.py", "Master Keys", "🗝️", "master-keys"),
    ("views/scale_space.py", "Scale-Space Models", "📐", "scale-space"),
    ("views/swap_rescore.py", "Swap & Re-score", "🔁", "swap-rescore"),
    ("views/report.py", "Report", "📄", "report"),
    ("views/survey.py", "Survey", "🗂️", "survey"),
    ("views/saved_results.py", "Saved results", "💾", "results"),
)

# Streamlit leaves 6 rem above every page's title; 3.5 rem still clears the header's menu and Running / Stop, and on a
# 1024×768 projector the 40 px gained bring the first figure (or a running job's status) into the first screen.
PAGE_STYLE = "<style>[data-testid='stMainBlockContainer'] { padding-top: 3.5rem; }</style>"

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
st.set_page_config(page_title="FilterLens", page_icon="🔍", layout="wide")
navigation = st.navigation([st.Page(HERE / path, title=title, icon=icon, url_path=url, default=i == 0)
                            for i, (path, title, icon, url) in enumerate(PAGES)])
st.html(PAGE_STYLE)
start_engine()
start_janitor(MODELS.release_idle, release_closed_sessions)
with users_paths():
    render_sidebar()
    with url_notices_above():
        navigation.run()

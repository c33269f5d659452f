"""This server's path policy for its users (:mod:`fl_core.io.paths`).

With ``FL_DATA_ROOTS`` set, users read files only under those folders, the entries of the upload folder, their own
Training Lab runs and the folder of saved results the admin named (``FL_RESULTS_DIR``); without it, any path on a
local server, and nothing but those on a shared one (fail closed: an admin who exposes the server without saying what
it shares shares nothing). The dashboard's main script (and the AppTest
harness) runs the sidebar and every page inside :func:`users_paths`, and so do the sidebar's callbacks (Streamlit
calls them before the script), so every file a session names is opened under it, in the server and, through the jobs
it submits, in the engine's workers.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from pathlib import Path

from streamlit import config

from fl_core.cli.app import RESULTS_DIR_ENV
from fl_core.io import ASSETS_DIR
from fl_core.io.paths import PathPolicy, data_roots, reading_for
from fl_ui.lab import my_runs_dir
from fl_ui.uploads import upload_store

LOCAL_ADDRESSES = ("localhost", "127.0.0.1", "::1")


def shared_address() -> str | None:
    """Where the server listens when others can reach it, else ``None`` (a local server).

    Local means Streamlit's ``server.address`` is localhost, 127.0.0.1 or ::1 (the package's
    ``fl_ui/.streamlit/config.toml`` sets 127.0.0.1); anything else, including unset (Streamlit then binds every
    interface), is shared.
    """
    address = str(config.get_option("server.address") or "").strip()
    return None if address in LOCAL_ADDRESSES else address or "every interface"


def server_policy() -> PathPolicy:
    """The policy of this session's paths (module docstring)."""
    roots, address = data_roots(), shared_address()
    if not roots and address is None:
        return PathPolicy()
    results = saved_results_folder()
    return PathPolicy(roots=roots, own=(ASSETS_DIR, my_runs_dir(), *([results] if results else [])),
                      stores=(upload_store().root,), listens_on=address or "")


def saved_results_folder() -> Path | None:
    """The folder of saved results the admin named (``FL_RESULTS_DIR``, ``filterlens app --results DIR``: the Saved
    results page), resolved, which every session may read; ``None`` when none is named."""
    folder = os.environ.get(RESULTS_DIR_ENV, "").strip()
    return Path(folder).resolve() if folder else None


def users_paths() -> AbstractContextManager[None]:
    """Open this session's paths under :func:`server_policy` inside."""
    return reading_for(server_policy())

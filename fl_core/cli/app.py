"""Start the dashboard (the pages of the installed package, fl_ui) and open it in a browser; the server runs
until you stop it (Ctrl+C). It needs the app extra: ``pip install "filterlens[app]"``.

Examples:
    filterlens app
    filterlens app --port 8600 --data-root /data/imagenet --data-root ~/checkpoints
    filterlens app --results runs/     # the .flr files saved there, on the Saved results page
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fl_core.errors import DataError
from fl_core.extras import require_extra
from fl_core.settings import bounded

STANDALONE = True
"""Not an analysis: no result to write; ``run`` returns the server's exit status."""
DATA_ROOTS_ENV = "FL_DATA_ROOTS"
"""The server folders the dashboard may read (``os.pathsep``-separated; fl_ui.sidebar reads it)."""
RESULTS_DIR_ENV = "FL_RESULTS_DIR"
"""The folder of saved results (``.flr``) the dashboard's Saved results page shows (fl_ui.savedresults reads it)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=bounded(int, 1, 65_535, "port"), default=None,
                        help="the port to serve on (default: Streamlit's, 8501, or the next free one)")
    parser.add_argument("--data-root", action="append", default=[], type=Path, metavar="DIR",
                        help=f"a server folder whose images and checkpoints the dashboard may open (repeatable; "
                             f"sets {DATA_ROOTS_ENV})")
    parser.add_argument("--results", type=Path, metavar="DIR",
                        help=f"a folder of saved results (result.save('name.flr')) the Saved results page lists and "
                             f"shows, subfolders included (sets {RESULTS_DIR_ENV})")


def streamlit_arguments(args: argparse.Namespace) -> list[str]:
    """The options ``streamlit run`` gets from the command line."""
    return [] if args.port is None else ["--server.port", str(args.port)]


def data_roots(folders: list[Path], option: str = "--data-root") -> str:
    """:data:`DATA_ROOTS_ENV` (or another folder option's variable) for ``folders``, each an existing folder
    (resolved)."""
    missing = [str(folder) for folder in folders if not folder.expanduser().is_dir()]
    if missing:
        raise DataError(f"{option} {', '.join(missing)}: no such folder. Give folders that exist on this machine.")
    return os.pathsep.join(str(folder.expanduser().resolve()) for folder in folders)


def run(args: argparse.Namespace, progress: object) -> int:
    from fl_core.environment import check_operators

    require_extra("app", "the dashboard")
    check_operators()
    if args.data_root:
        os.environ[DATA_ROOTS_ENV] = data_roots(args.data_root)
    if args.results:
        os.environ[RESULTS_DIR_ENV] = data_roots([args.results], "--results")
    from fl_ui.serve import main

    return main(streamlit_arguments(args))

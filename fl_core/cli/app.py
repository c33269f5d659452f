"""Start the dashboard (the pages of the installed package, fl_ui) and print its address; the server runs until you
stop it (Ctrl+C). It is the same server wherever it starts (its configuration ships with the package) and answers
this machine only unless told otherwise. It needs the app extra: ``pip install "filterlens[app]"``.

Examples:
    filterlens app
    filterlens app --port 8600 --data-root /data/imagenet --data-root ~/checkpoints
    filterlens app --address 0.0.0.0 --warm        # a lab's server: every interface, heavy first views ready
    filterlens app --results runs/                 # the .flr files saved there, on the Saved results page
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

from fl_core.errors import DataError
from fl_core.extras import require_extra
from fl_core.settings import bounded

STANDALONE = True
"""Not an analysis: no result to write; ``run`` returns the server's exit status."""
DATA_ROOTS_ENV = "FL_DATA_ROOTS"
"""The server folders the dashboard may read (``os.pathsep``-separated; fl_ui.sidebar reads it)."""
WARM_ENV = "FL_WARM_WORKER_VIEWS"
"""``--warm`` / ``--no-warm`` (:data:`fl_ui.serve.WARM_WORKER_VIEWS_ENV`; named here so that ``--help`` stays light)."""
LOOPBACK = "127.0.0.1"
RESULTS_DIR_ENV = "FL_RESULTS_DIR"
"""The folder of saved results (``.flr``) the dashboard's Saved results page shows (fl_ui.savedresults reads it)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=bounded(int, 1, 65_535, "port"), default=None,
                        help="the port to serve on (default: Streamlit's, 8501, or the next free one)")
    parser.add_argument("--address", default=LOOPBACK, metavar="ADDRESS",
                        help=f"the address to listen on (default: {LOOPBACK}, this machine only); 0.0.0.0 serves "
                             f"every interface, e.g. a lab's server, which then reads server folders only inside "
                             f"--data-root ({DATA_ROOTS_ENV})")
    parser.add_argument("--data-root", action="append", default=[], type=Path, metavar="DIR",
                        help=f"a server folder whose images and checkpoints the dashboard may open (repeatable; "
                             f"sets {DATA_ROOTS_ENV})")
    parser.add_argument("--warm", action=argparse.BooleanOptionalAction, default=False,
                        help="compute the heavy pages' first views (Channel Axes' default layer, Swap & Re-score's "
                             "default re-score: a few CPU-minutes) in the background once the server listens, so "
                             "their first visitors find them ready; a visitor's own job never waits behind them "
                             f"(default: --no-warm, each view computed when first visited; sets {WARM_ENV})")
    parser.add_argument("--results", type=Path, metavar="DIR",
                        help=f"a folder of saved results (result.save('name.flr')) the Saved results page lists and "
                             f"shows, subfolders included (sets {RESULTS_DIR_ENV})")


def streamlit_arguments(args: argparse.Namespace) -> list[str]:
    """The options ``streamlit run`` gets from the command line."""
    port = [] if args.port is None else ["--server.port", str(args.port)]
    return ["--server.address", args.address, *port]


def data_roots(folders: list[Path], option: str = "--data-root") -> str:
    """:data:`DATA_ROOTS_ENV` (or another folder option's variable) for ``folders``, each an existing folder
    (resolved)."""
    missing = [str(folder) for folder in folders if not folder.expanduser().is_dir()]
    if missing:
        raise DataError(f"{option} {', '.join(missing)}: no such folder. Give folders that exist on this machine.")
    return os.pathsep.join(str(folder.expanduser().resolve()) for folder in folders)


def reach(address: str) -> str | None:
    """What serving on ``address`` exposes, said before the server starts (``None`` for a loopback address)."""
    try:
        if ipaddress.ip_address(address).is_loopback:
            return None
    except ValueError:
        if address == "localhost":
            return None
    where = "every interface of this machine" if address in ("0.0.0.0", "::") else address
    roots = (f"server folders only inside {DATA_ROOTS_ENV}" if os.environ.get(DATA_ROOTS_ENV) else
             "no server folder (--data-root DIR allows one)")
    return (f"Serving on {where}: anyone who can reach this port can use the dashboard (put authentication in front: "
            f"docs/deploy.md). It opens {roots}; uploads work either way.")


def run(args: argparse.Namespace, progress: object) -> int:
    from fl_core.compute.environment import check_operators

    require_extra("app", "the dashboard")
    check_operators()
    if args.data_root:
        os.environ[DATA_ROOTS_ENV] = data_roots(args.data_root)
    os.environ[WARM_ENV] = "1" if args.warm else "0"
    if notice := reach(args.address):
        print(notice, file=sys.stderr)
    if args.results:
        os.environ[RESULTS_DIR_ENV] = data_roots([args.results], "--results")
    from fl_ui.serve import main

    return main(streamlit_arguments(args))

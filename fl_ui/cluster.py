"""The embedded engine: a Dask scheduler and worker processes on loopback, in a helper process of the server.

``python -m fl_ui.cluster --workers N --parent PID`` starts a ``LocalCluster``: the scheduler and N worker processes
(one thread each, supervised by nannies that restart them, preloaded with :mod:`fl_ui.worker`), prints the
scheduler's address as its only line of output, and closes the cluster when the process ``PID`` is gone or on
SIGTERM. It runs beside the server, not in it: worker processes are spawned, and a spawned child re-imports its
parent's ``__main__``, which in a Streamlit server is the app script of the last page run (here it is this module,
whose import does nothing); and the scheduler's event loop stays out of the server's GIL.

The scheduler, its workers and the server's client speak mutual TLS with credentials made for this one cluster when
the server starts (:func:`temporary_security`, handed to the helper on its standard input, never on a command line or
in a file): another user of the machine can neither connect to the scheduler nor run code in the workers through it.

A cluster of other machines is configured the same way (:data:`SCHEDULER_CONFIG` and
:data:`~fl_core.survey.engine.WORKER_PROCESS_CONFIG`, as ``DASK_...`` variables of the ``dask scheduler`` and
``dask worker`` processes; docs/deploy.md, "Scaling out").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fl_core.survey.engine import WORKER_PROCESS_CONFIG

if TYPE_CHECKING:
    from distributed.security import Security

PARENT_CHECK_S = 0.5
"""How often the helper checks that the server that started it is still there."""
SCHEDULER_CONFIG = {
    "distributed.scheduler.allowed-failures": 0,
    "distributed.scheduler.worker-saturation": 1.0,
}
"""The scheduler's settings: a job whose worker dies fails at once with a message (it is not run again on the next
worker, where it could kill that one too), and a worker thread runs one job while the others wait in the scheduler's
queue, in order."""
NANNY_CONFIG = {"distributed.deploy.lost-worker-timeout": "1 day"}
"""The helper's own setting: a worker that died stays in the cluster while its nanny starts a fresh one (Dask's default
gives up on it after 15 s, and a fresh worker takes longer to import torch and the analyses on a busy machine)."""
HTTP_CONFIG = {"distributed.scheduler.http.routes": ["distributed.http.health"]}
"""The embedded scheduler's HTTP server, which Dask always starts (its dashboard's port, 8787 unless told otherwise:
a second server on the machine warned "Port 8787 is already in use"), serves only its health check, on a free loopback
port: no dashboard, no pages listing the jobs. An external scheduler's dashboard is the operator's (docs/deploy.md)."""
WORKER_PRELOAD = "fl_ui.worker"
"""The module every worker imports at start (:func:`fl_ui.worker.dask_setup`)."""


def dask_environment(config: dict[str, object] = SCHEDULER_CONFIG) -> dict[str, str]:
    """The Dask settings as environment variables (``distributed.a.b-c`` → ``DASK_DISTRIBUTED__A__B_C``)."""
    return {"DASK_" + name.upper().replace(".", "__").replace("-", "_"): str(value) for name, value in config.items()}


TLS_FIELDS = ("tls_ca_file", "tls_client_cert", "tls_client_key", "tls_scheduler_cert", "tls_scheduler_key",
              "tls_worker_cert", "tls_worker_key")
"""The parts of a :class:`distributed.security.Security` that the helper is handed (certificates and keys as PEM
text)."""


def temporary_security() -> Security:
    """Credentials for one embedded cluster, made now and kept in memory only: a self-signed certificate and its key
    (Dask's ``Security.temporary``), required of every connection (mutual TLS: a client without them is refused)."""
    from distributed.security import Security

    return Security.temporary()


def security_text(security: Security) -> str:
    """``security`` as one line of JSON (what :func:`read_security` reads back)."""
    return json.dumps({name: getattr(security, name) for name in TLS_FIELDS})


def read_security(line: str) -> Security:
    """The credentials of :func:`security_text`, encryption required."""
    from distributed.security import Security

    fields = json.loads(line)
    return Security(require_encryption=True, **{name: fields[name] for name in TLS_FIELDS})


def run_cluster(workers: int, parent: int, security: Security) -> None:
    """Serve a local cluster of ``workers`` worker processes with ``security`` until ``parent`` is gone or SIGTERM
    arrives."""
    import dask
    from distributed import LocalCluster

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    dask.config.set(SCHEDULER_CONFIG | NANNY_CONFIG | HTTP_CONFIG | WORKER_PROCESS_CONFIG)
    threads = max(1, (os.cpu_count() or 1) // workers)
    with LocalCluster(n_workers=0, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}, memory_limit=0, preload=[WORKER_PRELOAD],
                      env={"FL_TORCH_THREADS": str(threads)}, security=security) as cluster:
        print(cluster.scheduler_address, flush=True)
        cluster.scale(workers)
        while not done.wait(PARENT_CHECK_S):
            if os.getppid() != parent:
                break


def start_embedded_cluster(workers: int, security: Security) -> tuple[subprocess.Popen, str]:
    """Start the helper for this process, handing it ``security`` (:func:`temporary_security`) on its standard input;
    returns it and its scheduler's address (``tls://``, workers still starting)."""
    helper = subprocess.Popen([sys.executable, "-m", __name__, "--workers", str(workers), "--parent", str(os.getpid())],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    helper.stdin.write(security_text(security) + "\n")
    helper.stdin.close()
    address = helper.stdout.readline().strip()
    if not address:
        helper.wait()
        raise RuntimeError(f"the embedded Dask cluster did not start (exit status {helper.returncode}); see the log")
    return helper, address


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True, help="process id of the server")
    args = parser.parse_args(argv)
    run_cluster(args.workers, args.parent, read_security(sys.stdin.readline()))


if __name__ == "__main__":
    main()

"""Scaling out, on loopback: a Dask scheduler and two workers started with the commands of the compose profile, a
survey mapped over them, and two app servers (``python -m fl_ui.serve`` with ``FL_SCHEDULER``) whose jobs run on
both workers, outlive their browser session through its grace period, and survive the death of the other job's
worker."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from fl_core.survey.engine import WORKER_PROCESS_CONFIG
from fl_ui.cluster import SCHEDULER_CONFIG, WORKER_PRELOAD, dask_environment
from fl_ui.engine import ABANDONED_AFTER_S

from .streamlit_server import REPO, free_port, get_text, health, process_group, running_server, server_env, wait_for

JOB_PREFIX = "fl-channel_axes_job-"
STARTUP_S = 300


class LoopbackCluster(NamedTuple):
    address: str
    workers: tuple[str, ...]
    health_urls: tuple[str, ...]
    client: object
    env: dict[str, str]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    """``dask scheduler`` and two ``dask worker`` processes on loopback, configured as in docker-compose.yml."""
    from distributed import Client

    logs = tmp_path_factory.mktemp("cluster")
    scripts = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO),
           "FL_UPLOAD_DIR": str(logs / "uploads"), "FL_RUNS_DIR": str(logs / "runs"), "FL_TORCH_THREADS": "1",
           **dask_environment(SCHEDULER_CONFIG), **dask_environment(WORKER_PROCESS_CONFIG)}
    port, dashboard = free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    worker_ports = (free_port(), free_port())
    with contextlib.ExitStack() as stack:
        stack.enter_context(process_group(["dask", "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                      "--dashboard-address", f"127.0.0.1:{dashboard}"], env, logs / "scheduler.log"))
        wait_for(lambda: get_text(f"http://127.0.0.1:{dashboard}/health") == "ok", STARTUP_S, "scheduler")
        for number, worker_port in enumerate(worker_ports):
            stack.enter_context(process_group(
                ["dask", "worker", address, "--nthreads", "1", "--preload", WORKER_PRELOAD, "--name", f"w{number}",
                 "--host", "127.0.0.1", "--dashboard-address", f"127.0.0.1:{worker_port}", "--local-directory",
                 str(logs / f"w{number}")], env, logs / f"worker{number}.log"))
        client = stack.enter_context(Client(address, timeout=60, set_as_default=False))
        client.wait_for_workers(2, timeout=STARTUP_S)
        client.get_task_stream()  # the scheduler records every task from now on
        workers = tuple(sorted(client.sync(client.scheduler.identity, n_workers=-1)["workers"]))  # not the cache
        yield LoopbackCluster(address, workers, tuple(f"http://127.0.0.1:{p}/health" for p in worker_ports), client,
                              env)


def _jobs_run(cluster: LoopbackCluster) -> list[dict]:
    """The heavy jobs the workers have run so far (the scheduler's task stream), in order."""
    return [task for task in cluster.client.get_task_stream() if task["key"].startswith(JOB_PREFIX)]


@pytest.mark.slow
def test_a_survey_on_the_cluster_computes_rows_on_both_workers(cluster: LoopbackCluster) -> None:
    assert all(get_text(url) == "ok" for url in cluster.health_urls)  # the compose profile's worker health check
    models = ["demo:tiny_vgg", "demo:tiny_vgg_init", "demo:lab_vgg_true_s0", "demo:lab_vgg_random_s0",
              "demo:ppocrv6_det_small_dw7", "weights:/no/such/file.pt"]
    command = [sys.executable, "-m", "fl_core", "survey", "--family", "weights", "--scheduler", cluster.address,
               "--json", "-", "--quiet", *(arg for spec in models for arg in ("--model", spec))]
    done = subprocess.run(command, cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)["rows"]
    assert [row["spec"] for row in rows] == models
    assert {row["worker"] for row in rows[:-1]} == set(cluster.workers)  # rows computed on both workers
    assert all(row["error"] is None and row["values"]["filters"] > 0 for row in rows[:-1])
    assert "No checkpoint file" in rows[-1]["error"]
    assert "6 models in" in done.stderr and "on 2 worker(s), 1 failed" in done.stderr


def _page_url(server: str, layer: str, finetune: int) -> str:
    return (f"{server}/channel-axes?models=demo:tiny_vgg&axes_layer={layer}&axes_ncal=64&axes_neval=32"
            f"&axes_finetune_steps={finetune}")


RESULT = "ρ between axes"
WORKER_DIED = "worker process running this job stopped"


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(3600)
def test_two_app_servers_share_the_workers_and_keep_a_job_whose_session_ended(cluster: LoopbackCluster, browser,
                                                                               tmp_path: Path) -> None:
    ports = (free_port(), free_port())
    with contextlib.ExitStack() as stack:
        servers = []
        for number, port in enumerate(ports):
            env = server_env(port, **{k: v for k, v in cluster.env.items() if k.startswith(("FL_", "DASK_"))}
                             | {"FL_SCHEDULER": cluster.address, "FL_WARM_WORKER_VIEWS": "0", "HOME": str(tmp_path)})
            command = [sys.executable, "-m", "fl_ui.serve", "--server.address=127.0.0.1", "--server.headless=true"]
            stack.enter_context(running_server(command, port, env, tmp_path / f"server{number}.log",
                                               timeout=STARTUP_S))
            servers.append(f"http://127.0.0.1:{port}")

        def session(url: str):
            context = browser.new_context(viewport={"width": 1280, "height": 1600})
            context.set_default_timeout(600_000)
            page = context.new_page()
            page.goto(url)
            return context, page

        # 1. jobs from both servers at once: they run side by side, one on each worker
        before = len(_jobs_run(cluster))
        opened = [session(_page_url(servers[0], "features.11", 20)), session(_page_url(servers[1], "features.14", 20))]
        for _, page in opened:
            page.get_by_text(RESULT).first.wait_for()
        runs = _jobs_run(cluster)[before:]
        assert len(runs) == 2 and {run["worker"] for run in runs} == set(cluster.workers)
        for context, _ in opened:
            context.close()

        # 2. a session that ends while its job runs: the job goes on through the grace of a job whose tabs closed
        # (ABANDONED_AFTER_S, then it is cancelled), and a session that comes back within it gets its result, not a
        # second job: the replica's kept result if the job ended meanwhile, else the running job, taken up again
        url = _page_url(servers[0], "features.7", 10)
        context, page = session(url)
        wait_for(lambda: any(JOB_PREFIX in key for keys in cluster.client.processing().values() for key in keys),
              STARTUP_S, "running job")
        context.close()
        with contextlib.suppress(TimeoutError):  # back once the job ended, or after a third of the grace
            wait_for(lambda: len(_jobs_run(cluster)) == before + 3, ABANDONED_AFTER_S / 3, "job ending", poll=1)
        context, page = session(url)
        page.get_by_text(RESULT).first.wait_for(timeout=900_000)
        context.close()
        assert len(_jobs_run(cluster)) == before + 3  # the job of the session that ended, not computed again

        # 3. a worker killed mid-job fails that job only; the servers stay healthy and the next job runs
        pages = [session(_page_url(servers[0], "features.4", 20)), session(_page_url(servers[1], "features.7", 20))]
        wait_for(lambda: sum(JOB_PREFIX in key for keys in cluster.client.processing().values() for key in keys) == 2,
              STARTUP_S, "two running jobs")
        victim = next(worker for worker, keys in cluster.client.processing().items() if keys)
        pid = cluster.client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        outcomes = []
        for _, page in pages:
            page.get_by_text(RESULT).or_(page.get_by_text(WORKER_DIED)).first.wait_for(timeout=900_000)
            outcomes.append(page.get_by_text(WORKER_DIED).count() > 0)
        assert sorted(outcomes) == [False, True]  # one page lost its worker, the other got its result
        assert all(health(port) == "ok" for port in ports)
        failed = pages[outcomes.index(True)][1]
        failed.reload()
        failed.get_by_text(RESULT).first.wait_for(timeout=900_000)  # the job runs again, on a live worker
        for context, _ in pages:
            context.close()


@pytest.mark.slow
def test_a_tls_cluster_serves_the_app_and_refuses_a_client_without_the_certificate(tmp_path: Path, monkeypatch
                                                                                  ) -> None:
    """docs/deploy.md's TLS for an external cluster, as written there: one certificate made with openssl, given to
    ``dask scheduler --protocol tls`` and ``dask worker`` on their command lines and to the app by Dask's own
    variables; the app's jobs run, a plain client is refused."""
    import dask
    from distributed import Client

    from fl_ui.engine import Engine

    from .workers import sample_jobs

    key, cert = tmp_path / "dask-key.pem", tmp_path / "dask-cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365", "-subj",
                    "/CN=filterlens-dask", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    tls = ["--tls-ca-file", str(cert), "--tls-cert", str(cert), "--tls-key", str(key)]
    scripts = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO),
           **dask_environment(SCHEDULER_CONFIG), **dask_environment(WORKER_PROCESS_CONFIG)}
    port, dashboard = free_port(), free_port()
    address = f"tls://127.0.0.1:{port}"
    app_settings = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
                    "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(cert),
                    "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(cert),
                    "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(key)}
    with contextlib.ExitStack() as stack:
        stack.enter_context(process_group(["dask", "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port",
                                           str(port), "--dashboard-address", f"127.0.0.1:{dashboard}", *tls], env,
                                          tmp_path / "scheduler.log"))
        wait_for(lambda: get_text(f"http://127.0.0.1:{dashboard}/health") == "ok", STARTUP_S, "scheduler")
        stack.enter_context(process_group(["dask", "worker", address, "--nthreads", "1", "--preload", WORKER_PRELOAD,
                                           "--host", "127.0.0.1", "--no-dashboard", *tls], env,
                                          tmp_path / "worker.log"))
        for name, value in app_settings.items():
            monkeypatch.setenv(name, value)
        dask.config.refresh()
        stack.callback(dask.config.refresh)
        stack.callback(monkeypatch.undo)
        engine = Engine(address)
        stack.callback(engine.close)
        engine.wait_for_workers(timeout=STARTUP_S)
        assert engine.submit(sample_jobs.counting, 1).result(timeout=120) != os.getpid()
        with dask.config.set({"distributed.comm.require-encryption": False}), pytest.raises((OSError, TimeoutError)):
            Client(f"tcp://127.0.0.1:{port}", timeout=10, set_as_default=False)  # another user, without settings

# FilterLens lab server. See README, "Deploying for a lab".
#   docker compose up                                  (CPU build, http://localhost:8501)
#   docker build --build-arg TORCH_VARIANT=cu128 .     (a CUDA build of the same torch version)
FROM python:3.11-slim-bookworm

# Which PyTorch wheel index torch/torchvision come from: "cpu" (small, default) or a CUDA tag the index offers
# for the pinned torch version (cu126, cu128, ...).
ARG TORCH_VARIANT=cpu
ARG TORCH_INDEX=https://download.pytorch.org/whl/${TORCH_VARIANT}

# The server writes only to the /cache and /data volumes and to /tmp (a tmpfs in docker-compose.yml, whose root
# filesystem is read-only): temp files and multiprocessing there, and so any XDG cache, which would otherwise go to
# the home folder.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    XDG_CACHE_HOME=/tmp/cache \
    HF_HOME=/cache/huggingface \
    TORCH_HOME=/cache/torch \
    FL_UPLOAD_DIR=/data/uploads \
    FL_DATA_ROOTS=/data/imagenet \
    FL_RUNS_DIR=/data/runs \
    STREAMLIT_SERVER_PORT=8501

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# A non-root user owns the writable places: the weight cache and the data folder (volumes in docker-compose.yml).
RUN groupadd --gid 1000 filterlens \
    && useradd --uid 1000 --gid filterlens --create-home --shell /usr/sbin/nologin filterlens \
    && mkdir -p /app /cache/huggingface /cache/torch /data/uploads /data/runs /data/results /data/imagenet \
    && chown -R filterlens:filterlens /cache /data

WORKDIR /app

# Dependencies first (a layer that survives code changes): torch and torchvision from the PyTorch index of the
# chosen variant, everything else pinned from requirements.txt (whose torch pins the CPU/CUDA wheels satisfy).
COPY requirements.txt ./
RUN grep -E '^(torch|torchvision)==' requirements.txt > /tmp/torch-requirements.txt \
    && pip install --no-cache-dir --index-url "${TORCH_INDEX}" -r /tmp/torch-requirements.txt \
    && grep -vE '^-e ' requirements.txt > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/torch-requirements.txt /tmp/requirements.txt

# The application, readable but not writable by the server user (the working tree may hold owner-only files),
# installed in place so `python -m fl_core` works too.
COPY . .
RUN chmod -R a+rX,go-w /app \
    && pip install --no-cache-dir --no-deps -e . \
    && python -c "import fl_core.io.models as m; assert m.demo_manifest(), 'demo checkpoints missing'"

# the filterlens user, by number so the host can resolve it
USER 1000:1000
EXPOSE 8501
VOLUME ["/cache", "/data"]

# The app's own health check, /api/health (fl_ui/serve.py): "ok" once the engine's workers and Home's first view are
# ready and while heavy jobs can run; 503 otherwise (e.g. its scheduler is gone and the engine has not reconnected), so
# urlopen raises and the check fails. Streamlit's /_stcore/health answers within seconds of start, /api/health once the
# warm-up is done: the start period covers it on a busy machine. Under load the health endpoint has answered in up to
# 5.3 s: 10 s per try (the request gives up at 8 s with a clear error), three failures in a row before "unhealthy".
# Docker itself only reports it; see docs/deploy.md for what restarts it (the autoheal profile, an orchestrator).
HEALTHCHECK --interval=30s --timeout=10s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/api/health' % os.environ.get('STREAMLIT_SERVER_PORT', '8501'), timeout=8)"]

# fl_ui.serve = `streamlit run app.py` with torch and the analyses loaded before it listens, the package's server
# configuration (fl_ui/.streamlit/config.toml), every interface (a lab's server) and the heavy views warmed
CMD ["python", "-m", "fl_ui.serve", "--server.address=0.0.0.0"]

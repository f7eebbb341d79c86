# syntax=docker/dockerfile:1
#
# One image for the four Berth services and the `berth` CLI. Pick the service with the
# command (there is no ENTRYPOINT, so Kubernetes `command:` and Compose `command:` are the
# whole command line):
#
#   docker run ghcr.io/berth-dev/berth:0.1.0 python -m services.watcher     (or admission,
#   docker run ghcr.io/berth-dev/berth:0.1.0 berth --help                    preemption, recovery)
#
# Settings are environment variables (BERTH_NATS_URL, BERTH_CREDS, BERTH_NATS_CA, BERTH_HTTP_PORT,
# ...); see deploy/INSTALL.md. Inside a container BERTH_HTTP_HOST must be 0.0.0.0 for the probes.
# No credentials are baked in: each container gets its own seed file at run time.

ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: the project and its dependencies, installed into a venv ---------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/berth
WORKDIR /src
# .dockerignore keeps the context to pyproject.toml, README, and the packages it installs.
COPY . .
RUN /opt/berth/bin/pip install --no-compile . \
 && /opt/berth/bin/python -m compileall -q -j 0 /opt/berth/lib

# --- final: the venv on a clean base; no compilers, no pip cache, no sources ---------------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 berth \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin berth \
 && mkdir -p /var/lib/berth \
 && chown 10001:10001 /var/lib/berth
COPY --from=builder /opt/berth /opt/berth
ENV PATH=/opt/berth/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    BERTH_DATA_DIR=/var/lib/berth \
    HOME=/tmp
WORKDIR /var/lib/berth
USER 10001:10001
# Ports each service listens on by default (shared/service.py DEFAULT_PORTS).
EXPOSE 8481 8482 8483 8484
CMD ["python", "-c", "print('usage: python -m services.<watcher|admission|preemption|recovery>, or berth --help')"]

# compaction-gate: transparent LLM API proxy.
#   docker build -t compaction-gate .
#   docker run --rm -p 8788:8788 -v gate-state:/data \
#     -e COMPACTION_GATE_ADMIN_KEY="$(openssl rand -hex 16)" compaction-gate
# Arguments after the image name go to `compaction-gate serve` (e.g. `--policy strict`,
# `--upstream https://api.openai.com/v1`, `--config /etc/gate/config.yaml` with a mounted file).
#
# The base is pinned to a specific release tag. Its digest could not be looked up where
# this file was written (no registry access); pin it too with
#   docker buildx imagetools inspect python:3.11.7-slim-bookworm
# and `FROM python:3.11.7-slim-bookworm@sha256:<digest>`.
FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependency layer: only pyproject.toml, so a code change does not reinstall the
# dependencies. The list is the [project] dependencies, read with the standard library.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Code layer: the package itself, without dependencies (installed above).
COPY README.md ./
COPY proxy ./proxy
COPY policies ./policies
COPY docker/config.yaml /etc/compaction-gate/config.yaml
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --create-home --home-dir /home/gate gate \
    && mkdir -p /data && chown gate /data

# Conversation and spill state (state.path in the image's config).
VOLUME /data
ENV COMPACTION_GATE_CONFIG=/etc/compaction-gate/config.yaml \
    XDG_STATE_HOME=/data
USER gate
WORKDIR /data
EXPOSE 8788

# Follows the port the server was given (its flags, COMPACTION_GATE_PORT or the config
# file's server.port): see proxy/healthcheck.py.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
    CMD ["python", "-m", "proxy.healthcheck"]

# SIGTERM (docker stop) triggers a graceful shutdown: in-flight streams get
# server.shutdown_grace_seconds (30 s by default; docker stop waits 10 s unless -t).
STOPSIGNAL SIGTERM
ENTRYPOINT ["compaction-gate", "serve"]
CMD []

# compaction-gate: transparent LLM API proxy.
#   docker build -t compaction-gate .
#   docker run --rm -p 8788:8788 compaction-gate
# Mount a config with -v $PWD/config.yaml:/etc/compaction-gate/config.yaml and
# -e COMPACTION_GATE_CONFIG=/etc/compaction-gate/config.yaml (or pass --config).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY policies ./policies
RUN pip install . \
    && useradd --system --create-home --home-dir /home/gate gate \
    && mkdir -p /data && chown gate /data

USER gate
# Conversation state (state.path is relative to the working directory).
WORKDIR /data
EXPOSE 8788

HEALTHCHECK --interval=30s --timeout=3s --start-period=10s \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8788/healthz', timeout=2).status == 200 else 1)"

# SIGTERM (docker stop) triggers a graceful shutdown: in-flight streams get
# server.shutdown_grace_seconds (30 s by default; docker stop waits 10 s unless -t).
STOPSIGNAL SIGTERM
CMD ["compaction-gate", "serve", "--host", "0.0.0.0"]

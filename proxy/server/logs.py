"""Structured JSON logging: one access line per request, secrets never included.

Access lines go to the ``compaction_gate.access`` logger with the fields in
``record.fields``; :class:`JsonFormatter` renders every record as one JSON object
per line. Callers pass only whitelisted fields (never headers or bodies); free text
that might echo input is scrubbed with :func:`redact` first.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import IO, Any

__all__ = [
    "ACCESS_LOGGER",
    "GATE_LOGGER",
    "JsonFormatter",
    "configure_logging",
    "log_access",
    "redact",
]

ACCESS_LOGGER = logging.getLogger("compaction_gate.access")
GATE_LOGGER = logging.getLogger("compaction_gate.server")

#: Credential shapes scrubbed from any free text we log (exception messages,
#: tracebacks), in addition to the exact secrets known for the request.
_SECRET_PATTERNS = (
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}"),  # OpenAI / Anthropic style keys
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-~+/=]{8,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"),  # JWT
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),  # Google API keys
    re.compile(
        r"(?i)((?:api[_-]?key|access[_-]?token|secret|password|authorization)[\"']?\s*[:=]\s*[\"']?)"
        r"[^\s\"',;]{4,}"
    ),
)


class JsonFormatter(logging.Formatter):
    """Render records as single-line JSON: ``ts``, ``level``, ``logger``, ``msg``, fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            payload.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            # Exception text may quote request content; only the class is recorded.
            payload["exc_type"] = record.exc_info[0].__name__
        return json.dumps(payload, ensure_ascii=False, default=str)


def configure_logging(level: str = "info", stream: IO[str] | None = None) -> None:
    """Send all ``compaction_gate.*`` logs as JSON lines to ``stream`` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("compaction_gate")
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    root.propagate = False
    # aiohttp's own access log prints request lines (query strings may carry keys).
    logging.getLogger("aiohttp.access").disabled = True


def log_access(fields: Mapping[str, Any]) -> None:
    """Emit one access line (``msg`` = ``"request"``)."""
    ACCESS_LOGGER.info("request", extra={"fields": dict(fields)})


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Scrub ``text``: each known secret, then anything shaped like a credential."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    for pattern in _SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "[redacted]", text)
        else:
            text = pattern.sub("[redacted]", text)
    return text

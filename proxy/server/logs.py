"""Structured JSON logging: one access line per request, secrets never included.

Access lines go to the ``compaction_gate.access`` logger with the fields in
``record.fields``; :class:`JsonFormatter` renders every record as one JSON object
per line. Callers pass only whitelisted fields (never headers or bodies); free text
that might echo input is scrubbed with :func:`redact` first.
"""

from __future__ import annotations

import json
import logging
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

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


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


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every occurrence of each non-empty secret in ``text``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text

"""Structured JSON logging: one access line per request, secrets never included.

Access lines go to the ``compaction_gate.access`` logger with the fields in
``record.fields``; :class:`JsonFormatter` renders every record as one JSON object
per line. Callers pass only whitelisted fields (never headers or bodies; the route is
a template, never the raw path); free text that might echo input is scrubbed with
:func:`redact` first.

The logging boundary: :func:`configure_logging` sends *every* logger of the process
(aiohttp's, asyncio's, threads' uncaught exceptions, warnings) through the same
formatter, which redacts the message of every record that is not an access line and
never renders a traceback (only the exception's class). aiohttp's own parser errors
quote the raw header line (``Bearer sk-…``); they are answered and logged by
:mod:`proxy.server.protocol`, which never logs that text at all.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import IO, Any

from proxy.core.redaction import redact_secrets

__all__ = [
    "ACCESS_LOGGER",
    "GATE_LOGGER",
    "JsonFormatter",
    "configure_logging",
    "log_access",
    "redact",
    "reset_logging",
]

ACCESS_LOGGER = logging.getLogger("compaction_gate.access")
GATE_LOGGER = logging.getLogger("compaction_gate.server")

#: What logs scrub beyond the detectors' secrets. The detectors avoid false positives
#: (a binding misread as a secret would be lost); a log can afford to over-redact: key
#: prefixes with any tail, and credentials by their *context* (a header line, an
#: assignment) whatever their shape.
_LOG_PATTERNS = (
    re.compile(r"()\b(?:sk|pk|rk)[-_][A-Za-z0-9_\-]{8,}"),
    re.compile(r"()\b(?:gh[pousr]_|github_pat_|glpat-|xox[a-z]-)[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(\bbearer\s+)[^\s\"',;]{4,}"),
    re.compile(
        r"(?i)((?:api[_-]?key|access[_-]?token|secret|password|authorization|x-api-key|cookie)[\"']?\s*[:=]\s*[\"']?)"
        r"[^\s\"',;]{4,}"
    ),
)


class JsonFormatter(logging.Formatter):
    """Render records as single-line JSON: ``ts``, ``level``, ``logger``, ``msg``, fields.

    The message of every record but an access line is redacted (:func:`redact`): a
    library's message may quote request content. Tracebacks are never rendered."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.name != ACCESS_LOGGER.name:
            msg = redact(msg)
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": msg,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            payload.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            # Exception text may quote request content; only the class is recorded.
            payload["exc_type"] = record.exc_info[0].__name__
        return json.dumps(payload, ensure_ascii=False, default=str)


#: The handler :func:`configure_logging` installed on the root logger (replaced on a
#: second call).
_ROOT_HANDLER: logging.Handler | None = None


def configure_logging(level: str = "info", stream: IO[str] | None = None) -> None:
    """Send all logs of the process as JSON lines to ``stream`` (stderr):
    ``compaction_gate.*`` at ``level``, every other logger (aiohttp, asyncio …) at
    warning and above, uncaught exceptions of threads and of the main thread as one
    redacted line each."""
    global _ROOT_HANDLER
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    ours = logging.getLogger("compaction_gate")
    for existing in list(ours.handlers):
        ours.removeHandler(existing)
    ours.addHandler(handler)
    ours.setLevel(level.upper())
    ours.propagate = False
    root = logging.getLogger()
    if _ROOT_HANDLER is not None:
        root.removeHandler(_ROOT_HANDLER)
    _ROOT_HANDLER = handler
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
    # aiohttp's own access log prints request lines (paths and query strings may carry
    # keys); ours records the route template.
    logging.getLogger("aiohttp.access").disabled = True
    threading.excepthook = _thread_exception
    sys.excepthook = _uncaught


def reset_logging() -> None:
    """Undo :func:`configure_logging` (tests, embedding): handlers, hooks, levels."""
    global _ROOT_HANDLER
    ours = logging.getLogger("compaction_gate")
    for existing in list(ours.handlers):
        ours.removeHandler(existing)
    ours.propagate = True
    ours.setLevel(logging.NOTSET)
    if _ROOT_HANDLER is not None:
        logging.getLogger().removeHandler(_ROOT_HANDLER)
        _ROOT_HANDLER = None
    logging.captureWarnings(False)
    logging.getLogger("aiohttp.access").disabled = False
    threading.excepthook = threading.__excepthook__
    sys.excepthook = sys.__excepthook__


def _thread_exception(args: threading.ExceptHookArgs) -> None:
    name = args.thread.name if args.thread is not None else "?"
    _log_uncaught(f"uncaught exception in thread {name}", args.exc_type, args.exc_value, args.exc_traceback)


def _uncaught(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    _log_uncaught("uncaught exception", exc_type, exc, tb)


def _log_uncaught(
    what: str, exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None
) -> None:
    if exc_type is SystemExit:
        return
    GATE_LOGGER.error(
        what, extra={"fields": {"error_type": exc_type.__name__, "error": redact(str(exc))[:500]}}
    )


def log_access(fields: Mapping[str, Any]) -> None:
    """Emit one access line (``msg`` = ``"request"``)."""
    ACCESS_LOGGER.info("request", extra={"fields": dict(fields)})


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Scrub ``text``: each known secret, then every secret the gate's detectors find
    (:func:`proxy.core.redaction.redact_secrets`), then key prefixes with any tail and
    credentials by their context (a ``Bearer`` value, a ``password=`` assignment)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    text = redact_secrets(text)
    for pattern in _LOG_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + "[redacted]", text)
    return text

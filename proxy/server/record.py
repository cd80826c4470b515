"""Per-request bookkeeping of the proxy: the access-log record, the gate headers every
proxied response carries, error responses in the caller's dialect, and how gate and
upstream failures are reported (scrubbed of credentials)."""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
import traceback
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from proxy.server.errors import ProxyError, error_response
from proxy.server.hooks import Decision, DialectName, ResponseTap, Rounds
from proxy.server.inflight import ShutdownCut, Slot
from proxy.server.logs import GATE_LOGGER, log_access, redact

__all__ = [
    "GATE_HEADERS",
    "H_ACTION",
    "H_CONVERSATION",
    "H_OVERHEAD",
    "UNKNOWN_CONVERSATION",
    "RequestRecord",
    "close_rounds",
    "close_tap",
    "gate_headers",
    "log_gate_failure",
    "new_request_id",
    "respond_error",
    "shutdown_error",
    "upstream_failure",
]

H_CONVERSATION = "x-compaction-gate-conversation"
H_ACTION = "x-compaction-gate-action"
H_OVERHEAD = "x-compaction-gate-overhead-ms"
GATE_HEADERS = (H_CONVERSATION, H_ACTION, H_OVERHEAD)
UNKNOWN_CONVERSATION = "unknown"

#: Request ids: a random per-process prefix and a counter (unique like a uuid4's hex, 32
#: hex digits, without a system call per request).
_ID_PREFIX = secrets.token_hex(10)
_ID_COUNTER = itertools.count(1)


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ID_COUNTER):012x}"


@dataclass
class RequestRecord:
    """Mutable per-request bookkeeping, flushed to one access-log line at the end."""

    request_id: str
    method: str
    route: str
    started: float = field(default_factory=time.perf_counter)
    dialect: str = "openai"
    kind: str = "raw"
    status: int = 0
    upstream: str | None = None
    upstream_status: int | None = None
    conversation: str = UNKNOWN_CONVERSATION
    action: str = "none"
    tenant: str = "anonymous"
    stream: bool = False
    #: the response was relayed as an SSE stream (its bytes count as streamed bytes)
    sse: bool = False
    model: str | None = None
    bytes_in: int = 0
    bytes_out: int = 0
    error: str | None = None
    #: seconds spent waiting on upstream (connect + headers + body reads)
    upstream_wait: float = 0.0
    #: the request's place among those in flight (a shutdown may cut it)
    slot: Slot | None = None
    #: upstream requests the gate made after the first (``Decision.rounds``)
    follow_ups: int = 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def overhead_ms(self) -> float:
        return max(0.0, (self.elapsed() - self.upstream_wait) * 1000.0)

    def emit(self) -> None:
        fields: dict[str, object] = {
            "request_id": self.request_id,
            "method": self.method,
            "route": self.route,
            "kind": self.kind,
            "dialect": self.dialect,
            "status": self.status,
            "upstream": self.upstream,
            "upstream_status": self.upstream_status,
            "duration_ms": round(self.elapsed() * 1000.0, 2),
            "overhead_ms": round(self.overhead_ms(), 2),
            "conversation": self.conversation,
            "action": self.action,
            "tenant": self.tenant,
            "stream": self.stream,
            "model": self.model,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "error": self.error,
        }
        if self.follow_ups:
            fields["follow_ups"] = self.follow_ups
        log_access(fields)


def gate_headers(rec: RequestRecord, decision: Decision | None) -> CIMultiDict[str]:
    """The headers every proxied response carries (plus the decision's extras)."""
    out: CIMultiDict[str] = CIMultiDict()
    if decision is not None:
        for name, value in decision.headers.items():
            out[name] = value
    out[H_CONVERSATION] = rec.conversation
    out[H_ACTION] = rec.action
    out[H_OVERHEAD] = f"{rec.overhead_ms():.2f}"
    return out


def respond_error(
    rec: RequestRecord, dialect: DialectName, err: ProxyError, decision: Decision | None = None
) -> web.Response:
    rec.error = rec.error or err.code
    resp = error_response(dialect, err)
    resp.headers.update(gate_headers(rec, decision))
    rec.status = err.status
    rec.bytes_out = len(resp.body) if isinstance(resp.body, (bytes, bytearray)) else 0
    return resp


def log_gate_failure(where: str, exc: BaseException, secret: str | None, rec: RequestRecord) -> None:
    """Log a gate/tap failure; free text is scrubbed of the request's credential and
    of anything credential-shaped (exception messages may quote request content)."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    GATE_LOGGER.error(
        "gate failure; request forwarded per gate.fail_open",
        extra={
            "fields": {
                "request_id": rec.request_id,
                "where": where,
                "error_type": type(exc).__name__,
                "error": redact(str(exc), [secret])[:500],
                "traceback": redact(tb, [secret])[-4000:],
            }
        },
    )


def upstream_failure(exc: BaseException) -> tuple[ProxyError, str]:
    """Map a client-side exception talking to upstream to (error, tap reason)."""
    if isinstance(exc, ShutdownCut):
        return shutdown_error(), "shutdown"
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return (
            ProxyError(
                504,
                "Upstream did not respond in time (server.read_timeout / connect_timeout).",
                code="upstream_timeout",
            ),
            "upstream_timeout",
        )
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        why = getattr(exc.certificate_error, "verify_message", None) or type(exc.certificate_error).__name__
        return (
            ProxyError(
                502,
                f"Upstream's TLS certificate could not be verified ({why}). If it is issued by a "
                "private CA, trust that CA with server.upstream_ca_file.",
                code="upstream_tls_error",
            ),
            "upstream_error",
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return (
            ProxyError(
                502,
                f"Could not connect to upstream ({type(exc).__name__}).",
                code="upstream_unreachable",
            ),
            "upstream_error",
        )
    return (
        ProxyError(
            502,
            f"Upstream connection failed ({type(exc).__name__}).",
            code="upstream_error",
        ),
        "upstream_error",
    )


def shutdown_error() -> ProxyError:
    """What a request still in flight when the shutdown grace period ends is told."""
    return ProxyError(
        503,
        "compaction-gate is shutting down: this response was cut after the shutdown grace "
        "period (server.shutdown_grace_seconds). Retry the request.",
        code="proxy_shutting_down",
        retryable=True,
    )


def _close(part: ResponseTap | Rounds | None, where: str, reason: str, rec: RequestRecord, secret: str | None) -> None:
    if part is None:
        return
    try:
        part.closed(reason)
    except Exception as exc:  # noqa: BLE001
        log_gate_failure(where, exc, secret, rec)


def close_tap(tap: ResponseTap | None, reason: str, rec: RequestRecord, secret: str | None) -> None:
    """End a response tap abnormally (see :class:`~proxy.server.hooks.ResponseTap`)."""
    _close(tap, "tap.closed", reason, rec, secret)


def close_rounds(rounds: Rounds | None, reason: str, rec: RequestRecord, secret: str | None) -> None:
    """End a decision's rounds abnormally (see :class:`~proxy.server.hooks.Rounds`)."""
    _close(rounds, "rounds.closed", reason, rec, secret)

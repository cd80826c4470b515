"""Asking the interceptor for a request's decision, failing open (or closed, per
``gate.fail_open``) when it raises or returns something that is not a valid Decision.
Shared by the HTTP handler and the Responses WebSocket relay."""

from __future__ import annotations

import asyncio

from proxy.config import ProxyConfig
from proxy.server.errors import ProxyError
from proxy.server.hooks import Decision, Exchange, Interceptor
from proxy.server.record import RequestRecord, log_gate_failure

__all__ = ["decide"]


async def decide(
    interceptor: Interceptor,
    exchange: Exchange,
    config: ProxyConfig,
    secret: str | None,
    rec: RequestRecord,
) -> tuple[Decision | None, ProxyError | None]:
    """Run the interceptor; fail open (or closed, per config) on any exception."""
    try:
        decision = await interceptor.before(exchange)
        if not isinstance(decision, Decision):
            raise TypeError(f"interceptor returned {type(decision).__name__}, not Decision")
        if decision.body is not None and not isinstance(decision.body, bytes):
            raise TypeError("Decision.body must be bytes or None")
        if decision.after_send is not None and decision.tap is not None:
            raise TypeError("a Decision with after_send must not carry a tap of its own")
        return decision, None
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the gate must never lose a request
        log_gate_failure("interceptor", exc, secret, rec)
        rec.error = "gate_error"
        if config.gate.fail_open:
            return Decision(action="none"), None
        rec.action = "error"
        return None, ProxyError(
            502,
            "compaction-gate could not process this request (gate.fail_open is false); "
            "see the proxy log for request " + rec.request_id,
            code="gate_error",
        )

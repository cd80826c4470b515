"""LiteLLM's own objects, as the LiteLLM guardrail meets them on the gate's wire.

:mod:`proxy.integrations.litellm_exchange` translates LiteLLM's request ``data`` with no
LiteLLM import; this module holds the other side of the adapter, the parts that know
LiteLLM's types, so the guardrail itself (:mod:`proxy.integrations.litellm_guardrail`)
is only its hooks and their bookkeeping:

- errors: :class:`GateRefusal` (a gate rejection as LiteLLM's :class:`ProxyException`,
  :func:`refusal`) and LiteLLM's mid-stream block (:func:`stream_error`, raised by
  :func:`checked` when the tap emitted an error event);
- responses: a response object or a streamed chunk as the JSON body / SSE event the
  wire carries, and back (:func:`response_json`, :func:`chunk_sse`);
- rounds: a follow-up round of a chat completion through LiteLLM's own router
  (:func:`proxy_router`, :func:`follow_up_round`, :data:`MAX_FOLLOW_UPS`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from litellm.proxy._types import ProxyException

from ..server.hooks import Decision
from ..server.record import H_ACTION, H_CONVERSATION
from .litellm_exchange import apply_body, chunk_event, event_payload

__all__ = [
    "MAX_FOLLOW_UPS",
    "GateRefusal",
    "checked",
    "chunk_sse",
    "follow_up_round",
    "proxy_router",
    "refusal",
    "response_json",
    "stream_error",
]

log = logging.getLogger("compaction_gate.litellm")


class GateRefusal(ProxyException):
    """A gate rejection as LiteLLM's own error: LiteLLM renders ``to_dict()`` under
    ``{"error": …}`` with HTTP status ``code``. The body's ``code`` is the gate's
    (``destructive_compaction``) rather than the status LiteLLM puts there by default,
    as the gate's own server answers (DESIGN §6)."""

    def __init__(self, status: int, message: str, gate_code: str, type: str, param: str | None, headers: dict[str, str]) -> None:
        super().__init__(message=message, type=type, param=param, code=status, headers=headers, openai_code=gate_code)
        self.gate_code = gate_code

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["code"] = self.gate_code
        return out


def refusal(decision: Decision) -> GateRefusal:
    rej = decision.reject
    assert rej is not None
    headers = {"x-should-retry": "false", H_ACTION: decision.action or "reject", **dict(decision.headers)}
    if decision.conversation_id:
        headers[H_CONVERSATION] = decision.conversation_id
    return GateRefusal(rej.status, rej.message, rej.code, rej.type, rej.param, headers)


def stream_error(message: str) -> Exception:
    """LiteLLM's mid-stream block: its data generator turns this into its SSE error frame
    (``data: {"error": {"message": …, "type": …, "code": "400"}}``), which every OpenAI
    SDK raises on."""
    from litellm.proxy.proxy_server import StreamingCallbackError

    exc = StreamingCallbackError(message)
    exc.message = message  # type: ignore[attr-defined]
    exc.type = "invalid_request_error"  # type: ignore[attr-defined]
    exc.param = None  # type: ignore[attr-defined]
    exc.status_code = 400  # type: ignore[attr-defined]
    return exc


# ---------------------------------------------------------------------- rounds


#: Follow-up calls one request may cause (as behind the gate's own server).
MAX_FOLLOW_UPS = 16


def proxy_router() -> Any:
    """The LiteLLM proxy's router, when running inside the proxy (else ``None``)."""
    try:
        from litellm.proxy import proxy_server
    except Exception:  # noqa: BLE001 - litellm without its proxy extras
        return None
    return getattr(proxy_server, "llm_router", None)


async def follow_up_round(data: Mapping[str, Any], body: bytes, *, stream: bool) -> Any:
    """A follow-up round of a chat completion through LiteLLM's own router: the
    request's ``data`` (its model, deployment and key bookkeeping) with the follow-up's
    messages and tools, under a new call id."""
    router = proxy_router()
    if router is None:
        raise RuntimeError("LiteLLM's router is not available for a follow-up round")
    kwargs = dict(data)
    apply_body(kwargs, body)
    kwargs["litellm_call_id"] = str(uuid.uuid4())
    kwargs["stream"] = stream
    return await router.acompletion(**kwargs)


# ---------------------------------------------------------------------- translation


def checked(events: list[bytes]) -> list[bytes]:
    """Events the tap emitted; an error event among them (a block) ends the stream."""
    for ev in events:
        _, payload = event_payload(ev)
        if isinstance(payload, dict) and "error" in payload and "choices" not in payload:
            err = payload["error"]
            msg = err.get("message") if isinstance(err, dict) else None
            raise stream_error(str(msg or err))
    return events


def response_json(response: Any) -> tuple[bytes | None, Any]:
    """A response object as the JSON body the wire carries, and how to rebuild one of the
    same type (keeping LiteLLM's hidden params: cost, headers) from a changed body."""
    if isinstance(response, dict):
        return json.dumps(response, ensure_ascii=False).encode(), lambda obj: obj
    dump = getattr(response, "model_dump", None)
    if dump is None:
        return None, None
    cls = type(response)
    hidden = getattr(response, "_hidden_params", None)

    def rebuild(obj: dict[str, Any]) -> Any:
        new = cls(**obj)
        if hidden is not None:
            new._hidden_params = hidden
        return new

    return json.dumps(dump(), ensure_ascii=False).encode(), rebuild


def chunk_sse(chunk: Any) -> tuple[bytes | None, Any]:
    """A streamed chunk as the SSE event the wire would carry, and how to turn an event
    the tap emits (changed, or added: a note, a verbatim section) back into a chunk: one
    of the same class when it has the same shape, else the raw SSE event, which LiteLLM's
    stream writer relays as it is."""
    dump = getattr(chunk, "model_dump", None)
    if dump is None:
        return None, None
    obj = dump()
    cls = type(chunk)
    kind = obj.get("type") if "choices" not in obj else None
    event = kind if isinstance(kind, str) else None

    def rebuild(raw: bytes) -> Any:
        _, payload = event_payload(raw)
        if isinstance(payload, dict) and payload.get("type") == kind:
            try:
                return cls(**payload)
            except Exception:  # noqa: BLE001 - another shape: relay the event itself
                log.debug("stream event kept raw: %s", kind)
        return raw

    return chunk_event(obj, event), rebuild

"""Translating between a LiteLLM proxy request and the gate's :class:`Exchange` (pure).

The LiteLLM guardrail (:mod:`proxy.integrations.litellm_guardrail`) is a thin adapter
over the gate's own seam, :class:`proxy.server.hooks.Interceptor`. This module holds the
translation, with no LiteLLM import and no I/O, so it is tested on plain dicts:

- :func:`exchange_of` — LiteLLM's request ``data`` (the client's body plus LiteLLM's own
  bookkeeping keys) → the :class:`Exchange` the gate's server would have built for the
  same client request: the client's API fields only, secret-free headers, tenant = hash
  of the caller's (already hashed) LiteLLM key.
- :func:`apply_body` — a decision's replacement body → the fields of ``data`` it changes
  (``messages``, ``input``, ``system`` …), leaving LiteLLM's keys alone.
- :func:`chunk_event` / :func:`event_payload` — a streamed chunk ↔ one SSE event, so a
  :class:`~proxy.server.hooks.ResponseTap` sees a LiteLLM stream as the wire stream the
  gate's own server relays.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from multidict import CIMultiDict, CIMultiDictProxy

from ..core.interventions.sse import parse_event, render_event
from ..server.headers import safe_headers, tenant_of
from ..server.hooks import ApiKind, DialectName, Exchange

__all__ = ["CallKind", "apply_body", "call_kind", "chunk_event", "event_payload", "exchange_of", "request_body"]


@dataclass(frozen=True)
class CallKind:
    """Which of the gate's APIs a LiteLLM call type is, and its canonical route."""

    kind: ApiKind
    dialect: DialectName
    path: str
    #: The field holding the conversation (what a rewritten body changes).
    history_field: str


_CHAT = CallKind("chat", "openai", "/v1/chat/completions", "messages")
_RESPONSES = CallKind("responses", "openai", "/v1/responses", "input")
_MESSAGES = CallKind("messages", "anthropic", "/v1/messages", "messages")

#: LiteLLM ``call_type`` values (``litellm.types.utils.CallTypes``) the gate sees.
_CALL_KINDS: dict[str, CallKind] = {
    "completion": _CHAT,
    "acompletion": _CHAT,
    "responses": _RESPONSES,
    "aresponses": _RESPONSES,
    "anthropic_messages": _MESSAGES,
}

#: The client-facing fields of the three APIs that matter to the gate (identity,
#: history, tools, streaming). Everything else in LiteLLM's ``data`` is either LiteLLM's
#: own (``litellm_*``, ``proxy_server_request``, ``user_api_key_*``, ``metadata`` with
#: key hashes …) or provider parameters the gate never reads.
_API_FIELDS = frozenset(
    {
        "model",
        "messages",
        "input",
        "instructions",
        "system",
        "tools",
        "tool_choice",
        "functions",
        "stream",
        "prompt_cache_key",
        "previous_response_id",
        "max_tokens",
        "max_output_tokens",
        "user",
    }
)


def call_kind(call_type: object) -> CallKind | None:
    """The gate's view of a LiteLLM call type (an enum member or its value); ``None``
    for calls the gate does not track (embeddings, images, audio …)."""
    value = getattr(call_type, "value", call_type)
    return _CALL_KINDS.get(value) if isinstance(value, str) else None


def request_body(data: Mapping[str, Any]) -> dict[str, Any]:
    """The client's request body as the gate should see it, from LiteLLM's ``data``.

    Only API fields are kept. ``metadata`` is LiteLLM's bookkeeping on chat calls (key
    hashes, team ids), so only a client ``metadata.user_id`` (Anthropic's session carrier)
    is passed on."""
    body = {k: v for k, v in data.items() if k in _API_FIELDS}
    md = data.get("metadata")
    if isinstance(md, Mapping) and isinstance(md.get("user_id"), str):
        body["metadata"] = {"user_id": md["user_id"]}
    return body


def _client_headers(data: Mapping[str, Any]) -> Mapping[str, str]:
    psr = data.get("proxy_server_request")
    raw = psr.get("headers") if isinstance(psr, Mapping) else None
    headers: CIMultiDict[str] = CIMultiDict()
    if isinstance(raw, Mapping):
        for name, value in raw.items():
            if isinstance(name, str) and isinstance(value, str):
                headers.add(name, value)
    return safe_headers(CIMultiDictProxy(headers))


def _query(data: Mapping[str, Any]) -> str:
    psr = data.get("proxy_server_request")
    url = psr.get("url") if isinstance(psr, Mapping) else None
    return urlsplit(url).query if isinstance(url, str) else ""


def exchange_of(
    data: Mapping[str, Any], call: CallKind, caller_key: str | None, *, supports_rounds: bool = False
) -> Exchange:
    """The :class:`Exchange` for one LiteLLM request.

    ``caller_key`` identifies the caller: LiteLLM's ``UserAPIKeyAuth.api_key`` (the
    virtual key's hash, never the key itself); the tenant is a hash of it, so each
    LiteLLM key is its own tenant, as each API key is behind the gate's own server."""
    body = request_body(data)
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    model = body.get("model")
    call_id = data.get("litellm_call_id")
    return Exchange(
        method="POST",
        path=call.path,
        query=_query(data),
        dialect=call.dialect,
        kind=call.kind,
        headers=_client_headers(data),
        tenant=tenant_of(caller_key),
        body=raw,
        json=body,
        stream=body.get("stream") is True,
        model=model if isinstance(model, str) else None,
        request_id=call_id if isinstance(call_id, str) else "",
        supports_rounds=supports_rounds,
    )


def apply_body(data: dict[str, Any], replacement: bytes) -> list[str]:
    """Write the fields a decision's replacement body changed into LiteLLM's ``data``;
    returns their names. Fields the gate did not change (and LiteLLM's own) stay."""
    new = json.loads(replacement)
    if not isinstance(new, dict):
        raise ValueError("a replacement body must be a JSON object")
    old = request_body(data)
    changed = [k for k, v in new.items() if k in _API_FIELDS and old.get(k) != v]
    for k in changed:
        data[k] = new[k]
    return changed


def chunk_event(obj: Mapping[str, Any], event: str | None = None) -> bytes:
    """One streamed chunk (its JSON value) as the SSE event the wire would carry."""
    return render_event(dict(obj), event)


def event_payload(raw: bytes) -> tuple[str | None, Any]:
    """An SSE event's name and JSON payload (``None`` when it carries none)."""
    ev = parse_event(raw)
    return ev.event, ev.json()

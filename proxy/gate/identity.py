"""Explicit conversation ids (DESIGN §6), first match wins:

1. header ``x-conversation-id``;
2. session headers: ``x-session-id``, ``x-litellm-session-id``, any
   ``x-<vendor>-session-id`` (e.g. ``x-claude-code-session-id``), ``session-id``,
   ``helicone-session-id``;
3. body ``prompt_cache_key`` (OpenAI; Codex sends its conversation id there);
4. Anthropic body ``metadata.user_id`` ending ``_session_<uuid>`` (Claude Code), or a
   JSON ``user_id`` carrying ``session_id``.

Otherwise the conversation is found by content (:mod:`proxy.core.lineage`). Pure.
Session ids are identifiers, not secrets, but they are clipped and cleaned (printable,
bounded length) before being used as ids.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.redaction import has_secret

__all__ = ["MAX_ID_LEN", "ExplicitId", "explicit_id", "new_conversation_id"]

MAX_ID_LEN = 128
_VENDOR_SESSION = re.compile(r"^x-[a-z0-9][a-z0-9-]*-session-id$")
_FIXED_FIRST = ("x-session-id", "x-litellm-session-id")
_FIXED_LAST = ("session-id", "helicone-session-id")
_SESSION_SUFFIX = re.compile(r"_session_([0-9A-Za-z][0-9A-Za-z-]{7,})$")
_CLEAN = re.compile(r"[^0-9A-Za-z._:@/+=-]")


@dataclass(frozen=True, slots=True)
class ExplicitId:
    """An id the client gave. ``source`` says where it came from (e.g.
    ``header:x-session-id``, ``body:prompt_cache_key``, ``body:metadata.user_id``)."""

    value: str
    source: str


def _clean(value: str) -> str | None:
    v = _CLEAN.sub("_", value.strip())[:MAX_ID_LEN]
    return v or None


def _session_from_user_id(user_id: Any) -> str | None:
    if not isinstance(user_id, str) or not user_id:
        return None
    m = _SESSION_SUFFIX.search(user_id)
    if m:
        return m.group(1)
    if user_id.lstrip().startswith("{"):
        try:
            obj = json.loads(user_id)
        except ValueError:
            return None
        if isinstance(obj, Mapping):
            sid = obj.get("session_id") or obj.get("sessionId")
            if isinstance(sid, str) and sid:
                return sid
    return None


#: The header names :func:`explicit_id` reads, in order, by the vendor session headers a
#: request carries (a client sends the same header names on every request: the names
#: are matched against the vendor pattern once, not on every request).
_VENDOR_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}
_MAX_VENDOR_NAMES = 256


def _candidates(headers: Mapping[str, str]) -> tuple[str, ...]:
    names = tuple(h for h in headers if h.endswith("-session-id"))
    found = _VENDOR_NAMES.get(names)
    if found is None:
        vendor = sorted(h for h in names if _VENDOR_SESSION.match(h) and h not in _FIXED_FIRST)
        found = ("x-conversation-id", *_FIXED_FIRST, *vendor, *_FIXED_LAST)
        if len(_VENDOR_NAMES) >= _MAX_VENDOR_NAMES:
            with contextlib.suppress(RuntimeError):  # another thread changed it meanwhile
                _VENDOR_NAMES.pop(next(iter(_VENDOR_NAMES), names), None)
        _VENDOR_NAMES[names] = found
    return found


def explicit_id(headers: Mapping[str, str], body: Any) -> ExplicitId | None:
    """The client's explicit conversation id, or ``None``. ``headers`` keys must be
    lower-case (as in :class:`proxy.server.hooks.Exchange`)."""
    for name in _candidates(headers):
        raw = headers.get(name)
        if raw:
            v = _clean(raw)
            if v:
                return ExplicitId(v, f"header:{name}")
    if isinstance(body, Mapping):
        pck = body.get("prompt_cache_key")
        if isinstance(pck, str) and pck:
            v = _clean(pck)
            if v:
                return ExplicitId(v, "body:prompt_cache_key")
        meta = body.get("metadata")
        if isinstance(meta, Mapping):
            sid = _session_from_user_id(meta.get("user_id"))
            if sid:
                v = _clean(sid)
                if v:
                    return ExplicitId(v, "body:metadata.user_id")
    return None


def new_conversation_id(explicit: ExplicitId | None, taken: Container[str]) -> str:
    """A conversation id not in ``taken``: random (``cv_…``) without an explicit id, else
    the explicit value (``value.2``, ``value.3`` … when taken). A session value that looks
    like a secret is never shown: the id is then derived from its hash (ids appear in
    headers, logs and the dashboard)."""
    if explicit is None:
        while True:
            cid = "cv_" + secrets.token_hex(8)
            if cid not in taken:
                return cid
    base = explicit.value
    if has_secret(base):
        base = "sid_" + hashlib.sha256(base.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    if base not in taken:
        return base
    k = 2
    while f"{base}.{k}" in taken:
        k += 1
    return f"{base}.{k}"

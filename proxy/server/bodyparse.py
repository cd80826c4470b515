"""Decoding a large request body off the event loop (issue 16).

``json`` decodes a 10 MB string in one C call that holds the GIL for ~25 ms on a quiet
core (several times that on a busy one): run on the event loop — or in a thread, which
needs the GIL just the same — every other tenant's request waits for it. When what
:meth:`~proxy.core.jsonbody.BodyCache.loads` would decode (all of a body seen for the
first time, the new tail of one extending a cached body) is at least
:data:`OFFLOAD_BYTES`, that decoding runs in the request path's worker process
(:func:`proxy.state.offload.run`) and the loop awaits it. The result is exactly
``BodyCache.loads``' (value, exception, cache update); smaller work, and any failure of
the worker, stay on the loop as before. The worker also digests the new messages
that have a long text (hashing 10 MB is ~16 ms), and the gate, building the same
messages from the same text objects, finds their digests made
(:func:`proxy.core.messages.remember_digests`). The long strings of what it decoded come
back as spans of the body the loop holds (:mod:`proxy.core.bodyrefs`), not pickled; an
ASCII one is made from its span a slice at a time (:func:`proxy.server.filled.ascii_texts_later`).
What to decode (:meth:`~proxy.core.jsonbody.BodyCache.plan`: comparing the body with the
tenant's cached ones) is found in a thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.core import bodyrefs
from proxy.core.dialects import from_any
from proxy.core.jsonbody import BodyCache, Decoded, decode_part
from proxy.core.messages import Message, has_long_text, remember_digests
from proxy.server import filled
from proxy.state import offload

__all__ = ["OFFLOAD_BYTES", "loads"]

#: Bytes to decode from which the decoding leaves the event loop (~2.5 ms of decoding).
OFFLOAD_BYTES = 1 << 20


async def loads(cache: BodyCache, raw: bytes, scope: str) -> Any:
    """``cache.loads(raw, scope)``; off the event loop when the decoding is large."""
    if len(raw) < OFFLOAD_BYTES:
        return cache.loads(raw, scope)
    # the plan compares the body with the scope's cached ones (megabytes alike up to
    # their end, for a resent history): in a thread, where the long compares release
    # the GIL (proxy.core.samebytes), not on the loop
    plan = await asyncio.to_thread(cache.plan, raw, scope)
    data, b, mode = plan.part()
    key = plan.base.key if plan.base is not None else "messages"
    done = await _decoded(data, b, mode, key) if plan.pending >= OFFLOAD_BYTES else None
    if done is not None and done[0][0] == "bail":  # the tail is unusual: json.loads decides
        done = await _decoded(raw, 0, "loads", key)
    if done is None:  # a short tail, or no worker: decoded here (the plan not made again)
        decoded = decode_part(data, b, mode)
        if decoded[0] == "bail":
            decoded = decode_part(raw, 0, "loads")
        return cache.finish(plan, decoded)
    decoded, digested = done
    remember_digests(digested)
    return cache.finish(plan, decoded)


async def _decoded(data: bytes, b: int, mode: str, key: str) -> tuple[Decoded, tuple[Message, ...]] | None:
    """:func:`_decode` in the worker (``None``: no worker); its long strings made here
    from ``data`` (:mod:`proxy.core.bodyrefs`)."""
    pickled = await offload.run(_decode, data, b, mode, key)
    if pickled is None:
        return None
    made: dict[tuple[int, int], str] = {}
    await filled.ascii_texts_later(data, bodyrefs.ascii_spans(pickled), made)  # a slice at a time
    return bodyrefs.loads(pickled, data, made)  # type: ignore[no-any-return]


def _decode(data: bytes, b: int, mode: str, key: str) -> bytes:
    """In the worker: :func:`decode_part`, and the new messages (of the array ``key``)
    with a long text as the gate will build them (their texts the very objects of the
    decoded value: one pickle carries both, its long strings as spans of ``data``)."""
    decoded = decode_part(data, b, mode)
    how, what = decoded
    items: Any = None
    if how == "tail":
        items = what[0]
    elif how == "walk" and what[1] is not None:
        key, items = what[1][1], what[1][4]
    elif how == "value" and isinstance(what, dict):
        key = "input" if "input" in what and "messages" not in what else "messages"
        items = what.get(key)
    digested: tuple[Message, ...] = ()
    if isinstance(items, list) and items:
        try:
            msgs = from_any({key: items}).messages
            digested = tuple(m for m in msgs if has_long_text(m))
        except Exception:  # noqa: BLE001 - not a message history: nothing digested ahead
            digested = ()
    return bodyrefs.dumps((decoded, digested), data)

"""The interception contract between the forwarding layer and the gate.

The server turns every proxied request into an :class:`Exchange`, asks the app's
:class:`Interceptor` for a :class:`Decision`, and then either rejects the request,
forwards the original bytes untouched, or forwards a replacement body. If the
decision carries a :class:`ResponseTap`, the response flows through it.

Invariants the server guarantees (and tests assert):

* With ``Decision()`` (the default) request and response bytes are forwarded exactly.
* An exception raised by ``Interceptor.before`` never loses the request: it is logged
  without secrets and the request is forwarded untouched (``gate.fail_open: true``,
  the default) or answered with a 502 ``gate_error`` in the caller's dialect.
* An exception raised by a tap disables that tap; the rest of the response passes
  through untouched (after response headers are sent there is no other safe choice).
* ``Exchange`` never contains credentials: secret headers are removed and the caller
  is identified only by ``tenant``, a hash prefix of its API key.
* Work a decision defers with ``after_send`` runs while upstream works on the request,
  and is finished before the response is relayed; if it fails, the failure is logged
  and the response is relayed without its results (the request was already sent).
* A decision with ``rounds`` may ask upstream again (:class:`Rounds`): the server makes
  each follow-up request itself and relays one response; the client never sees an
  intermediate round. Only an exchange with ``supports_rounds`` gets its ``rounds`` run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "ApiKind",
    "Decision",
    "DialectName",
    "Exchange",
    "FollowUp",
    "Interceptor",
    "NoopInterceptor",
    "Reject",
    "ResponseTap",
    "Rounds",
]

DialectName = Literal["openai", "anthropic"]
ApiKind = Literal[
    "chat",
    "completions",
    "responses",
    "embeddings",
    "models",
    "messages",
    "count_tokens",
    "raw",
]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Exchange:
    """One client request as the gate sees it (read-only, secret-free).

    ``body`` is the exact request body; ``json`` its parsed value when the body is
    JSON (``None`` otherwise, e.g. GET requests and raw non-JSON routes). ``json`` is
    read-only: it is parsed incrementally and shares the parsed messages of earlier
    requests (:mod:`proxy.core.jsonbody`), so a gate that rewrites the body copies the
    containers it changes (as :mod:`proxy.core.interventions` does). ``stream``
    is the request's ``"stream": true`` flag; ``model`` its ``"model"`` string.
    ``headers`` are lower-cased and exclude credentials, cookies and hop-by-hop
    headers. ``path`` and ``query`` are percent-decoded (the raw bytes are forwarded
    upstream unchanged). ``request_id`` is the proxy's own id for correlating log lines.
    ``supports_rounds`` says whether the transport runs a decision's ``rounds`` (the HTTP
    handler and the LiteLLM guardrail's chat completions do; the Responses WebSocket
    relay does not).
    """

    method: str
    path: str
    query: str
    dialect: DialectName
    kind: ApiKind
    headers: Mapping[str, str]
    tenant: str
    body: bytes
    json: Any
    stream: bool
    model: str | None
    request_id: str = ""
    supports_rounds: bool = False


@dataclass(frozen=True)
class Reject:
    """Refuse the request; the server renders it as the caller's dialect error.

    Rejections always carry ``x-should-retry: false`` so official SDKs do not retry.
    The destructive-compaction rejection is ``Reject(400, message,
    code="destructive_compaction")``. Never use ``context_length_exceeded``: agents
    treat it as "compact now" and would loop.
    """

    status: int
    message: str
    code: str = "destructive_compaction"
    type: str = "invalid_request_error"
    param: str | None = None

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError("Reject.status must be a 4xx or 5xx code")


@dataclass(frozen=True)
class Decision:
    """What to do with one request.

    ``action`` is reported in ``x-compaction-gate-action`` and logs (``none``,
    ``warn``, ``reinject``, ``reject``, ``spill``, ``gate``). ``conversation_id`` goes
    to ``x-compaction-gate-conversation``. ``body`` replaces the request body (``None``
    forwards the original bytes untouched; Content-Length is recomputed). ``reject``
    short-circuits the upstream call. ``headers`` are added to the response the
    client receives (also to rejections). ``tap`` observes or rewrites the response.

    ``after_send`` defers work that does not change the request (tracking it) off the
    request's critical path: the server starts it once the request is on its way
    upstream (the body handed to the connection) and awaits it when the response
    headers arrive, before relaying anything. The :class:`Decision` it returns completes
    this one: its ``conversation_id``, ``headers`` and ``tap`` apply to the response
    (it must not set ``body``, ``reject`` or ``after_send``; a decision with
    ``after_send`` must not carry a ``tap`` of its own). The server asks upstream for
    an identity-encoded response whenever a tap is set or may come from ``after_send``.
    The deferred work finishes even if the client goes away; a tap it returns then gets
    ``closed("client_disconnected")``. It runs only if the request is forwarded (not
    with ``reject``).

    ``rounds`` lets the response take more than one upstream round (see :class:`Rounds`);
    what it ends with goes through ``tap`` like any response.
    """

    action: str = "none"
    conversation_id: str | None = None
    body: bytes | None = None
    reject: Reject | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    tap: ResponseTap | None = None
    after_send: Callable[[], Awaitable[Decision]] | None = None
    rounds: Rounds | None = None


@dataclass(frozen=True)
class FollowUp:
    """Ask upstream again: the same method, URL and headers, with ``body``."""

    body: bytes


@runtime_checkable
class Rounds(Protocol):
    """A response that may take several upstream rounds and reaches the client as one.

    After each upstream response the server asks this object whether it is the answer or
    whether to ask upstream again (:class:`FollowUp`); it makes the follow-up requests
    itself. The response is relayed from the first round's status and headers for a
    stream, the last round's for a JSON body, plus :meth:`headers`.

    JSON (non-SSE) responses, any status: ``after_json(status, decoded body)`` returns the
    body to relay, or a :class:`FollowUp`. SSE responses (2xx): ``feed_event`` per complete
    event (its return value goes on to the client, through the decision's tap), then
    ``after_stream()`` at the clean end of each round: events to send before the stream
    ends, or a :class:`FollowUp` whose response's events are fed in turn (a follow-up
    answered with an error status ends the stream with the dialect's error event
    carrying upstream's message). ``closed(reason)`` is called instead of a terminal
    answer when the exchange ends abnormally (``client_disconnected``, ``upstream_error``,
    ``upstream_timeout``, ``content_encoding``, ``no_body``, ``rounds_limit``). A client that goes away
    during any round cancels that round's upstream request. An exception raised by one of
    these methods disables the rounds (the current response is relayed as it is).
    """

    async def after_json(self, status: int, body: bytes) -> bytes | FollowUp:
        ...

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        ...

    async def after_stream(self) -> list[bytes] | FollowUp:
        ...

    def headers(self) -> Mapping[str, str]:
        """Headers for the client's response (asked once its headers are sent: after
        the last round of a JSON response, before the first event of a stream)."""
        ...

    def closed(self, reason: str) -> None:
        ...


@runtime_checkable
class ResponseTap(Protocol):
    """Observes (and may rewrite) one upstream response.

    Call order for a JSON (non-SSE) response: ``feed_json`` once with the complete,
    decoded body (any status, so error bodies are seen too; ``b""`` for HEAD, 204 and
    304, whose return value is ignored). For an SSE response: ``feed_event`` per complete event, then
    ``finish()`` when upstream ended cleanly. ``closed(reason)`` is called instead of
    ``finish()`` (or instead of ``feed_json``) when the exchange ends abnormally:
    ``client_disconnected``, ``upstream_error``, ``upstream_timeout``,
    ``content_encoding`` (upstream compressed the body so it cannot be inspected) or
    ``tap_error``. Exactly one terminal call (``feed_json``/``finish``/``closed``)
    is made per tap.

    Methods are synchronous and run on the event loop: keep them fast and pure.

    Optional attribute ``observe_only``: a tap that sets it to ``True`` promises that
    ``feed_json`` returns its input unchanged and never raises. With ``gate.fail_open``
    (the default) the server then sends a JSON response first and calls ``feed_json``
    in the next event-loop step, before it processes any request that arrives later,
    so recording the reply is off the response's critical path.

    Optional attribute ``settles`` with a coroutine ``settle()``: a tap that sets it to
    ``True`` is awaited (``await tap.settle()``) after its terminal ``feed_json`` or
    ``finish`` and before the end of the response is sent (the JSON body, or the SSE
    stream's final bytes and end): what it records about the response (the reply, in a
    store shared by several replicas) is committed before the client can send its next
    request. Such a tap's ``feed_json`` is called before the body is sent.
    """

    def feed_json(self, status: int, body: bytes) -> bytes:
        """Return the body to send (the same object/bytes when unchanged)."""
        ...

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        """Receive one complete SSE event including its terminating blank line.

        Return ``[raw_event]`` to pass it through, ``[]`` to hold it back, or several
        events to inject. The last event of a stream that ended without a blank line
        is fed as-is (without a terminator).
        """
        ...

    def finish(self) -> list[bytes]:
        """Upstream stream ended cleanly; return events to emit before the end."""
        ...

    def closed(self, reason: str) -> None:
        """The exchange ended abnormally (see class docstring for reasons)."""
        ...


class Interceptor(Protocol):
    """Decides what happens to each proxied request. Must be safe to call concurrently."""

    async def before(self, ex: Exchange) -> Decision:
        """Inspect ``ex`` and return a :class:`Decision` (``Decision()`` = forward as is)."""
        ...


class NoopInterceptor:
    """The default interceptor: forwards everything untouched."""

    async def before(self, ex: Exchange) -> Decision:
        return Decision()

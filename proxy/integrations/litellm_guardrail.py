"""compaction-gate as a LiteLLM proxy guardrail.

Teams that already route their agents through a LiteLLM proxy add one entry to its
``config.yaml`` instead of another hop in front of it::

    guardrails:
      - guardrail_name: compaction-gate
        litellm_params:
          guardrail: proxy.integrations.litellm_guardrail.CompactionGateGuardrail
          mode: [pre_call, post_call]
          default_on: true
          policy: default            # preset name or policy file
          state_backend: sqlite      # or memory
          # state_path: /var/lib/compaction-gate/litellm.sqlite3
          # config: /etc/compaction-gate/config.yaml   (its state:, policy:, gate: sections)
          # api_port: 8789           # serve /gate/ (dashboard, events), /metrics here
          # admin_key: os.environ/GATE_ADMIN_KEY

(or, without parameters, ``litellm_settings: {callbacks:
proxy.integrations.litellm_guardrail.compaction_gate}``, configured from
``COMPACTION_GATE_CONFIG`` / ``COMPACTION_GATE_POLICY``).

This is an adapter, not a second gate: every request goes through the same
:class:`~proxy.gate.interceptor.GateInterceptor` (the :class:`~proxy.server.hooks.Interceptor`
the gate's own server calls) — conversation tracking, transition analysis, the
summarization-call gate, reinject / reject / spill per policy, the tripwire, events and
metrics. The hooks only translate (:mod:`proxy.integrations.litellm_exchange` for the
request, :mod:`proxy.integrations.litellm_objects` for LiteLLM's own types):

- ``async_pre_call_hook``: LiteLLM's request ``data`` →
  :class:`~proxy.server.hooks.Exchange` → ``before()`` → a :class:`Decision`. A
  replacement body is written back into ``data`` (re-injected bindings, the summary
  contract); a rejection is raised as LiteLLM's own :class:`ProxyException`, rendered by
  LiteLLM as HTTP 400 with the OpenAI error body (``code: destructive_compaction``) and
  ``x-should-retry: false``.
- ``async_post_call_success_hook``: the response as JSON through the decision's
  :class:`ResponseTap` (summary check, tripwire, recording the reply).
- ``async_post_call_streaming_iterator_hook``: each chunk as the SSE event the wire
  would carry, through the same tap; a blocked tool call ends the stream with LiteLLM's
  streaming error frame (``StreamingCallbackError``) carrying the gate's message.
- ``async_post_call_response_headers_hook``: ``x-compaction-gate-action`` and
  ``x-compaction-gate-conversation`` on every gated response.
- The recall tool (``Decision.rounds``) on chat completions: LiteLLM lets a guardrail
  make a second upstream call — the proxy's own router (``proxy_server.llm_router``),
  with the request's ``data`` and the follow-up's messages — so the success hook and
  the streaming hook run the rounds as the gate's server does
  (:func:`~proxy.integrations.litellm_objects.follow_up_round`). The Responses API and
  Anthropic ``/v1/messages`` routes of LiteLLM are not offered the tool (their router
  calls differ); they get the spill note instead.

The gate starts (state store, policy watcher, optional operator API) on the first
request, inside LiteLLM's event loop. Its state is per process: with several LiteLLM
workers, each has its own conversations (point them at different ``state_path`` files).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.types.guardrails import GuardrailEventHooks

from ..config import (
    CONFIG_ENV_VAR,
    GateSettings,
    Overrides,
    ProxyConfig,
    apply_overrides,
    load_config,
)
from ..gate.interceptor import GateInterceptor
from ..gate.wiring import build_gate
from ..server.hooks import FollowUp, ResponseTap, Rounds
from ..server.record import H_ACTION, H_CONVERSATION
from .litellm_exchange import CallKind, apply_body, call_kind, exchange_of
from .litellm_objects import (
    MAX_FOLLOW_UPS,
    GateRefusal,
    checked,
    chunk_sse,
    follow_up_round,
    proxy_router,
    refusal,
    response_json,
)
from .operator import create_operator_app

__all__ = ["CompactionGateGuardrail", "GateRefusal"]  # and ``compaction_gate`` (lazy)

log = logging.getLogger("compaction_gate.litellm")

POLICY_ENV_VAR = "COMPACTION_GATE_POLICY"
#: Requests whose response has not been seen yet (a failed call never reports back).
MAX_PENDING = 10_000


@dataclass
class _Pending:
    """One request between its pre-call decision and its response."""

    call: CallKind
    action: str
    conversation_id: str | None
    tap: ResponseTap | None
    #: Whether LiteLLM asked for the response headers yet (success or failure).
    headers_sent: bool = False
    rounds: Rounds | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GuardrailSettings:
    """The guardrail's own parameters (from ``litellm_params``)."""

    config: str | None = None
    policy: str | None = None
    state_backend: str | None = None
    state_path: str | None = None
    api_host: str = "127.0.0.1"
    api_port: int | None = None
    admin_key: str | None = field(default=None, repr=False)

    def proxy_config(self) -> ProxyConfig:
        """The gate's configuration: the config file (or the embedded defaults), then these
        parameters. Raises :class:`~proxy.yamlconf.ConfigError` (file:line) or
        ``ValueError``: LiteLLM then refuses to start, as ``serve`` exits 2."""
        cfg = load_config(self.config)
        cfg = apply_overrides(cfg, Overrides(policy=self.policy))
        state = cfg.state
        if self.state_backend is not None:
            if self.state_backend not in ("sqlite", "memory"):
                raise ValueError(f"compaction-gate guardrail: state_backend must be sqlite or memory, not {self.state_backend!r}")
            state = dataclasses.replace(state, backend=self.state_backend)  # type: ignore[arg-type]
        if self.state_path is not None:
            state = dataclasses.replace(state, path=self.state_path)
        gate = cfg.gate if self.admin_key is None else GateSettings(fail_open=cfg.gate.fail_open, admin_key=self.admin_key)
        return dataclasses.replace(cfg, state=state, gate=gate)


def _port(value: object) -> int | None:
    if value is None or value == "":
        return None
    port = int(str(value))
    if not 0 <= port <= 65535:
        raise ValueError(f"compaction-gate guardrail: api_port out of range: {port}")
    return port


class CompactionGateGuardrail(CustomGuardrail):
    """See the module docstring."""

    def __init__(
        self,
        *,
        config: str | None = None,
        policy: str | None = None,
        state_backend: str | None = None,
        state_path: str | None = None,
        api_host: str | None = None,
        api_port: int | str | None = None,
        admin_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("guardrail_name", "compaction-gate")
        kwargs.setdefault("supported_event_hooks", [GuardrailEventHooks.pre_call, GuardrailEventHooks.post_call])
        super().__init__(**kwargs)
        self.settings = GuardrailSettings(
            config=config,
            policy=policy,
            state_backend=state_backend,
            state_path=state_path,
            api_host=api_host or "127.0.0.1",
            api_port=_port(api_port),
            admin_key=admin_key,
        )
        self.gate_config = self.settings.proxy_config()
        self.gate: GateInterceptor = build_gate(self.gate_config)  # a bad policy fails LiteLLM's start
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._runner: web.AppRunner | None = None
        self._starting: asyncio.Lock | None = None
        self.api_url: str | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the gate in the running loop (idempotent): its state store and policy
        watcher, and the operator API when ``api_port`` is set."""
        if self._runner is not None:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._runner is not None:
                return
            app = create_operator_app(self.gate, admin_key=self.gate_config.gate.admin_key)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()  # runs the gate's lifecycle: tracker start, policy watcher
            if self.settings.api_port is not None:
                site = web.TCPSite(runner, self.settings.api_host, self.settings.api_port)
                await site.start()
                port = next((a[1] for a in runner.addresses if isinstance(a, tuple)), self.settings.api_port)
                host = self.settings.api_host
                self.api_url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
                log.info("compaction-gate operator API on %s (/gate/, /metrics)", self.api_url)
            self._runner = runner

    async def stop(self) -> None:
        """Close the operator API and the gate's store (settles pending accounting)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # ------------------------------------------------------------------ bookkeeping

    def _remember(self, call_id: str, pending: _Pending) -> None:
        if not call_id:
            return
        self._pending[call_id] = pending
        while len(self._pending) > MAX_PENDING:
            _, old = self._pending.popitem(last=False)
            if old.tap is not None:
                old.tap.closed("client_disconnected")

    def _pending_for(self, data: Mapping[str, Any]) -> _Pending | None:
        call_id = data.get("litellm_call_id")
        return self._pending.get(call_id) if isinstance(call_id, str) else None

    def _done(self, data: Mapping[str, Any], pending: _Pending, *, headers: bool = False, tap: bool = False) -> None:
        """Mark a part of the exchange done (LiteLLM asks for the headers and hands over
        the response in either order); forget the request once both are."""
        if headers:
            pending.headers_sent = True
        if tap:
            pending.tap = None
        if pending.headers_sent and pending.tap is None:
            self._pending.pop(str(data.get("litellm_call_id")), None)

    # ------------------------------------------------------------------ request

    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any) -> dict[str, Any]:
        call = call_kind(call_type)
        if call is None:
            return data
        await self.start()
        ex = exchange_of(
            data,
            call,
            getattr(user_api_key_dict, "api_key", None) or getattr(user_api_key_dict, "token", None),
            supports_rounds=call.kind == "chat" and proxy_router() is not None,
        )
        decision = await self.gate.before(ex)
        if decision.after_send is not None:  # deferred tracking: nothing is sent before it here
            later = await decision.after_send()
            decision = dataclasses.replace(
                decision,
                after_send=None,
                conversation_id=later.conversation_id or decision.conversation_id,
                headers={**decision.headers, **later.headers},
                tap=later.tap,
            )
        if decision.reject is not None:
            raise refusal(decision)
        if decision.body is not None:
            apply_body(data, decision.body)
        rounds = decision.rounds if ex.supports_rounds else None
        self._remember(
            ex.request_id,
            _Pending(call, decision.action, decision.conversation_id, decision.tap, rounds=rounds, headers=dict(decision.headers)),
        )
        return data

    async def async_post_call_response_headers_hook(
        self,
        data: dict[Any, Any],
        user_api_key_dict: Any,
        response: object,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        pending = self._pending_for(data)
        if pending is None:
            return None
        headers = {**pending.headers, H_ACTION: pending.action}
        if pending.conversation_id:
            headers[H_CONVERSATION] = pending.conversation_id
        self._done(data, pending, headers=True)
        return headers

    async def async_post_call_failure_hook(
        self,
        request_data: dict[Any, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> Any:
        pending = self._pending_for(request_data)
        if pending is not None and pending.rounds is not None:
            pending.rounds.closed("upstream_error")
            pending.rounds = None
        if pending is not None and pending.tap is not None:
            pending.tap.closed("upstream_error")
            self._done(request_data, pending, tap=True)
        return None

    # ------------------------------------------------------------------ responses

    async def async_post_call_success_hook(self, data: dict[str, Any], user_api_key_dict: Any, response: Any) -> Any:
        pending = self._pending_for(data)
        if pending is None or (pending.tap is None and pending.rounds is None):
            return response
        tap, rounds = pending.tap, pending.rounds
        pending.rounds = None
        self._done(data, pending, tap=True)
        body, rebuild = response_json(response)
        if body is None:
            if rounds is not None:
                rounds.closed("content_encoding")
            if tap is not None:
                tap.closed("content_encoding")  # a response shape the gate cannot read
            return response
        original = out = body
        if rounds is not None:
            answer = await rounds.after_json(200, body)
            follow_ups = 0
            while isinstance(answer, FollowUp):
                if follow_ups >= MAX_FOLLOW_UPS:
                    rounds.closed("rounds_limit")
                    answer = body
                    break
                follow_ups += 1
                try:
                    again = await follow_up_round(data, answer.body, stream=False)
                except Exception:
                    rounds.closed("upstream_error")
                    if tap is not None:
                        tap.closed("upstream_error")
                    raise  # upstream's failure, as LiteLLM reports it
                body, rebuild = response_json(again)
                if body is None:
                    rounds.closed("content_encoding")
                    return again
                answer = await rounds.after_json(200, body)
            out = answer
        if tap is not None:
            out = tap.feed_json(200, out)
        if out is original or out == original:
            return response
        return rebuild(json.loads(out))

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: AsyncIterator[Any], request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        pending = self._pending_for(request_data)
        if pending is None or (pending.tap is None and pending.rounds is None):
            async for chunk in response:
                yield chunk
            return
        tap, rounds = pending.tap, pending.rounds
        pending.rounds = None
        self._done(request_data, pending, tap=True)
        finished = False
        rebuild: Any = None

        def through(events: list[bytes]) -> list[bytes]:
            if tap is None:
                return events
            out: list[bytes] = []
            for e in events:
                out.extend(tap.feed_event(e))
            return out

        try:
            follow_ups = 0
            while True:
                async for chunk in response:
                    raw, rebuild = chunk_sse(chunk)
                    if raw is None:  # not a chunk the gate reads: pass it on
                        yield chunk
                        continue
                    events = rounds.feed_event(raw) if rounds is not None else [raw]
                    for out in checked(through(events)):
                        yield chunk if out == raw else rebuild(out)
                nxt = await rounds.after_stream() if rounds is not None else []
                if isinstance(nxt, FollowUp) and follow_ups < MAX_FOLLOW_UPS:
                    follow_ups += 1
                    response = await follow_up_round(request_data, nxt.body, stream=True)
                    continue
                if isinstance(nxt, FollowUp):
                    assert rounds is not None
                    rounds.closed("rounds_limit")
                    nxt = []
                rounds = None
                break
            finished = True
            tail = through(nxt) + (tap.finish() if tap is not None else [])
            for out in checked(tail):
                yield rebuild(out) if rebuild is not None else out
        finally:
            if not finished:
                if rounds is not None:
                    rounds.closed("client_disconnected")
                if tap is not None:
                    tap.closed("client_disconnected")


def _from_environment() -> CompactionGateGuardrail:
    """The instance ``litellm_settings.callbacks`` refers to, configured from the
    environment (``COMPACTION_GATE_CONFIG``, ``COMPACTION_GATE_POLICY``)."""
    return CompactionGateGuardrail(config=os.environ.get(CONFIG_ENV_VAR) or None, policy=os.environ.get(POLICY_ENV_VAR) or None)


def __getattr__(name: str) -> Any:
    # ``compaction_gate`` is built on first access, so importing this module for the
    # ``guardrails:`` route does not build a second gate.
    if name == "compaction_gate":
        inst = _from_environment()
        globals()["compaction_gate"] = inst
        return inst
    raise AttributeError(name)

"""Prometheus metrics for compaction-gate.

One :class:`Metrics` object per application owns a *dedicated*
:class:`prometheus_client.CollectorRegistry` (never the process-global one), so two
proxies in one process (tests, the demo) never share counters, and importing this
module has no side effects.

The typed methods are the only way other modules record things. They are cheap
(no I/O, no allocation beyond the label lookup) and never raise on odd input.

Label hygiene (the contract that keeps ``/metrics`` safe and bounded):

- No conversation ids, session ids, tenant hashes, API keys or identifier values are
  ever labels. Labels are routes, HTTP status codes, transition kinds, action names
  and identifier *kinds* only.
- Routes are normalised to the fixed set of proxied routes (:data:`KNOWN_ROUTES`);
  any other ``/v1/`` path becomes ``/v1/other``, gate endpoints ``/gate``, the rest
  ``other``. A raw request path never becomes a label.
- Free-form label values (kinds, actions) are lower-cased, restricted to
  ``[a-z0-9_.:-]`` and 48 characters, and each family accepts at most
  :data:`MAX_LABEL_VALUES` distinct values; past that, new values count as ``other``.

Exposition: :func:`metrics_handler` serves ``GET /metrics`` from the instance stored
under :data:`METRICS_KEY` in the aiohttp app.

Several workers (``serve --workers N``): each process writes its values to files in
``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode, a private directory
the supervisor creates and cleans, :mod:`proxy.server.workers`), and whichever worker
answers a scrape adds up every worker's counters and histograms
(``Metrics(multiprocess=True)``). The one gauge, conversations tracked, is the same
count of the shared store in every worker: the most recently written value is served.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = [
    "KNOWN_ROUTES",
    "LATENCY_BUCKETS",
    "MAX_LABEL_VALUES",
    "METRICS_KEY",
    "Metrics",
    "metrics_handler",
    "normalise_route",
]

#: Namespace prefix of every metric family.
PREFIX = "compaction_gate"

#: Routes that keep their own label value; everything else is folded.
KNOWN_ROUTES: frozenset[str] = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/embeddings",
        "/v1/models",
        "/v1/messages",
        "/v1/messages/count_tokens",
    }
)

#: Added latency is proxy overhead, so the buckets are fine-grained below 100 ms.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    float("inf"),
)

#: Maximum distinct values one free-form label may take before folding into "other".
MAX_LABEL_VALUES = 64
#: (raw route, status) pairs whose labelled series are kept resolved.
_CHILD_CACHE = 1024

_LABEL_RE = re.compile(r"[^a-z0-9_.:-]+")


def normalise_route(path: str) -> str:
    """Map a request path to a bounded route label (never the raw path)."""
    path = path.split("?", 1)[0]
    if len(path) > 1:
        path = path.rstrip("/")
    if path in KNOWN_ROUTES:
        return path
    if path.startswith("/v1/") or path == "/v1":
        return "/v1/other"
    if path == "/gate" or path.startswith("/gate/"):
        return "/gate"
    if path in ("/metrics", "/healthz"):
        return path
    return "other"


class _LabelGuard:
    """Sanitises one free-form label and bounds its cardinality."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: object) -> str:
        text = _LABEL_RE.sub("_", str(value).strip().lower())[:48].strip("_") or "unknown"
        if text in self._seen:
            return text
        with self._lock:
            if text in self._seen:
                return text
            if len(self._seen) >= self._limit:
                return "other"
            self._seen.add(text)
            return text


class Metrics:
    """All metric families of one proxy, in a dedicated registry.

    Create one per application and share it (via :data:`METRICS_KEY`) with the
    server, the tracker and the gate interceptor. Every method is safe to call from
    any coroutine or thread.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, multiprocess: bool = False) -> None:
        self.registry: CollectorRegistry = registry or CollectorRegistry(auto_describe=True)
        #: render every worker's values (see the module docstring)
        self.multiprocess = multiprocess
        r = self.registry
        self._requests = Counter(
            f"{PREFIX}_requests",
            "Requests handled by the proxy, by route and HTTP status.",
            ("route", "status"),
            registry=r,
        )
        self._errors = Counter(
            f"{PREFIX}_request_errors",
            "Requests answered with an HTTP error status (>= 400), by route and status.",
            ("route", "status"),
            registry=r,
        )
        self._latency = Histogram(
            f"{PREFIX}_added_latency_seconds",
            "Time spent in the proxy itself, excluding the upstream, per request.",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._streamed = Counter(
            f"{PREFIX}_streamed_bytes",
            "Bytes of streamed (SSE) response bodies forwarded to clients.",
            ("route",),
            registry=r,
        )
        self._conversations = Gauge(
            f"{PREFIX}_conversations_tracked",
            "Conversations currently held by the tracker (of the shared store, with several replicas).",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self._compactions = Counter(
            f"{PREFIX}_compactions",
            "History transitions that rewrote the history, by transition kind.",
            ("kind",),
            registry=r,
        )
        self._destructive = Counter(
            f"{PREFIX}_destructive_compactions",
            "Compactions that dropped or altered a binding an open obligation needs.",
            registry=r,
        )
        self._actions = Counter(
            f"{PREFIX}_actions",
            "Actions the gate took on a request or response, by action.",
            ("action",),
            registry=r,
        )
        self._dropped = Counter(
            f"{PREFIX}_bindings_dropped",
            "Required bindings dropped (or altered) by a compaction, by identifier kind.",
            ("kind",),
            registry=r,
        )
        self._reinjected = Counter(
            f"{PREFIX}_bindings_reinjected",
            "Bindings the gate put back verbatim, by identifier kind.",
            ("kind",),
            registry=r,
        )
        self._gated = Counter(
            f"{PREFIX}_summarization_calls_gated",
            "Summarization requests the gate added a binding contract to.",
            registry=r,
        )
        self._tripwire = Counter(
            f"{PREFIX}_tripwire_hits",
            "Hallucinated bindings caught in tool-call arguments after a compaction.",
            registry=r,
        )
        self._analysis_errors = Counter(
            f"{PREFIX}_analysis_errors",
            "Errors inside tracking or analysis (the request is still served per policy).",
            registry=r,
        )
        self._state_errors = Counter(
            f"{PREFIX}_state_errors",
            "Requests served without their state: the state store was unreachable, timed out, "
            "refused a command, or other replicas kept changing the conversation (by reason).",
            ("reason",),
            registry=r,
        )
        self._recalls = Counter(
            f"{PREFIX}_recalls",
            "Calls of the recall tool the gate resolved, by outcome (found, not_found, invalid, budget).",
            ("outcome",),
            registry=r,
        )
        self._recall_bytes = Counter(
            f"{PREFIX}_recall_bytes",
            "Bytes of compacted context the recall tool returned to the model.",
            registry=r,
        )
        self._recall_rounds = Counter(
            f"{PREFIX}_recall_rounds",
            "Follow-up upstream rounds the gate made to answer recall calls.",
            registry=r,
        )
        self._kind = _LabelGuard()
        self._reinjected_kind = _LabelGuard()
        self._dropped_kind = _LabelGuard()
        self._action = _LabelGuard()
        self._status = _LabelGuard(limit=128)
        self._state_reason = _LabelGuard(limit=16)
        self._request_children: dict[tuple[str, int], tuple[Any, Any, Any]] = {}
        #: awaited before each scrape (e.g. counting a shared store's conversations)
        self.before_scrape: list[Callable[[], Awaitable[None]]] = []

    # -- requests -------------------------------------------------------------------

    def observe_request(
        self, route: str, status: int, added_latency_s: float | None = None
    ) -> None:
        """Record one finished request.

        ``route`` may be a raw path; it is normalised with :func:`normalise_route`.
        ``added_latency_s`` is the proxy's own time (excluding upstream), if known.
        """
        key = (route, status)
        children = self._request_children.get(key)
        if children is None:
            children = self._children_for(route, status)
        requests, errors, latency = children
        requests.inc()
        if errors is not None:
            errors.inc()
        if added_latency_s is not None and added_latency_s >= 0:
            latency.observe(added_latency_s)

    def _children_for(self, route: str, status: int) -> tuple[Any, Any, Any]:
        """The labelled series one (route, status) pair counts into, cached: resolving
        labels on every request costs more than counting."""
        label = normalise_route(route)
        code = self._status(int(status)) if isinstance(status, int) else "unknown"
        children = (
            self._requests.labels(label, code),
            self._errors.labels(label, code) if isinstance(status, int) and status >= 400 else None,
            self._latency.labels(label),
        )
        if len(self._request_children) >= _CHILD_CACHE:
            self._request_children.clear()  # raw paths (ids in them) must not grow it
        self._request_children[(route, status)] = children
        return children

    def streamed_bytes(self, n: int, route: str = "other") -> None:
        """Add ``n`` bytes of streamed response body forwarded for ``route``."""
        if n > 0:
            self._streamed.labels(normalise_route(route)).inc(n)

    # -- conversations --------------------------------------------------------------

    def set_conversations_tracked(self, n: int) -> None:
        """Set the number of conversations the tracker currently holds."""
        self._conversations.set(max(0, n))

    def track_conversations(self, count: Callable[[], int]) -> None:
        """Read the conversation count from ``count`` at every scrape instead."""
        self._conversations.set_function(lambda: float(count()))

    # -- analysis and decisions -----------------------------------------------------

    def compaction(self, kind: str) -> None:
        """Count one non-append transition of ``kind`` (summarize, truncate, mask …)."""
        self._compactions.labels(self._kind(kind)).inc()

    def destructive(self) -> None:
        """Count one destructive compaction."""
        self._destructive.inc()

    def action(self, name: str) -> None:
        """Count one action taken (warn, reinject, reject, spill, gate, block …)."""
        self._actions.labels(self._action(name)).inc()

    def binding_dropped(self, kind: str, n: int = 1) -> None:
        """Count ``n`` required bindings of identifier ``kind`` dropped or altered."""
        if n > 0:
            self._dropped.labels(self._dropped_kind(kind)).inc(n)

    def binding_reinjected(self, kind: str, n: int = 1) -> None:
        """Count ``n`` bindings of identifier ``kind`` re-injected verbatim."""
        if n > 0:
            self._reinjected.labels(self._reinjected_kind(kind)).inc(n)

    def summarization_gated(self) -> None:
        """Count one summarization call that received a binding contract."""
        self._gated.inc()

    def tripwire_hit(self, n: int = 1) -> None:
        """Count ``n`` hallucinated bindings caught by the tripwire."""
        if n > 0:
            self._tripwire.inc(n)

    def recall(self, outcome: str, nbytes: int = 0) -> None:
        """Count one resolved recall call (``outcome`` is one of a fixed few) and the
        bytes it returned."""
        label = outcome if outcome in ("found", "not_found", "invalid", "budget") else "other"
        self._recalls.labels(label).inc()
        if nbytes > 0:
            self._recall_bytes.inc(nbytes)

    def recall_round(self) -> None:
        """Count one follow-up upstream round asked for a recall."""
        self._recall_rounds.inc()

    def analysis_error(self) -> None:
        """Count one error raised inside tracking or analysis."""
        self._analysis_errors.inc()

    def state_error(self, reason: str) -> None:
        """Count one request served without its state (``reason``: unreachable, timeout,
        error, conflict, busy)."""
        self._state_errors.labels(self._state_reason(reason)).inc()

    def observe_transition(
        self, kind: str, *, destructive: bool, dropped_kinds: Iterable[str] = ()
    ) -> None:
        """Convenience for an analysis result: compaction, destructive, dropped kinds.

        ``append`` (and an empty kind) is not a compaction and only counts dropped
        kinds, which should then be empty.
        """
        if kind and kind not in ("append", "new", "none", "identical"):
            self.compaction(kind)
        if destructive:
            self.destructive()
        for k in dropped_kinds:
            self.binding_dropped(k)

    # -- exposition -----------------------------------------------------------------

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format (every worker's values
        added up in multiprocess mode)."""
        if self.multiprocess:
            from prometheus_client import multiprocess

            merged = CollectorRegistry()
            multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
            return generate_latest(merged)
        return generate_latest(self.registry)


#: Where the app keeps its :class:`Metrics` instance.
METRICS_KEY: web.AppKey[Metrics] = web.AppKey("compaction_gate_metrics", Metrics)


async def metrics_handler(request: web.Request) -> web.Response:
    """``GET /metrics``: the app's registry in the text exposition format.

    Access control (admin key / loopback) is applied by
    :func:`proxy.dashboard.access.gate_access_middleware`, not here.
    """
    metrics = request.app.get(METRICS_KEY)
    if metrics is not None:
        for refresh in metrics.before_scrape:
            await refresh()
    body = metrics.render() if metrics is not None else b""
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

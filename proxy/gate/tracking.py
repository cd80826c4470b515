"""Tracking as an interceptor: :class:`TrackingInterceptor` forwards every request
untouched and tracks it off the critical path; the reply is recorded by
:class:`~proxy.gate.replytap.TrackingTap`.

The policy layer (:mod:`proxy.gate.interceptor`) composes :meth:`Tracker.observe` with
its own analysis instead, and records replies with the same tap.
"""

from __future__ import annotations

from proxy.gate.replytap import TrackingTap
from proxy.gate.tracker import Tracker
from proxy.server.hooks import Decision, Exchange

__all__ = ["TrackingInterceptor", "TrackingTap"]

#: Attempts to record a request when other replicas keep changing its conversation first.
COMMIT_ATTEMPTS = 5


class TrackingInterceptor:
    """An :class:`~proxy.server.hooks.Interceptor` that only tracks: every request is
    forwarded untouched. Tracking never delays a request: it is deferred
    (``Decision.after_send``) until the request is on its way upstream, and completes
    the response with the resolved conversation id and a reply-recording tap."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    async def before(self, ex: Exchange) -> Decision:
        if not self.tracker.tracks(ex):
            return Decision()

        async def track() -> Decision:
            for _attempt in range(COMMIT_ATTEMPTS):
                obs = await self.tracker.observe(ex, defer_accounting=True)
                if obs is None:
                    return Decision()
                if await self.tracker.commit(obs.conversation_id):  # a shared store: CAS
                    break
            else:
                return Decision()
            return Decision(conversation_id=obs.conversation_id, tap=self.tracker.tap(obs))

        return Decision(after_send=track)

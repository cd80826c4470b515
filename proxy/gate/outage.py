"""The gate while its state store cannot be reached.

A request whose state cannot be read or committed (Redis down, a locked SQLite file,
other replicas changing the conversation faster than it can be decided) is forwarded
untouched when ``gate.fail_open`` (the default) or refused with a 503 in the caller's
dialect; either way a ``state_unavailable`` event and the ``state_errors_total{reason}``
metric say why. The first request served normally afterwards records
``state_recovered`` (with how long the outage lasted). The store reconnects by itself
(see :mod:`proxy.state.redis_conn`); nothing needs a restart.
"""

from __future__ import annotations

import logging
import time

from ..server.hooks import Decision, Exchange, Reject
from ..state.protocol import StateUnavailable
from .recording import DecisionRecorder

__all__ = ["Outage"]

log = logging.getLogger("compaction_gate.gate")


class Outage:
    def __init__(self, recorder: DecisionRecorder, fail_open: bool) -> None:
        self.recorder = recorder
        self.fail_open = fail_open
        self.down_since: float | None = None
        self.failed = 0

    def decision(self, ex: Exchange, exc: StateUnavailable, cid: str | None = None) -> Decision:
        """Record why the state was unavailable for ``ex`` and decide per ``fail_open``."""
        if self.down_since is None:
            self.down_since = time.time()
        self.failed += 1
        self.recorder.metrics.state_error(exc.reason)
        action = "none" if self.fail_open else "reject"
        self.recorder.record_local(
            ex,
            cid,
            "state_unavailable",
            action,
            reason=exc.reason,
            message=f"state store unavailable ({exc.reason}): "
            + ("forwarded untouched" if self.fail_open else "refused"),
        )
        if self.fail_open:
            return Decision(conversation_id=cid)
        return Decision(
            action="reject",
            conversation_id=cid,
            reject=Reject(
                503,
                "compaction-gate cannot reach its state store and is configured to fail closed; retry later.",
                code="state_unavailable",
                type="api_error",
            ),
        )

    def recovered(self, ex: Exchange) -> None:
        """A request was served with its state: end the outage, if there was one."""
        if self.down_since is None:
            return
        seconds = round(time.time() - self.down_since, 3)
        failed, self.down_since, self.failed = self.failed, None, 0
        self.recorder.record(
            ex,
            None,
            "state_recovered",
            "none",
            down_seconds=seconds,
            failed_requests=failed,
            message=f"state store reachable again after {seconds} s ({failed} request(s) served without it)",
        )

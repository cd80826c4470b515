"""What the gate remembers per conversation between requests.

After a destructive compaction the gate keeps answering for it: the repair is *sticky*
(:class:`Pending`) until the client itself sends the bindings again, and the tripwire
stays armed for ``tripwire.window`` requests. The state lives in memory only, bounded
by an LRU of conversations; losing it (restart, eviction) only ends the stickiness.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from ..core.interventions.bindings import Binding

#: The actions whose repair is repeated on the conversation's later requests.
StickyAction = Literal["reinject", "spill", "reject"]


@dataclass
class Pending:
    """A destructive compaction the gate is still answering for (sticky repair).

    ``anchor_digest`` is the digest of the message the note follows (the summary), so the
    note lands at the same place in later requests; ``footer`` is the spill note."""

    action: StickyAction
    bindings: list[Binding]
    anchor_digest: str | None
    footer: str | None = None


@dataclass
class ConversationState:
    """``armed``: responses still checked by the tripwire; ``dropped_kinds``,
    ``expected`` and ``known_norms`` are its input (from the compaction's signals);
    ``tripwire_request`` the fingerprint of the request it last checked."""

    pending: Pending | None = None
    armed: int = 0
    dropped_kinds: frozenset[str] = frozenset()
    expected: dict[str, tuple[str, ...]] = field(default_factory=dict)
    known_norms: set[str] = field(default_factory=set)
    #: the request the tripwire last checked (a retry of it does not consume ``armed``)
    tripwire_request: str | None = None


class ConversationStates:
    """An LRU of :class:`ConversationState` by conversation id (thread-safe)."""

    def __init__(self, max_conversations: int) -> None:
        self.max_conversations = max_conversations
        self._state: OrderedDict[str, ConversationState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, cid: str) -> ConversationState:
        """The state of ``cid`` (created empty), marked most recently used."""
        with self._lock:
            st = self._state.get(cid)
            if st is None:
                st = self._state[cid] = ConversationState()
            self._state.move_to_end(cid)
            while len(self._state) > self.max_conversations:
                self._state.popitem(last=False)
            return st

    def __len__(self) -> int:
        return len(self._state)

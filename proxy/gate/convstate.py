"""What the gate remembers per conversation between requests.

After a destructive compaction the gate keeps answering for it: the repair is *sticky*
(:class:`Pending`) until the client itself sends the bindings again, the tripwire stays
armed for ``tripwire.window`` requests, and the bindings the conversation lost are kept
(``lost``) so that its next summarization call is asked to restore them (the way forward
after a refusal). The state is held in an LRU of conversations and written through to the
state store with the conversation's record (:meth:`ConversationStates.save`), so a
restart loses none of it: a re-injected note does not silently vanish, a refusal stays a
refusal, an armed tripwire stays armed.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.interventions.bindings import Binding
from ..core.interventions.recall_tool import RecallHandle

#: The actions whose repair is repeated on the conversation's later requests.
StickyAction = Literal["reinject", "spill", "reject"]

#: Known identifier norms kept per conversation for the tripwire (the most recent).
MAX_KNOWN_NORMS = 20_000
#: Spill handles the recall tool offers per conversation (the most recent).
MAX_RECALL_HANDLES = 8


@dataclass
class Pending:
    """A destructive compaction the gate is still answering for (sticky repair).

    ``anchor_digest`` is the digest of the message the note follows (the summary), so the
    note lands at the same place in later requests; ``footer`` is the spill note."""

    action: StickyAction
    bindings: list[Binding]
    anchor_digest: str | None
    footer: str | None = None
    #: key of the summary's own part within the anchor message (the note follows it)
    anchor_part: str | None = None
    #: ``spill``: the handle of the stored region (the note names the recall tool when the
    #: request is offered it)
    handle: str | None = None


@dataclass
class ConversationState:
    """``armed``: responses still checked by the tripwire; ``dropped_kinds``,
    ``expected`` and ``known_norms`` are its input (from the compaction's signals);
    ``tripwire_request`` the fingerprint of the request it last checked (a retry of it
    is checked again without consuming ``armed``).
    ``lost``: required bindings destructive compactions dropped that the client has not
    sent back yet (sensitive ones only as their redacted form)."""

    pending: Pending | None = None
    armed: int = 0
    dropped_kinds: frozenset[str] = frozenset()
    expected: dict[str, tuple[str, ...]] = field(default_factory=dict)
    known_norms: set[str] = field(default_factory=set)
    lost: list[Binding] = field(default_factory=list)
    #: bindings the gate has contracted for this conversation: they stay required in its
    #: later compactions wherever they now sit (in a summary, in the gate's own appended
    #: section), so a re-summary of a summary cannot drop them unnoticed
    protected: list[Binding] = field(default_factory=list)
    tripwire_request: str | None = None
    #: the spilled regions the recall tool offers (most recent last), and what the
    #: conversation has used of its recall budget
    recall: list[RecallHandle] = field(default_factory=list)
    recall_rounds: int = 0
    recall_bytes: int = 0

    def add_recall(self, handle: RecallHandle) -> None:
        self.recall = [h for h in self.recall if h.handle != handle.handle][-(MAX_RECALL_HANDLES - 1):] + [handle]

    def protect(self, bindings: Sequence[Binding]) -> None:
        have = {b.value for b in self.protected}
        self.protected += [b for b in bindings if not b.sensitive and b.value not in have]

    def is_empty(self) -> bool:
        return (
            self.pending is None
            and self.armed <= 0
            and not self.lost
            and not self.protected
            and not self.recall
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (no secret in clear: sensitive bindings carry their redacted
        value already, see :func:`proxy.gate.identifiers.lost_binding`)."""
        p = self.pending
        return {
            "pending": None
            if p is None
            else {
                "action": p.action,
                "bindings": [_binding_dict(b) for b in p.bindings],
                "anchor_digest": p.anchor_digest,
                "footer": p.footer,
                "anchor_part": p.anchor_part,
                "handle": p.handle,
            },
            "armed": self.armed,
            "dropped_kinds": sorted(self.dropped_kinds),
            "expected": {k: list(v) for k, v in self.expected.items()},
            "known_norms": sorted(self.known_norms)[-MAX_KNOWN_NORMS:] if self.armed > 0 else [],
            "lost": [_binding_dict(b) for b in self.lost],
            "protected": [_binding_dict(b) for b in self.protected],
            "tripwire_request": self.tripwire_request,
            "recall": [h.to_dict() for h in self.recall],
            "recall_rounds": self.recall_rounds,
            "recall_bytes": self.recall_bytes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConversationState:
        p = d.get("pending")
        pending = None
        if isinstance(p, Mapping):
            pending = Pending(
                p["action"],
                [_binding_of(b) for b in p.get("bindings") or ()],
                p.get("anchor_digest"),
                p.get("footer"),
                p.get("anchor_part"),
                p.get("handle"),
            )
        return cls(
            pending=pending,
            armed=int(d.get("armed") or 0),
            dropped_kinds=frozenset(d.get("dropped_kinds") or ()),
            expected={k: tuple(v) for k, v in (d.get("expected") or {}).items()},
            known_norms=set(d.get("known_norms") or ()),
            lost=[_binding_of(b) for b in d.get("lost") or ()],
            protected=[_binding_of(b) for b in d.get("protected") or ()],
            tripwire_request=d.get("tripwire_request") if isinstance(d.get("tripwire_request"), str) else None,
            recall=[RecallHandle.from_dict(h) for h in d.get("recall") or ()],
            recall_rounds=int(d.get("recall_rounds") or 0),
            recall_bytes=int(d.get("recall_bytes") or 0),
        )


_BINDING_FIELDS = tuple(f.name for f in dataclasses.fields(Binding))


def _binding_dict(b: Binding) -> dict[str, Any]:
    return {k: getattr(b, k) for k in _BINDING_FIELDS}


def _binding_of(d: Mapping[str, Any]) -> Binding:
    return Binding(**{k: d[k] for k in _BINDING_FIELDS if k in d})


#: ``load(cid)`` → the stored state dict (or ``None``); ``save(cid, dict_or_None)``.
Loader = Callable[[str], "Mapping[str, Any] | None"]
Saver = Callable[[str, "dict[str, Any] | None"], None]
#: ``version(cid)`` → what the stored state is validated against (see ConversationStates).
Versioner = Callable[[str], object]


class ConversationStates:
    """An LRU of :class:`ConversationState` by conversation id (thread-safe), read from
    and written to a backing store when given (``load``/``save``).

    ``version(cid)``: a token that changes when the backing record changes under us (a store
    shared with other replicas, :meth:`~proxy.gate.tracker.Tracker.version`); a cached state
    whose token differs is read again. After this process commits its own change it calls
    :meth:`confirm`, so its own writes never force a re-read."""

    def __init__(
        self,
        max_conversations: int,
        *,
        load: Loader | None = None,
        save: Saver | None = None,
        version: Versioner | None = None,
    ) -> None:
        self.max_conversations = max_conversations
        self._state: OrderedDict[str, ConversationState] = OrderedDict()
        self._saved: dict[str, dict[str, Any] | None] = {}
        self._versions: dict[str, object] = {}
        self._lock = threading.Lock()
        self._load = load
        self._save = save
        self._version = version

    def confirm(self, cid: str) -> None:
        """The backing record now holds this process's state of ``cid``."""
        if self._version is not None:
            with self._lock:
                if cid in self._state:
                    self._versions[cid] = self._version(cid)

    def get(self, cid: str) -> ConversationState:
        """The state of ``cid`` (loaded from the backing store, else created empty),
        marked most recently used."""
        with self._lock:
            st = self._state.get(cid)
            if st is not None and self._version is not None and self._versions.get(cid) != self._version(cid):
                st = None  # the record changed under us: read it again
            if st is None:
                stored = self._load(cid) if self._load is not None else None
                st = ConversationState.from_dict(stored) if stored else ConversationState()
                self._state[cid] = st
                self._saved[cid] = dict(stored) if stored else None
                if self._version is not None:
                    self._versions[cid] = self._version(cid)
            self._state.move_to_end(cid)
            while len(self._state) > self.max_conversations:
                old, _ = self._state.popitem(last=False)
                self._saved.pop(old, None)
                self._versions.pop(old, None)
            return st

    def save(self, cid: str) -> None:
        """Write ``cid``'s state through to the backing store if it changed."""
        if self._save is None:
            return
        with self._lock:
            st = self._state.get(cid)
            if st is None:
                return
            d = None if st.is_empty() else st.to_dict()
            if d == self._saved.get(cid):
                return
            self._saved[cid] = d
        self._save(cid, d)

    def __len__(self) -> int:
        return len(self._state)

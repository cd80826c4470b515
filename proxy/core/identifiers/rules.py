"""A detector rule, compiled: :class:`Rule` with its examples (:class:`Example`), the
binding classes a rule's values belong to, and :class:`CatalogError`. Rules are written in YAML
(``detectors.yaml``, user rules in a policy), compiled by :mod:`.compiler` and collected in
a :class:`~.catalog.Catalog`; this module holds what a compiled rule is, and the schema
it is written in.

A rule (gitleaks / Nosey Parker style) is data::

    - id: git-sha-short              # unique rule id (reported as Identifier.detector)
      kind: git_sha                  # identifier kind
      pattern: '(?<![\\w-])(?P<id>[0-9a-fA-F]{7,12})(?![\\w-])'   # compiled once
      group: id                      # capture group holding the value (default: "id" if
                                     # the pattern has it, else the whole match)
      anchors: [git, commit]         # literal prefilter (case-insensitive): the rule runs
                                     # only if one occurs in the text or the source command
      context:
        required: [commit, sha, HEAD, git]   # one must occur near the match (or in the
                                             # producing command / tool name)
        window: 60                   # characters before the match (after: window // 2)
        scope: window                # window | line | text
      regenerable: false             # default regenerability of the kind
      sensitive: false               # secrets class: never re-injected in clear
      priority: 40                   # overlap resolution: higher wins
      binding: version               # what such a value is to the provenance rules
                                     # (PRINCIPLES.md; see BINDING_CLASSES below)
      nests: false                   # a locator (path/URL) that may contain other matches
      norm: "{topic}:{partition}@{offset}"   # optional norm template over named groups
      validators: [has_digit_and_letter]     # named in validators.VALIDATORS, all must pass
      filters: []                    # extra filters (filters.FILTERS) on top of defaults
      skip_filters: [number]         # default filters this rule does not run
      examples:                      # each must yield this kind with this value
        - {text: "commit d1bf724 fixes it", value: d1bf724}
        - {text: "d1bf724 Fix", value: d1bf724, command: "git log --oneline"}
      negative_examples:             # must not yield this kind
        - "build 1234567 passed"

Speed fields (see :mod:`.scanner`; all are necessary conditions of a match, so they never
change what a rule finds, only how fast):

- ``tokens``: whole words (snake/kebab/camel pieces, lower case) one of which must occur;
  the match starts at the word unless ``reach[0] > 0``.
- ``anchors``: substrings one of which must occur (``"://"``, ``"sk-ant-"``).
- ``prefilter`` (``hex``, ``alnum26``, ``underscore8``, ``digit4``, ``dash5``, ``hexpairs``;
  see :data:`.textindex.PREFILTERS`) with ``run_len``:
  the match starts at (or near) a run of such characters of that length.
- ``expand``: a character class; the match may start before the anchor, at the left end
  of the run of these characters (``[\\w.-]`` before the ``/`` of a path).
- ``reach: [before, after]``: how far a match may start before / extend after a hit.
- ``boundary``: ``word`` (no alphanumeric before the match) or ``camel`` (also ``fooId``).
- ``group`` may list several groups (alternatives): the first that participates.
- ``max_len``: upper bound of a value's length (window sizes).

Context keywords match at word starts; a keyword matches its plural/past forms
(``commit`` → ``commits``); a trailing ``*`` makes it a prefix (``migrat*``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from .filters import Filter
from .validators import Validator

__all__ = ["BINDING_CLASSES", "CatalogError", "Example", "Rule"]

ContextScope = Literal["window", "line", "text"]
BindingClass = Literal["handle", "receipt", "version", "state", "name", "noise"]

#: What a detected value is, for the provenance rules (:mod:`.provenance`):
#:
#: - ``handle``: the identifier of an entity or an operation (upload id, lock token,
#:   refund id, UUID …): required when a state-changing step minted it.
#: - ``receipt``: the receipt or ack handle of a received message (SQS ``ReceiptHandle``,
#:   Pub/Sub ``ackId``): a handle that only the receive issuing it can give — the receive
#:   leased the message — so required where a step printed it first, also one whose verb
#:   no list knows (``pull``, ``poll``); a step known to be a read can give it again.
#: - ``version``: the id of an immutable version that is also the *value* of a state
#:   (a commit, a migration revision, an image digest): required when minted, and as
#:   the prior state of a later change (the HEAD before a reset).
#: - ``state``: a value of a state, never an entity (an offset, an LSN, an image
#:   reference, a DNS target): the new value a change reports is current state that can
#:   be read again; required only as the prior state of a change.
#: - ``name``: a human-given name or locator (a path, a URL, a terraform address, a k8s
#:   ``kind/name``): required only when it has a machine-made part (a stamp, a random
#:   suffix) and a state-changing step minted it.
#: - ``noise``: ids of read-only noise (request and trace ids, layer digests of a
#:   pull, wheel hashes): never required unless the agent itself wrote it into a
#:   state-changing call.
BINDING_CLASSES: tuple[str, ...] = ("handle", "receipt", "version", "state", "name", "noise")
Boundary = Literal["word", "camel"]
#: Compiled pattern of the rule engine (``regex`` when available, else ``re``).
Pattern = Any


class CatalogError(ValueError):
    """A rule file or user rule is invalid. The message names the file and line."""


@dataclass(frozen=True, slots=True)
class Example:
    """A detector example: ``text`` scanned with an optional producing ``command``/``tool``
    as source context; ``value`` is what must (or, for negatives, ``None``) be found."""

    text: str
    value: str | None = None
    command: str | None = None
    tool: str | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled detector (see the module docstring for the fields' meaning)."""

    id: str
    kind: str
    pattern: Pattern
    #: The capture group holding the value (or several alternatives: the first that
    #: participates in the match).
    group: str | int | tuple[str, ...]
    anchors: tuple[str, ...]
    context_required: re.Pattern[str] | None
    context_boost: re.Pattern[str] | None
    window: int
    scope: ContextScope
    regenerable: bool
    sensitive: bool
    priority: int
    nests: bool
    norm: str | None
    validators: tuple[Validator, ...]
    filters: tuple[Filter, ...]
    validator_names: tuple[str, ...] = ()
    filter_names: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()
    negative_examples: tuple[Example, ...] = ()
    description: str = ""
    origin: str = ""
    max_len: int = 0
    #: The rule's regex-backed filters combined into one pattern (fullmatch = exclude),
    #: and its other filters; together equivalent to ``filters``.
    filter_rx: re.Pattern[str] | None = None
    filter_fns: tuple[Filter, ...] = ()
    #: A named prefilter (``hex``: 7+ hex digits; ``alnum26``: 26+ alphanumerics;
    #: ``underscore8``: ``_`` then 8+ alphanumerics; ``digit4``; ``dash5``: a dash and
    #: five closing a name; ``hexpairs``: 8+ colon-separated hex pairs), computed once
    #: per text.
    prefilter: str | None = None
    #: Only prefilter runs with a length in ``[min, max]`` can start a match.
    run_len: tuple[int, int] | None = None
    #: How far a match may start before / end after an anchor or prefilter hit.
    reach: tuple[int, int] = (64, 1024)
    #: Check at the match start: ``word`` (no letter/digit before) or ``camel`` (also
    #: allows ``fooId``/``foo_id``); cheaper than a leading look-behind.
    boundary: Boundary | None = None
    #: Lower-cased literal forms of the required context keywords with, for each, whether
    #: it is a whole word (checked against the text's word set) or a substring.
    context_literals: tuple[tuple[str, bool], ...] = ()
    #: Whole-word anchors (lower case; snake/kebab/camel pieces of the text count).
    tokens: tuple[str, ...] = ()
    #: Characters that may precede an anchor inside the identifier (``/`` in a path,
    #: ``://`` in a URL): the match starts at the left end of their run (a ``bytes``
    #: pattern run over the reversed ASCII view of the text).
    expand: re.Pattern[bytes] | None = None
    #: What such a value is to the provenance rules (:data:`BINDING_CLASSES`).
    binding: BindingClass = "handle"
    raw: str = field(default="", compare=False, repr=False)

"""Identifier extraction layer: detectors, filters, sources, regenerability, normalisation.

Public API (stable; the diff, signals and ``check`` build on it):

- :class:`Source`, :class:`Identifier` (:mod:`.model`)
- :class:`Catalog` (:mod:`.catalog`): ``Catalog.load_default()``,
  ``Catalog.build(extra_rules, disabled, allowlist)``
- :func:`extract_text`, :func:`extract_snapshot`, :func:`snapshot_calls` (:mod:`.extract`)
- :func:`scan_text`, :class:`Match` (:mod:`.textscan`)
- :func:`classify_call`, :func:`classify_command`, :class:`CallClass` (:mod:`.commands`)
- :func:`mark_regenerability`, :func:`default_regenerable`, :class:`RegenPolicy`,
  :class:`CallRecord` (:mod:`.regen`)
- :func:`normalize`, :func:`relation`, :func:`is_prefix_alias`, :func:`is_alias`,
  :func:`is_altered`, :func:`find_altered_in_text` (:mod:`.normalize`)

Sensitive identifiers (secrets): ``value`` is the clear secret and must never be logged,
stored or re-injected; use ``Identifier.display`` / ``context`` / ``norm`` (fingerprint).
"""

from .catalog import Catalog
from .commands import CallClass, classify_call, classify_command, command_of, is_shell_tool
from .extract import (
    DEFAULT_CACHE,
    ScanCache,
    extract_snapshot,
    extract_text,
    snapshot_calls,
)
from .model import (
    LOCATOR_KINDS,
    SYSTEM_INDEX,
    TOOLS_INDEX,
    Identifier,
    Origin,
    Source,
    fingerprint,
    redact,
)
from .normalize import (
    Relation,
    find_altered_in_text,
    is_alias,
    is_altered,
    is_prefix_alias,
    normalize,
    relation,
)
from .regen import (
    STABLE_NAME_KINDS,
    CallRecord,
    RegenPolicy,
    default_regenerable,
    mark_regenerability,
)
from .rules import CatalogError, Example, Rule
from .textscan import Match, scan_text

__all__ = [
    "DEFAULT_CACHE",
    "LOCATOR_KINDS",
    "STABLE_NAME_KINDS",
    "SYSTEM_INDEX",
    "TOOLS_INDEX",
    "CallClass",
    "CallRecord",
    "Catalog",
    "CatalogError",
    "Example",
    "Identifier",
    "Match",
    "Origin",
    "RegenPolicy",
    "Relation",
    "Rule",
    "ScanCache",
    "Source",
    "classify_call",
    "classify_command",
    "command_of",
    "default_regenerable",
    "extract_snapshot",
    "extract_text",
    "find_altered_in_text",
    "fingerprint",
    "is_alias",
    "is_altered",
    "is_prefix_alias",
    "is_shell_tool",
    "mark_regenerability",
    "normalize",
    "redact",
    "relation",
    "scan_text",
    "snapshot_calls",
]

"""Redacting secrets out of free text, with the gate's own detectors (no I/O).

One list of what is secret: the identifier catalog's rules flagged ``sensitive``
(``proxy/core/identifiers/detectors.yaml``, plus a policy's own rules). Whatever the gate
treats as a secret — and only that — is replaced before text is written anywhere that
outlives the request: the state store, the spill store, logs. Capability handles (lock
tokens, lease ids, upload ids) are bindings, not credentials: the catalog decides.

Cost: a long text is scanned in overlapping windows (bounded pieces of work); a first
pass runs only the sensitive rules (their literal gates skip almost every
text at C speed); only a text in which one of them matches is scanned with the whole
catalog, so that overlap resolution is exactly the gate's (a higher-priority binding
that contains a secret-looking token stays a binding; a locator holding a secret is
redacted whole).

Redaction errs on the side of hiding: a value in a secret's format is redacted even when
it looks like a documentation placeholder (``ghp_`` + a counting sequence, ``sk-…abcdef…``)
— the analysis may ignore such a value as a binding, but the at-rest copy never shows it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from functools import lru_cache

from .identifiers.catalog import Catalog, default_catalog_loaded, default_rules_where
from .identifiers.rules import Rule
from .identifiers.textscan import scan_text

__all__ = ["apply_spans", "has_secret", "placeholder", "redact_secrets", "secret_spans", "sensitive_only"]


def placeholder(kind: str) -> str:
    """What replaces a secret of ``kind``: no character of the secret, its kind only."""
    return f"[redacted:{kind}]"


def _unfiltered(rule: Rule) -> Rule:
    """A sensitive ``rule`` without its placeholder / word / … filters (``raw`` differs so
    that the catalog's fingerprint, an extraction cache key, does)."""
    return dataclasses.replace(
        rule, filters=(), filter_names=(), filter_rx=None, filter_fns=(), raw=rule.raw + "\n#unfiltered"
    )


@lru_cache(maxsize=16)
def _for_redaction(catalog: Catalog) -> Catalog:
    """``catalog`` with its sensitive rules unfiltered."""
    return Catalog(tuple(_unfiltered(r) if r.sensitive else r for r in catalog.rules), catalog.allowlist)


@lru_cache(maxsize=16)
def _sensitive_only(catalog: Catalog) -> Catalog:
    return Catalog(tuple(r for r in _for_redaction(catalog).rules if r.sensitive), catalog.allowlist)


@lru_cache(maxsize=1)
def _default_sensitive() -> Catalog:
    return Catalog(tuple(_unfiltered(r) for r in default_rules_where(lambda raw: bool(raw.get("sensitive")))))


def sensitive_only(catalog: Catalog | None = None) -> Catalog:
    """The sensitive rules of ``catalog`` (default: the shipped detectors), unfiltered.
    The default is built from the sensitive rules alone while the whole shipped catalogue
    is not compiled yet (a process's first log line does not wait for 78 rules)."""
    if catalog is None:
        return _sensitive_only(Catalog.load_default()) if default_catalog_loaded() else _default_sensitive()
    return _sensitive_only(catalog)


#: Texts longer than this are scanned in windows of this many characters, overlapping
#: by :data:`OVERLAP` (more than the longest secret a detector matches, a PEM private
#: key): each scan is a bounded piece of work, so a thread redacting megabytes lets the
#: event loop run between pieces.
WINDOW = 1 << 18
OVERLAP = 1 << 15


def _window_spans(text: str, catalog: Catalog | None) -> list[tuple[int, int, str, str]]:
    if not text or not scan_text(text, sensitive_only(catalog)):
        return []
    full = _for_redaction(catalog or Catalog.load_default())
    return [(m.start, m.end, m.kind, m.value) for m in scan_text(text, full) if m.sensitive]


def _spans(text: str, catalog: Catalog | None) -> list[tuple[int, int, str, str]]:
    """Sensitive spans ``(start, end, kind, value)`` of ``text``, outermost first."""
    if len(text) <= WINDOW:
        found = _window_spans(text, catalog)
    else:
        found = []
        for at in range(0, len(text), WINDOW - OVERLAP):
            found += [(s + at, e + at, k, v) for s, e, k, v in _window_spans(text[at : at + WINDOW], catalog)]
            if at + WINDOW >= len(text):
                break
    found.sort(key=lambda s: (s[0], -s[1]))
    out: list[tuple[int, int, str, str]] = []
    for span in found:
        if out and span[0] < out[-1][1]:
            continue  # nested in (or overlapping) a span already redacted
        out.append(span)
    return out


def has_secret(text: str, catalog: Catalog | None = None) -> bool:
    """Whether ``text`` holds anything the gate treats as a secret."""
    return bool(_spans(text, catalog))


def secret_spans(text: str, catalog: Catalog | None = None) -> list[tuple[int, int, str, str]]:
    """The secrets in ``text`` as ``(start, end, kind, value)``, in order, none nested:
    what :func:`redact_secrets` replaces (the costly part, for a caller that runs it
    elsewhere and applies the result with :func:`apply_spans`)."""
    return _spans(text, catalog)


def redact_secrets(text: str, catalog: Catalog | None = None, *, keep: Collection[str] = ()) -> str:
    """``text`` with every secret the gate would detect replaced by
    :func:`placeholder`; values in ``keep`` are left in clear (the caller holds them under
    a stronger guarantee). Text without secrets is returned as is (the same object)."""
    return apply_spans(text, secret_spans(text, catalog), keep=keep)


def apply_spans(text: str, spans: list[tuple[int, int, str, str]], *, keep: Collection[str] = ()) -> str:
    """``text`` with :func:`secret_spans`' ``spans`` of it replaced by their placeholders
    (values in ``keep`` left in clear); ``text`` itself when nothing is replaced."""
    if not spans:
        return text
    parts: list[str] = []
    at = 0
    for start, end, kind, value in spans:
        if value in keep:
            continue
        parts.append(text[at:start])
        parts.append(placeholder(kind))
        at = end
    if at == 0:
        return text
    parts.append(text[at:])
    return "".join(parts)

"""False-positive filters: small pure functions ``(value) -> bool`` that *exclude*.

"Plugins find, filters exclude" (detect-secrets): a detector proposes a candidate, every
filter named for it may veto it. A filter returns ``True`` when the value is NOT an opaque
identifier (a date, a version, a port, a word, a documentation placeholder …).

Each detector runs the :data:`DEFAULT_FILTERS` unless it lists ``skip_filters``; a rule
may add more with ``filters``. Filters must be cheap: they run on every candidate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_FILTERS",
    "FILTERS",
    "REGEX_FILTERS",
    "Filter",
    "combined_filter",
    "is_date",
    "is_example_url",
    "is_placeholder",
    "is_plain_number",
    "is_port",
    "is_template",
    "is_time",
    "is_version",
    "is_word",
    "is_year",
]

Filter = Callable[[str], bool]

_DATE_BODY = r"""(?:
        \d{4}[-/.]\d{1,2}[-/.]\d{1,2}(?:[T\s_]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?
      | \d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}
      | \d{4}\d{2}\d{2}(?:T\d{6}Z?)?
      | \d{1,2}/\d{1,2}
    )"""
_TIME_BODY = r"\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:\s?[AaPp][Mm])?"
_VERSION_BODY = (
    r"(?:(?:[vV]|version[-_ ]?)\d+(?:\.\d+){0,3}|\d+(?:\.\d+){1,3})"
    r"(?:[-+.]?(?:a|b|rc|alpha|beta|dev|post|pre|final|snapshot|lts)\.?\d*)?"
)
_NUMBER_BODY = r"[+-]?(?:\d+(?:[.,_]\d+)*|\d*\.\d+|0x[0-9a-f]{1,8})(?:e[+-]?\d+)?%?"
_YEAR_BODY = r"(?:19\d\d|2[01]\d\d)"
_TEMPLATE_BODY = r"(?:\$\{?[A-Za-z_]\w*\}?|%[sd]|\{[\w.]*\}|<[^>]*>|\*+|null|none|nil|true|false|undefined|n/?a)"

#: Regex-backed filters: name -> (body, case-insensitive). Combined per rule into one
#: compiled alternation (one regex call per candidate instead of one per filter).
REGEX_FILTERS: Mapping[str, tuple[str, bool]] = {
    "date": (_DATE_BODY, False),
    "time": (_TIME_BODY, False),
    "version": (_VERSION_BODY, True),
    "number": (_NUMBER_BODY, True),
    "year": (_YEAR_BODY, False),
    "template": (_TEMPLATE_BODY, True),
}


def _piece(name: str) -> str:
    body, ci = REGEX_FILTERS[name]
    flags = "ix" if ci and name == "date" else "i" if ci else "x" if name == "date" else ""
    return f"(?{flags}:{body})" if flags else f"(?:{body})"


def combined_filter(names: Iterable[str]) -> re.Pattern[str] | None:
    """One regex that fullmatches a value iff any of the named regex filters would."""
    pieces = [_piece(n) for n in names if n in REGEX_FILTERS]
    return re.compile("|".join(pieces)) if pieces else None


_DATE_RE = re.compile(f"^{_piece('date')}$")
_TIME_RE = re.compile(f"^{_piece('time')}$")
_VERSION_RE = re.compile(f"^{_piece('version')}$")
_NUMBER_RE = re.compile(f"^{_piece('number')}$")
_YEAR_RE = re.compile(f"^{_piece('year')}$")
_ANY_DIGIT = re.compile(r"\d")
_WORD_PIECE = re.compile(r"^(?:[a-z]+|[A-Z][a-z]+|[A-Z]+)$")
_WORD_SPLIT = re.compile(r"[_\-\s./]+")
_CAMEL_SPLIT = re.compile(r"(?<=[a-z])(?=[A-Z])")


def is_date(value: str) -> bool:
    """ISO / US / compact dates and datetimes (``2024-05-01``, ``05/01/2024``, ``20240501``)."""
    return bool(_DATE_RE.match(value))


def is_time(value: str) -> bool:
    """Clock times (``12:30``, ``09:15:02.123``)."""
    return bool(_TIME_RE.match(value))


def is_version(value: str) -> bool:
    """Version numbers (``1.2.3``, ``v2``, ``3.11.7``, ``2.0.0rc1``)."""
    return bool(_VERSION_RE.match(value))


def is_port(value: str) -> bool:
    """Port numbers, bare or as ``:8080`` / ``host:8080`` suffix only."""
    v = value.rsplit(":", 1)[-1] if ":" in value else value
    return v.isdigit() and len(v) <= 5 and int(v) <= 65535 and (value.startswith(":") or value == v)


def is_year(value: str) -> bool:
    """A year between 1900 and 2199."""
    return bool(_YEAR_RE.match(value))


def is_plain_number(value: str) -> bool:
    """Integers, decimals, percentages, small hex literals (``0x1f``)."""
    return bool(_NUMBER_RE.match(value))


def is_word(value: str) -> bool:
    """English-like words and word compounds (``hello``, ``user_name``, ``getUserName``,
    ``README``): only letters, every piece lower, Capitalised or ALLCAPS."""
    if not value or _ANY_DIGIT.search(value) is not None:
        return False
    pieces = [p for p in _WORD_SPLIT.split(value) if p]
    if not pieces:
        return True
    for p in pieces:
        for q in _CAMEL_SPLIT.split(p):
            if not _WORD_PIECE.match(q):
                return False
    return True


_PLACEHOLDER_LITERALS = frozenset(
    s.lower()
    for s in (
        "123e4567-e89b-12d3-a456-426614174000",
        "123e4567-e89b-12d3-a456-426655440000",
        "12345678-1234-1234-1234-123456789012",
        "12345678-1234-5678-1234-567812345678",
        "12345678-90ab-cdef-1234-567890abcdef",
        "550e8400-e29b-41d4-a716-446655440000",
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",  # the ULID spec example
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "i-1234567890abcdef0",
        "i-0123456789abcdef0",
        "vol-049df61146c4d7901",
        "ami-0abcdef1234567890",
        "sg-903004f8",
        "subnet-6e7f829e",
        "vpc-1a2b3c4d",
        "123456789012",
        "0123456789abcdef",
        "e83c5163316f89bfbde7d9ab23ca2e25604af290",  # git's own initial commit (tutorials)
        "da39a3ee5e6b4b0d3255bfef95601890afd80709",  # sha1 of ""
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # sha256 of ""
        "d41d8cd98f00b204e9800998ecf8427e",  # md5 of ""
        "4b825dc642cb6eb9a060e54bf8d69288fbee4904",  # git empty tree
    )
)
_PLACEHOLDER_WORDS = re.compile(
    "|".join(
        re.escape(w)
        for w in (
            "deadbeef", "cafebabe", "feedface", "baadf00d", "decafbad", "abadbabe", "defaced",
            "example", "sample", "dummy", "placeholder", "changeme", "your_", "your-", "yourtoken",
            "xxxx", "redacted", "<", ">", "${", "{{", "%(", "...", "…",
        )
    )
)
_SEQUENCES = ("0123456789abcdefghijklmnopqrstuvwxyz0123456789", "9876543210fedcba9876543210")
_SEP_RE = re.compile(r"[-_:./]")
#: documentation-style ids: abc123, xyz-456, sess-789, foo_42, my-id-001
_DOC_SHAPE = re.compile(r"^(?:[a-z]{1,5}[-_]){0,2}(?:abc|xyz|foo|bar|baz|test|demo|sample|sess|my|some|fake|mock)?[-_]?(?:123|1234|12345|123456|456|789|000|0000|001|0001|42|99|999)$")
_TYPE_PREFIX = re.compile(r"^[a-z]{1,6}\d{0,3}(?=[-_:])[-_:]")


_SEQ8 = re.compile("|".join(sorted({re.escape(s[i : i + 8]) for s in _SEQUENCES for i in range(len(s) - 7)})))


def _mostly_sequence(body: str) -> bool:
    """A run of a counting sequence covers ≥ 70% of ``body`` (and ≥ 8 characters)."""
    n = len(body)
    need = max(8, -(-7 * n // 10))
    if need > n or _SEQ8.search(body) is None:
        return False
    for seq in _SEQUENCES:
        for i in range(0, n - need + 1):
            if body[i : i + need] in seq:
                return True
    return False


def is_placeholder(value: str) -> bool:
    """Documentation / test placeholders: the nil UUID, repeated characters, counting
    sequences (``1234567``, ``abcdef12``), well-known doc ids (``AKIAIOSFODNN7EXAMPLE``,
    ``123e4567-e89b-…``, ``i-1234567890abcdef0``), hexspeak (``deadbeef``), template
    markers (``<id>``, ``${X}``, ``xxxx``)."""
    low = value.lower()
    if low in _PLACEHOLDER_LITERALS or _PLACEHOLDER_WORDS.search(low) or _DOC_SHAPE.match(low):
        return True
    core = _SEP_RE.sub("", low)
    distinct = len(set(core))
    if (len(core) >= 6 and distinct == 1) or (len(core) >= 8 and distinct <= 2):
        return True
    # strip a short alphabetic type prefix such as "i-", "pi_", "sha256:"
    body = _TYPE_PREFIX.sub("", low)
    if body in _PLACEHOLDER_LITERALS:
        return True
    body = _SEP_RE.sub("", body)
    if len(body) >= 6:
        if len(set(body)) <= 2:
            return True
        for seq in _SEQUENCES:
            if body in seq:
                return True
        if _mostly_sequence(body):
            return True
    return False


_EXAMPLE_HOST_RE = re.compile(r"(?:^|\.)(?:example\.(?:com|org|net|edu)|example|test|invalid|localhost\.example)$")


def is_example_url(value: str) -> bool:
    """URLs on documentation hosts (RFC 2606/6761): ``example.com``/``.org``/``.net``,
    ``*.example``, ``*.test``, ``*.invalid``."""
    if "://" not in value:
        return False
    try:
        host = (urlsplit(value).hostname or "").lower()
    except ValueError:
        return False
    return bool(host) and bool(_EXAMPLE_HOST_RE.search(host))


_TEMPLATE_RE = re.compile(f"^{_piece('template')}$")


def is_template(value: str) -> bool:
    """Template variables and null-ish values (``$VAR``, ``${VAR}``, ``{id}``, ``<id>``,
    ``***``, ``null``, ``None``)."""
    return bool(_TEMPLATE_RE.match(value))


#: Every filter by name (rule files refer to these names).
FILTERS: Mapping[str, Filter] = {
    "date": is_date,
    "time": is_time,
    "version": is_version,
    "port": is_port,
    "year": is_year,
    "number": is_plain_number,
    "word": is_word,
    "placeholder": is_placeholder,
    "example_url": is_example_url,
    "template": is_template,
}

#: Filters every detector runs unless it opts out with ``skip_filters``.
DEFAULT_FILTERS: tuple[str, ...] = ("template", "placeholder", "date", "time", "version", "year", "number", "word")

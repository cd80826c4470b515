"""Named validators: small pure functions ``(value) -> bool`` that must all *accept* a
candidate for its detector to report it (a rule lists them by name in ``validators``).

Also the shape measures used by the fallback detector for unknown opaque tokens:
Shannon entropy and tiktoken fragmentation (tokens per character — random tokens split
into many short BPE pieces, words and code identifiers do not).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from functools import lru_cache

from .filters import is_word

__all__ = [
    "VALIDATORS",
    "Validator",
    "fragmentation",
    "generated_suffix",
    "has_opaque_part",
    "looks_opaque",
    "shannon_entropy",
]

Validator = Callable[[str], bool]


def shannon_entropy(value: str) -> float:
    """Shannon entropy of the character distribution, in bits per character."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


@lru_cache(maxsize=8192)
def fragmentation(value: str) -> float:
    """cl100k tokens per character of ``value`` (words ≈ 0.2–0.3, random ≈ 0.5+)."""
    if not value:
        return 0.0
    from proxy.tokenizer import get_encoding  # lazy: only the fallback detector needs it

    return len(get_encoding("cl100k_base").encode_ordinary(value)) / len(value)


_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[^\W\d_]")
_LOWER = re.compile(r"[a-z]")
_UPPER = re.compile(r"[A-Z]")


def _has_digit(v: str) -> bool:
    return _DIGIT.search(v) is not None


def _has_letter(v: str) -> bool:
    return _LETTER.search(v) is not None


def has_digit_and_letter(v: str) -> bool:
    return _has_digit(v) and _has_letter(v)


def has_digit(v: str) -> bool:
    return _has_digit(v)


def looks_opaque(v: str, *, min_len: int = 8, min_entropy_ratio: float = 0.72, min_frag: float = 0.3) -> bool:
    """Conservative "is this a machine-made token" test used by the fallback detector:
    long enough, digits and letters mixed, high entropy relative to its length, and many
    BPE tokens per character."""
    core = v.strip("-_")
    if len(core) < min_len or len(core) > 128:
        return False
    if not has_digit_and_letter(core):
        return False
    if _transitions(core) < max(3, len(core) // 4):
        return False
    ent = shannon_entropy(core)
    if ent < min_entropy_ratio * math.log2(min(len(core), 36)):
        return False
    return fragmentation(core) >= min_frag


_CLASS_TABLE = str.maketrans(
    {**{c: "0" for c in "0123456789"}, **{c: "a" for c in "abcdefghijklmnopqrstuvwxyz"}, **{c: "A" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}}
)
_CLASS_RUN = re.compile(r"0+|a+|A+")


def _transitions(v: str) -> int:
    """Changes of character class (digit / lower / upper) between adjacent ASCII
    alphanumerics: random tokens change often, words and ``snake_case_2`` names rarely."""
    return max(0, len(_CLASS_RUN.findall("".join(_CLASS_RUN.findall(v.translate(_CLASS_TABLE))))) - 1) if v else 0


def opaque_token(v: str) -> bool:
    return looks_opaque(v)


def opaque_value(v: str) -> bool:
    """A value named by a context keyword (``upload_id: …``): at least 6 characters, not a
    word, with a digit, or long and mixed-case (base64 such as S3 UploadIds)."""
    if len(v) < 6 or is_word(v):
        return False
    if _has_digit(v) and _has_letter(v):
        return True
    if v.isdigit():
        return len(v) >= 6
    return len(v) >= 16 and _LOWER.search(v) is not None and _UPPER.search(v) is not None


_PIECES = re.compile(r"[A-Za-z0-9]+")
_HEX_RUN = re.compile(r"^[0-9a-fA-F]+$")
#: A date with a time of day (to the minute at least): ``20240611T021500``,
#: ``2024-06-11T02-15``, ``2024-06-11_02:15:00`` — a stamp nobody can derive later.
_STAMP = re.compile(r"\d{8}[T_\-]?\d{4,6}|\d{4}-\d{2}-\d{2}[T_ \-]\d{2}[:\-]?\d{2}")
_UUID_IN = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _opaque_piece(p: str) -> bool:
    """One alphanumeric run of a value is machine-made (see :func:`has_opaque_part`)."""
    n = len(p)
    if n < 6:
        return False
    if p.isdigit():
        return n >= 10  # a numeric id or an epoch stamp; order numbers and years are not
    if not has_digit_and_letter(p):
        # letters only: random when long and case-mixed inside (``JhUFPGSrXCl``)
        return n >= 12 and _transitions(p) >= max(4, n // 4)
    if _HEX_RUN.match(p) and n >= 7:
        return True
    if n < 8:
        return False
    tr = _transitions(p)
    # two class changes (``vwga6nxuxe`` vs ``api2server``): many BPE pieces per character
    # is what tells a random token from words glued to a number
    return tr >= 3 or (tr == 2 and fragmentation(p) >= 0.4)


def opaque_body(value: str) -> bool:
    """The part after a vendor prefix (``var_``, ``chg_``, ``lk_``) is machine-made."""
    body = value.split("_", 1)[-1] if "_" in value else value
    return has_opaque_part(body)


def has_opaque_part(value: str) -> bool:
    """Whether ``value`` contains a machine-made part that nobody could derive again: a
    random run (hex with digits and letters, a case- and digit-mixed token), a UUID, a
    long numeric id, or a date-time stamp. Human-given names (``deploy/payments``,
    ``exports/orders-2026-11.parquet``, ``billing-v2``, ``x86_64``) have none. This is
    the shape test of PRINCIPLES §1 and §3b: an opaque identifier must be reproduced
    exactly; a derivable name can be typed again."""
    if _UUID_IN.search(value) or _STAMP.search(value):
        return True
    return any(_opaque_piece(p) for p in _PIECES.findall(value))


#: The last dash piece of a name a server generated from a prefix (Kubernetes
#: ``generateName``: ``migrate-23mt8``, ``api-7d9f8b6c5d-rdvzn``): five lower-case letters
#: and digits. Kubernetes draws them from an alphabet without vowels; a piece with a vowel
#: is still generated when it is no word followed by a number (``4asvw`` but not ``west1``,
#: ``node2``). Digits only, or a number with a unit (``500gb``, ``2048m``), read as
#: numbers a person gave.
_SUFFIX = re.compile(r"(?<![a-z0-9])[a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?P<suffix>[a-z0-9]{5})$")
_UNIT = re.compile(r"^\d+(?:[kmgtp]i?b?|b|x|s|h|d|w)$")
_WORD_NUMBER = re.compile(r"^[a-z]+\d+$")
_VOWEL = re.compile(r"[aeiouy]")


def generated_suffix(value: str) -> bool:
    """Whether ``value`` (or its last path segment) ends in a generated suffix: the name
    a step made from a prefix it was given, not derivable from the call (PRINCIPLES §2a,
    §3b)."""
    m = _SUFFIX.search(value.rsplit("/", 1)[-1])
    if m is None:
        return False
    suffix = m.group("suffix")
    if suffix.isdigit() or _UNIT.match(suffix):
        return False
    if not _VOWEL.search(suffix):
        return True
    return not suffix.isalpha() and _WORD_NUMBER.match(suffix) is None


_ULID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")


def ulid(v: str) -> bool:
    """Crockford base32, 26 chars, first char 0–7, one case, digits and letters."""
    if not (v.isupper() or v.islower()):
        return False
    return bool(_ULID_RE.match(v.upper())) and has_digit_and_letter(v) and sum(c.isdigit() for c in v) >= 4


_B64URL_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def jwt(v: str) -> bool:
    """Three base64url parts, the header decodes to JSON with ``alg`` or ``typ``."""
    parts = v.split(".")
    if len(parts) != 3 or not all(_B64URL_RE.match(p) for p in parts[:2]):
        return False
    head = parts[0] + "=" * (-len(parts[0]) % 4)
    try:
        obj = json.loads(base64.urlsafe_b64decode(head))
    except (ValueError, binascii.Error):
        return False
    return isinstance(obj, dict) and ("alg" in obj or "typ" in obj)


_KNOWN_DIRS = frozenset(
    """src lib libs tests test spec specs app apps docs doc bin sbin scripts script migrations
    migration alembic versions config configs conf etc pkg cmd internal build dist out target
    node_modules vendor deploy deployments k8s kubernetes manifests charts helm terraform infra
    db sql api web server client components pages public static assets templates include
    tools tmp var usr opt home root srv data logs log proxy core modules module packages
    fixtures examples services service handlers models views controllers utils util""".split()
)
_EXT_RE = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,9}$|\.[0-9][A-Za-z][A-Za-z0-9]{0,8}$")


def path_shape(v: str) -> bool:
    """A path worth tracking: absolute with two components or an extension, or relative
    with an extension on its last component, or starting with ``./`` ``../`` ``~/`` or a
    well-known directory (``src/``, ``tests/``, ``migrations/`` …). Rejects fractions,
    ``and/or`` and ``k8s kind/name``."""
    if "\\" in v:
        return bool(re.match(r"^[A-Za-z]:\\", v)) and len(v) > 4
    p = v.rstrip("/")
    if not p or "/" not in v:
        return False
    comps = [c for c in p.split("/") if c and c != "."]
    if not comps or all(c == ".." for c in comps):
        return False
    last = comps[-1]
    has_ext = (bool(_EXT_RE.search(last)) and not last.startswith(".")) or (last.startswith(".") and len(last) > 2)
    if any(c.isdigit() for c in p.replace("/", "")) and all(c.isdigit() or c in "/.-" for c in p):
        return False  # 1/2, 12/05/2024, 3.5/4
    if v.startswith("/"):
        return len(comps) >= 2 or has_ext
    if v.startswith(("./", "../", "~/")):
        return True
    if has_ext:
        return True
    return comps[0] in _KNOWN_DIRS and len(comps) >= 2


_FILE_EXT = re.compile(r"\.(?:py|pyi|js|jsx|ts|tsx|go|rs|java|kt|rb|php|c|cc|cpp|h|hpp|cs|swift|scala|sh|md|txt|rst|json|ya?ml|toml|ini|cfg|html|css|sql|lock|log)$")


def image_ref(v: str) -> bool:
    """``repo:tag`` image references: the repository has a letter; the tag has a digit, or
    is ``latest``, or the repository is namespaced (``org/app``)."""
    if "@" in v:
        return True
    repo, _, tag = v.rpartition(":")
    if not repo or not tag or "/" in tag:
        return False
    if not any(c.isalpha() for c in repo):
        return False
    if repo.isdigit():
        return False
    if tag.isdigit() and len(tag) >= 4 and "/" not in repo:
        return False  # host:port
    if tag.isdigit() and _FILE_EXT.search(repo):
        return False  # file.py:12 (a file and line)
    return any(c.isdigit() for c in tag) or tag == "latest" or "/" in repo


def lsn(v: str) -> bool:
    """Postgres LSN ``X/Y``: both hex, not a date or fraction (needs a hex letter or a
    part longer than 2)."""
    a, _, b = v.partition("/")
    if not a or not b:
        return False
    return any(c.isalpha() for c in v) or max(len(a), len(b)) > 4


def stripe_body(v: str) -> bool:
    """Body after the Stripe prefix: 8+ alphanumerics with a digit and a letter."""
    body = v.split("_", 1)[-1]
    if body.startswith(("test_", "live_")):
        body = body[5:]
    if len(body) < 8 or not has_digit_and_letter(body):
        return False
    mixed = _LOWER.search(body) is not None and _UPPER.search(body) is not None
    return mixed or looks_opaque(body)


def secret_value(v: str) -> bool:
    """A credential-looking assignment value: 6+ chars, not a variable reference,
    function call or word."""
    if len(v) < 6 or v[0] in "$%{<(" or "(" in v or "os.environ" in v or "getenv" in v:
        return False
    return not is_word(v)


def not_all_digits(v: str) -> bool:
    return not v.isdigit()


_UUID_SHAPE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def not_uuid(v: str) -> bool:
    """Not UUID-shaped (the ``uuid`` rule owns those; lets fallbacks reject them early)."""
    return _UUID_SHAPE.match(v) is None


#: Every validator by name (rule files refer to these names).
VALIDATORS: Mapping[str, Validator] = {
    "has_digit_and_letter": has_digit_and_letter,
    "has_digit": has_digit,
    "opaque_token": opaque_token,
    "opaque_value": opaque_value,
    "ulid": ulid,
    "jwt": jwt,
    "path_shape": path_shape,
    "image_ref": image_ref,
    "lsn": lsn,
    "stripe_body": stripe_body,
    "secret_value": secret_value,
    "not_all_digits": not_all_digits,
    "not_uuid": not_uuid,
    "opaque_part": has_opaque_part,
    "opaque_body": opaque_body,
    "generated_suffix": generated_suffix,
}

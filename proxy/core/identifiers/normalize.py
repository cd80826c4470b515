"""Normalisation (diff identity) and relations between identifier values.

Contracts:
- :func:`normalize` is pure and idempotent: ``normalize(normalize(v, k), k) == normalize(v, k)``.
- Hex kinds are case folded (SHAs, digests, UUIDs, Alembic revisions, AWS ids, LSNs,
  GTIDs); ULIDs are upper-cased; paths lose trailing slashes, ``./`` segments and
  duplicate slashes but absolute and relative stay distinct; URLs get scheme and host
  lower-cased; k8s ``kind/name`` uses the canonical kind (``deploy`` → ``deployment``);
  Django migrations drop the app label; Flyway versions become dotted numbers.
- Relations (used by the diff): ``same`` (equal norms), ``alias`` (the other value
  denotes the same thing: a ≥7-char prefix of a full SHA/digest, ``0006`` for
  ``0006_auto``, a relative path that an absolute one ends with … see :func:`is_alias`),
  ``altered`` (a damaged copy: truncated too short, elided, an absolute path made
  relative, a one-character typo, a changed UUID segment — never counts as surviving).
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from .model import fingerprint

__all__ = [
    "HEX_KINDS",
    "PREFIX_KINDS",
    "Relation",
    "edit_distance",
    "find_altered_in_text",
    "identifying_token",
    "is_alias",
    "is_altered",
    "is_prefix_alias",
    "normalize",
    "relation",
    "trim_value",
]

#: Kinds whose values are hexadecimal (case-insensitive) wholly or in their id part.
HEX_KINDS: frozenset[str] = frozenset(
    {
        "git_sha",
        "uuid",
        "hex_id",
        "hex_digest",
        "oci_digest",
        "alembic_revision",
        "aws_resource_id",
        "postgres_lsn",
        "mysql_gtid",
    }
)
#: Kinds where a long-enough prefix denotes the same object (abbreviated SHAs/digests).
PREFIX_KINDS: frozenset[str] = frozenset({"git_sha", "hex_id", "hex_digest", "oci_digest"})

_K8S_ALIASES = {
    "deploy": "deployment", "deployments": "deployment",
    "po": "pod", "pods": "pod",
    "svc": "service", "services": "service",
    "sts": "statefulset", "statefulsets": "statefulset",
    "ds": "daemonset", "daemonsets": "daemonset",
    "rs": "replicaset", "replicasets": "replicaset",
    "cj": "cronjob", "cronjobs": "cronjob",
    "jobs": "job",
    "cm": "configmap", "configmaps": "configmap",
    "secrets": "secret",
    "ing": "ingress", "ingresses": "ingress",
    "ns": "namespace", "namespaces": "namespace",
    "no": "node", "nodes": "node",
    "pvc": "persistentvolumeclaim", "persistentvolumeclaims": "persistentvolumeclaim",
    "pv": "persistentvolume", "persistentvolumes": "persistentvolume",
    "sa": "serviceaccount", "serviceaccounts": "serviceaccount",
    "hpa": "horizontalpodautoscaler", "horizontalpodautoscalers": "horizontalpodautoscaler",
    "netpol": "networkpolicy", "networkpolicies": "networkpolicy",
    "ep": "endpoints",
    "crd": "customresourcedefinition",
}

_TRAIL = ".,;:!?)]}>'\"`"
_HEXLIKE = re.compile(r"^(?=(?:[-:]*[0-9a-fA-F]){7})[0-9a-fA-F]+(?:[-:][0-9a-fA-F]+)*$")
_LEAD = "([{<'\"`"


def trim_value(value: str, start: int, end: int) -> tuple[str, int, int]:
    """Strip trailing sentence punctuation and quotes (and unbalanced closing brackets)
    from a match, returning the new value and offsets. ``(`` … ``)`` pairs inside the
    value are kept (``arn:…(foo)``, ``[0]`` in terraform addresses)."""
    if value and value[-1] not in _TRAIL and value[0] not in _LEAD:
        return value, start, end
    while value and value[-1] in _TRAIL:
        ch = value[-1]
        if ch == ")" and value.count("(") >= value.count(")"):
            break
        if ch == "]" and value.count("[") >= value.count("]"):
            break
        if ch == "}" and value.count("{") >= value.count("}"):
            break
        value = value[:-1]
        end -= 1
    while value and value[0] in _LEAD and len(value) > 1:
        value = value[1:]
        start += 1
    return value, start, end


def _norm_path(v: str) -> str:
    if "\\" in v and re.match(r"^[A-Za-z]:\\", v):
        return v[0].upper() + v[1:].rstrip("\\")
    absolute = v.startswith("/")
    home = v.startswith("~/")
    parts = [p for p in v.split("/") if p not in ("", ".")]
    out = "/".join(parts)
    if absolute:
        return "/" + out
    if home:
        return out  # "~" is its own first component
    return out or "."


def _norm_url(v: str) -> str:
    try:
        s = urlsplit(v)
        path = s.path
        if path == "/":
            path = ""
        return urlunsplit((s.scheme.lower(), s.netloc.lower(), path, s.query, s.fragment))
    except ValueError:
        return v


def _norm_s3(v: str) -> str:
    scheme, sep, rest = v.partition("://")
    if not sep:
        return v
    return scheme.lower() + "://" + rest.rstrip("/")


def _norm_k8s(v: str) -> str:
    kind, sep, name = v.partition("/")
    if not sep:
        return v.lower()
    kind = kind.lower().split(".", 1)[0]  # drop API group: deployment.apps -> deployment
    return f"{_K8S_ALIASES.get(kind, kind)}/{name.lower()}"


_FLYWAY_FILE = re.compile(r"^[VvUuRr]?(?P<v>\d+(?:[._]\d+)*)(?:__.*)?$")


def _norm_flyway(v: str) -> str:
    m = _FLYWAY_FILE.match(v.strip().rsplit("/", 1)[-1].removesuffix(".sql"))
    if not m:
        return v.strip().lower()
    return ".".join(str(int(x)) for x in re.split(r"[._]", m.group("v")))


def _norm_image(v: str) -> str:
    if "@" in v:
        repo, _, digest = v.partition("@")
        return f"{repo.lower()}@{digest.lower()}"
    repo, sep, tag = v.rpartition(":")
    if not sep or "/" in tag:
        return v.lower()
    return f"{repo.lower()}:{tag}"


def normalize(value: str, kind: str, *, sensitive: bool = False) -> str:
    """Diff identity of ``value`` as an identifier of ``kind`` (see module contracts).
    Sensitive values are replaced by a fingerprint, never returned in clear.
    Idempotent: what a kind's rule leaves around the value (whitespace that a removed
    label or control character exposed) is stripped too."""
    if sensitive:
        return value if value.startswith("secret:") and len(value) == 23 else fingerprint(value)
    return _by_kind(value.strip(), kind).strip()


def _by_kind(v: str, kind: str) -> str:
    if kind in HEX_KINDS:
        return v.lower()
    if kind == "ulid":
        return v.upper()
    if kind == "path":
        return _norm_path(v)
    if kind == "url":
        return _norm_url(v)
    if kind == "s3_uri":
        return _norm_s3(v)
    if kind == "k8s_resource":
        return _norm_k8s(v)
    if kind == "django_migration":
        return (v.rsplit(".", 1)[-1] if not v.endswith(".py") else v[:-3].rsplit("/", 1)[-1]).lower()
    if kind == "flyway_version":
        return _norm_flyway(v)
    if kind == "oci_image":
        return _norm_image(v)
    if kind == "kafka_offset":
        return v.lower()
    if _HEXLIKE.match(v):
        # a hex value found by a contextual rule (an upload id that is a UUID …) gets the
        # same identity as when a hex rule finds it
        return v.lower()
    return v


# --------------------------------------------------------------------------- relations


def edit_distance(a: str, b: str, limit: int = 8) -> int:
    """Levenshtein distance, giving up (returning ``limit + 1``) once it exceeds ``limit``."""
    if a == b:
        return 0
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        best = cur[0]
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            best = min(best, cur[j])
        if best > limit:
            return limit + 1
        prev = cur
    return prev[-1]


def _hex_body(v: str) -> str:
    return v.split(":", 1)[1] if v.startswith(("sha256:", "sha512:")) else v


def is_prefix_alias(a_norm: str, b_norm: str, kind: str) -> bool:
    """True when one value is an abbreviation of the other: for SHAs/digests a prefix of
    at least 7 hex characters of the longer one (either argument order)."""
    if a_norm == b_norm:
        return False
    short, full = (a_norm, b_norm) if len(a_norm) < len(b_norm) else (b_norm, a_norm)
    if kind in PREFIX_KINDS:
        sb, fb = _hex_body(short), _hex_body(full)
        return len(sb) >= 7 and fb.startswith(sb)
    if kind == "django_migration":
        return len(short) >= 4 and short.isdigit() and full.startswith(short + "_")
    return False


def is_alias(a_norm: str, b_norm: str, kind: str) -> bool:
    """``b`` denotes the same object as ``a``: a prefix alias, or for paths a relative
    path that ``b`` (absolute) ends with at a component boundary when ``a`` is relative
    (the surviving copy is *more* specific, so nothing was lost)."""
    if is_prefix_alias(a_norm, b_norm, kind):
        return True
    if kind == "path" and not a_norm.startswith("/") and b_norm.startswith("/"):
        return b_norm.endswith("/" + a_norm)
    return False


_ELLIPSIS = ("…", "...")


def is_altered(a_norm: str, b_norm: str, kind: str) -> bool:
    """``b`` looks like a damaged copy of ``a`` (so ``a`` must not count as surviving):

    - truncated: a strict prefix of ``a`` that is too short to alias it, or an elided
      form (``abc1234…``);
    - an absolute path made relative (``/srv/app/x.py`` → ``app/x.py``);
    - a UUID/GTID with one changed segment;
    - a Kafka offset for the same topic and partition with another offset;
    - same kind with a small edit distance (≤ 1 per 8 characters, at least 1).
    """
    if a_norm == b_norm or is_alias(a_norm, b_norm, kind):
        return False
    b_core = b_norm
    for e in _ELLIPSIS:
        b_core = b_core.replace(e, "")
    if b_core != b_norm and len(b_core) >= 4 and (a_norm.startswith(b_core) or a_norm.endswith(b_core)):
        return True
    if len(b_norm) < len(a_norm) and len(b_norm) >= 4 and (a_norm.startswith(b_norm) or a_norm.endswith(b_norm)):
        if kind == "path":
            return a_norm.startswith("/") and not b_norm.startswith("/") and a_norm.endswith("/" + b_norm)
        return True
    if kind == "path":
        return False  # other paths are other files, not alterations
    if kind in ("uuid", "mysql_gtid"):
        sa, sb = a_norm.split("-"), b_norm.split("-")
        if len(sa) == len(sb) >= 5 and sum(x == y for x, y in zip(sa, sb, strict=False)) >= len(sa) - 2:
            return True
    if kind == "kafka_offset":
        ta, _, oa = a_norm.rpartition("@")
        tb, _, ob = b_norm.rpartition("@")
        return bool(ta) and ta == tb and oa != ob
    if kind == "git_sha" and len(b_norm) < len(a_norm) and 7 <= len(b_norm) <= 12:
        return edit_distance(a_norm[: len(b_norm)], b_norm, 2) <= 2
    n = max(len(a_norm), len(b_norm))
    if n < 6:
        return False
    limit = max(1, n // 8)
    return edit_distance(a_norm, b_norm, limit) <= limit


Relation = Literal["same", "alias", "altered"]


def relation(a_norm: str, b_norm: str, kind: str) -> Relation | None:
    """How ``b`` (seen after a transition) relates to ``a`` (seen before), both of ``kind``:
    ``same``, ``alias`` (survives), ``altered`` (damaged copy), or ``None`` (unrelated)."""
    if a_norm == b_norm:
        return "same"
    if is_alias(a_norm, b_norm, kind):
        return "alias"
    if is_altered(a_norm, b_norm, kind):
        return "altered"
    return None


def identifying_token(kind: str, norm: str) -> tuple[str, str | None] | None:
    """For a composite value, the token that identifies it and its qualifier (PRINCIPLES
    §4: "for a record such as ``group topic partition offset``, the binding is the
    identifying token — the offset, with its partition"): Kafka offsets → (offset,
    partition); an image reference pinned by digest → (digest, None); a resource URL or
    an ARN ending in an assigned number or id → (that last segment, None). ``None`` for values
    that are their own identifying token."""
    if kind == "kafka_offset":
        head, _, offset = norm.rpartition("@")
        partition = head.rpartition(":")[2]
        if offset.isdigit():
            return offset, (partition if partition.isdigit() else None)
        return None
    if kind == "oci_image" and "@" in norm:
        digest = norm.rpartition("@")[2]
        return (digest, None) if ":" in digest else None
    if kind == "aws_arn":  # arn:…:key/<id>: the resource id the service assigned
        last = re.split(r"[:/]", norm)[-1]
        from .validators import has_opaque_part

        return (last, None) if len(last) >= 8 and has_opaque_part(last) else None
    if kind == "url":
        # a resource URL ending in what the service assigned: a number (…/pipelines/8182520)
        # or a machine-made id (…/incidents/Q9ZOQVV8O9IOW5, …/operations/<uuid>)
        m = _URL_LAST.search(norm.split("?", 1)[0].split("#", 1)[0])
        if m is None:
            return None
        last = m.group(1)
        if last.isdigit() and len(last) >= 4:
            return last, None
        from .validators import has_opaque_part

        return (last, None) if len(last) >= 8 and has_opaque_part(last) else None
    return None


_URL_LAST = re.compile(r"/([A-Za-z0-9_.\-]+)/?$")


def find_altered_in_text(a_norm: str, kind: str, text: str) -> str | None:
    """Look in ``text`` for a damaged copy of ``a_norm`` that extraction would not report
    as an identifier (too short to be detected): a hex prefix of 4–6 characters or an
    elided one (``abc12…``), or for an absolute path its relative tail. Returns the
    verbatim fragment found, or ``None``. Assumes ``a_norm`` itself is absent."""
    if kind in HEX_KINDS or kind == "ulid":
        body = _hex_body(a_norm)
        low = text.lower() if kind != "ulid" else text.upper()
        for k in range(min(len(body) - 1, 12), 3, -1):
            frag = body[:k]
            for m in re.finditer(re.escape(frag), low):
                s, e = m.start(), m.end()
                before = low[s - 1] if s > 0 else " "
                after = low[e : e + 3]
                if before.isalnum():
                    continue
                if after.startswith(_ELLIPSIS) or not (after[:1].isalnum()):
                    return text[s:e] + ("…" if after.startswith(_ELLIPSIS) else "")
        return None
    if kind == "path" and a_norm.startswith("/"):
        comps = a_norm.strip("/").split("/")
        for i in range(1, len(comps)):
            tail = "/".join(comps[i:])
            hit = re.search(r"(?<![\w/.-])" + re.escape(tail) + r"(?![\w/-])", text)
            # a relative tail, or the bare file name when it has an extension
            if hit and (i < len(comps) - 1 or "." in tail):
                return hit.group(0)
        return None
    return None

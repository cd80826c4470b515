"""Property-based tests (hypothesis) for extraction."""

from __future__ import annotations

import re
import uuid

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from proxy.core.identifiers import Source, extract_text
from proxy.core.identifiers.filters import is_placeholder
from proxy.core.identifiers.validators import generated_suffix

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_SRC = Source(0, "assistant", "assistant")

WORDS = (
    "the a an of to and in on for with that this it is was are be as at by from or not but we you they "
    "agent model summary history context window tool result step later value migration upload commit "
    "deploy image rollback offset partition revision database cluster service request server client "
    "test file path run build release version note plan apply check keep drop verbatim exact small large "
    "quick brown fox jumps over lazy dog morning evening report team review change update fix bug issue"
).split()
DATES = ["2024-05-01", "05/12/2024", "12/05", "2023", "1999", "10:30", "09:15:02", "20240501"]
VERSIONS = ["1.2.3", "v2", "3.11.7", "2.0.0rc1", "v1.4", "0.9", "10.0.1"]
NUMBERS = ["42", "8080", "1500000", "99.9%", "3.14", "12,000", "0x1f", "-7"]

prose_word = st.sampled_from(WORDS)
benign_token = st.one_of(prose_word, st.sampled_from(DATES), st.sampled_from(VERSIONS), st.sampled_from(NUMBERS))
punct = st.sampled_from([" ", " ", " ", ", ", ". ", "; ", "\n", " (", ") "])


@st.composite
def prose(draw: st.DrawFn, tokens: st.SearchStrategy[str] = prose_word, max_words: int = 60) -> str:
    ws = draw(st.lists(tokens, min_size=1, max_size=max_words))
    seps = draw(st.lists(punct, min_size=len(ws), max_size=len(ws)))
    return "".join(w + s for w, s in zip(ws, seps, strict=True)).strip()


@st.composite
def opaque_id(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["sha1", "sha256", "uuid", "ulid", "hex32"]))
    if kind == "sha1":
        v = draw(st.binary(min_size=20, max_size=20)).hex()
    elif kind == "sha256":
        v = "sha256:" + draw(st.binary(min_size=32, max_size=32)).hex()
    elif kind == "hex32":
        v = draw(st.binary(min_size=16, max_size=16)).hex()
    elif kind == "uuid":
        v = str(uuid.UUID(bytes=draw(st.binary(min_size=16, max_size=16))))
    else:
        alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
        v = draw(st.sampled_from("01234567")) + "".join(draw(st.lists(st.sampled_from(alphabet), min_size=25, max_size=25)))
        assume(sum(c.isdigit() for c in v) >= 4 and any(c.isalpha() for c in v))
    if draw(st.booleans()) and kind != "ulid":
        head, sep, body = v.rpartition(":")
        v = head + sep + body.upper()  # hex case varies; the "sha256:" prefix is lower case
    body = v.split(":")[-1]
    assume(any(c.isdigit() for c in body) and any(c.isalpha() for c in body))
    assume(not is_placeholder(v))
    return v


@given(st.text(max_size=400))
@_SETTINGS
def test_never_crashes_and_offsets_are_exact(text: str) -> None:
    for i in extract_text(text, _SRC, cache=None):
        assert text[i.start : i.end] == i.value


@given(st.lists(st.one_of(st.text(alphabet="0123456789abcdefABCDEF-:/._@ xyzsk", max_size=50), prose_word), max_size=30))
@_SETTINGS
def test_offsets_exact_on_identifier_like_noise(parts: list[str]) -> None:
    text = " ".join(parts)
    for i in extract_text(text, Source(1, "tool", "tool_result", tool_name="bash", command="git log"), cache=None):
        assert text[i.start : i.end] == i.value
        assert i.value.strip() == i.value and i.value


@given(prose(), opaque_id(), prose())
@_SETTINGS
def test_random_ids_in_prose_are_found_verbatim(before: str, value: str, after: str) -> None:
    text = f"{before} {value} {after}"
    ids = extract_text(text, _SRC, cache=None)
    assert value in [i.value for i in ids], (value, [(i.kind, i.value) for i in ids])


@given(prose(benign_token, 80))
@_SETTINGS
def test_plain_prose_dates_versions_numbers_yield_nothing(text: str) -> None:
    ids = extract_text(text, _SRC, cache=None)
    assert not ids, [(i.kind, i.value, i.detector) for i in ids]


@given(prose(benign_token, 40), st.sampled_from(["git log", "kubectl get pods", "alembic history", "terraform plan", "pytest -q", "ls -la"]))
@_SETTINGS
def test_plain_prose_yields_nothing_even_as_tool_output(text: str, command: str) -> None:
    src = Source(1, "tool", "tool_result", tool_name="bash", command=command, mutating=False)
    ids = extract_text(text, src, cache=None)
    assert not ids, [(i.kind, i.value, i.detector) for i in ids]


def _literals() -> list[str]:
    from proxy.core.identifiers.catalog import Catalog

    lits: set[str] = set()
    for r in Catalog.load_default().scan_order:
        lits.update(r.anchors)
        lits.update(r.tokens)
        lits.update(k for k, _ in r.context_literals)
    return sorted(lits)


def _rule_examples() -> list[str]:
    """Every shipped rule's examples and negative examples (texts its literals let in)."""
    from proxy.core.identifiers.catalog import _default_raw

    out: list[str] = []
    for r in _default_raw():
        out.extend(e["text"] if isinstance(e, dict) else str(e) for e in r.get("examples") or ())
        out.extend(e["text"] if isinstance(e, dict) else str(e) for e in r.get("negative_examples") or ())
    return out


_LITERALS = _literals()
_EXAMPLES = _rule_examples()
_COMMANDS = ["", "git rev-parse HEAD", "kubectl get deploy api -o yaml", "alembic current",
             "aws s3api list-multipart-uploads", "docker pull nginx", "bash", "psql -c 'select pg_current_wal_lsn()'"]


@given(
    st.lists(st.one_of(prose_word, st.sampled_from(_LITERALS), st.sampled_from(_EXAMPLES), opaque_id(),
                       st.text(max_size=12)), min_size=1, max_size=30),
    st.sampled_from(_COMMANDS),
    st.booleans(),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_catalogue_wide_gate_finds_what_each_rule_finds_alone(parts: list[str], command: str, upper: bool) -> None:
    """The scanner lets a rule run on a text only if its literals (tokens, anchors,
    context keywords) are there — tested once for the whole catalogue. Every rule
    testing its own literals one by one finds the very same candidates."""
    from proxy.core.identifiers.catalog import Catalog
    from proxy.core.identifiers.scanner import candidates

    text = " ".join(p.upper() if upper and i % 3 == 0 else p for i, p in enumerate(parts))
    cat = Catalog.load_default()

    def key(cs: list) -> list[tuple[object, ...]]:  # type: ignore[type-arg]
        return [(c.rule.id, c.start, c.end, c.value, c.norm_groups) for c in cs]

    assert key(candidates(text, cat, command)) == key(candidates(text, cat, command, gated=False))


_K8S_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes' name generator


@given(
    st.from_regex(r"[a-z]{2,10}(-[a-z]{2,8}){0,2}", fullmatch=True),
    st.text(alphabet=_K8S_SUFFIX, min_size=5, max_size=5),
)
def test_every_generate_name_suffix_is_recognised(prefix: str, suffix: str) -> None:
    """Whatever the prefix, a suffix Kubernetes' generator made marks the name as
    generated — with digits, or letters only (which it draws without vowels). One that
    reads as a number, or a number with a unit (``2048m``), is a number a person could
    have given, and is not claimed."""
    assume(not re.fullmatch(r"\d+(?:[kmgtp]i?b?|b|x|s|h|d|w)?", suffix))
    assert generated_suffix(f"{prefix}-{suffix}")
    assert generated_suffix(f"job.batch/{prefix}-{suffix}")


@given(
    st.from_regex(r"[a-z]{2,10}", fullmatch=True),
    st.one_of(
        st.builds(lambda w, n: w + str(n), st.sampled_from(["west", "east", "node", "api", "web", "zone", "pool", "r", "v"]), st.integers(0, 999)),  # west1, node2, api10
        st.builds(lambda n, u: str(n) + u, st.integers(0, 9999), st.sampled_from(["gb", "mb", "gi", "m", "k", "x", "s", ""])),  # 500gb, 10x
        st.sampled_from(["shard", "admin", "proxy", "cache", "queue", "green"]),
    ),
)
def test_names_people_give_are_not_generated(prefix: str, last: str) -> None:
    assert not generated_suffix(f"{prefix}-{last}")

"""Secrets at rest: what a store writes holds no secret the gate's detectors find (the
SQLite file and its WAL included); redacted messages keep their digest, so lineage
survives a restart; capability handles are bindings and stay."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.messages import Part, make_message
from proxy.core.redaction import redact_secrets
from proxy.state import ConversationRecord, GateEvent, SQLiteStore
from proxy.state.records import message_from_json, message_to_json

SECRETS = (
    "ghp_ZV7WS3deUkmbxKv7cx5ljlDS9TXWUTZdo31W",
    "sk-proj-J0vdpdD1sEB08Mjp6ScUg7MFT3BlbkFJMba4Vbye1EAzHX",
    "AKIA4QXR7ZB2LNMT6YWD",
    "xoxb-2401830721-5402811220-J0vdpdD1sEB08Mjp6ScUg7MF",
)
HANDLE = "lk_8f2a9c1d7e4b"  # a lock token: a capability handle, not a credential


def _files(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


async def test_sqlite_files_hold_no_secret_and_digests_survive(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    text = "deploy with GH_TOKEN=" + SECRETS[0] + " and OPENAI_API_KEY=" + SECRETS[1] + f"; lock {HANDLE} held"
    msg = make_message(
        "tool",
        (Part("tool_result", text, tool_call_id="c1"), Part("tool_call", f'{{"key": "{SECRETS[2]}"}}', "bash", "c2")),
    )
    store = SQLiteStore(path, flush_delay=0)
    await store.open()
    store.put_messages([msg])
    store.put_blob("sys", "system prompt with " + SECRETS[3])
    rec = ConversationRecord(id="c", tenant="t", namespace="t", created=1.0, last_seen=1.0, digests=(msg.digest,))
    store.save_conversation(rec)
    store.put_event("c", GateEvent(1, 1.0, "compaction", details={"note": "saw " + SECRETS[0]}))
    await store.flush()
    on_disk = _files(path)
    for secret in SECRETS:
        assert secret.encode() not in on_disk
    assert HANDLE.encode() in on_disk and b"[redacted:github_token]" in on_disk
    await store.close()

    again = SQLiteStore(path)
    await again.open()
    loaded = (await again.load_messages([msg.digest]))[msg.digest]
    assert loaded.digest == msg.digest  # lineage matches the client's clear text
    assert HANDLE in loaded.parts[0].text and SECRETS[0] not in loaded.parts[0].text
    assert SECRETS[3] not in (await again.load_blobs(["sys"]))["sys"]
    await again.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.text(max_size=60),
    secret=st.sampled_from(SECRETS),
    suffix=st.text(max_size=60),
)
def test_stored_messages_never_hold_a_detected_secret(prefix: str, secret: str, suffix: str) -> None:
    text = f"{prefix} token {secret} {suffix}"
    msg = make_message("user", (Part("text", text),))
    stored = message_to_json(msg)
    back = message_from_json(stored)
    # whatever the gate detects as a secret in the text is gone from what is stored
    assert redact_secrets(text) == back.parts[0].text
    assert secret not in stored and secret not in back.parts[0].text
    assert back.digest == msg.digest


def test_messages_without_secrets_are_stored_as_they_are() -> None:
    msg = make_message("user", (Part("text", f"release the lock {HANDLE} at rev 4b1e9c2d7a30"),))
    back = message_from_json(message_to_json(msg))
    assert back == msg and back.digest == msg.digest


def test_long_texts_are_redacted_across_window_boundaries() -> None:
    from proxy.core import redaction

    filler = "x " * (redaction.WINDOW // 2)
    # a secret straddling the first window's end, and one far into the text
    cut = redaction.WINDOW - 10
    text = filler[:cut] + " " + SECRETS[0] + " " + filler + " " + SECRETS[1] + " end"
    out = redact_secrets(text)
    assert SECRETS[0] not in out and SECRETS[1] not in out
    assert out.count("[redacted:") == 2 and out.endswith(" end")


def test_a_secret_that_looks_like_a_placeholder_is_still_redacted() -> None:
    """The analysis may ignore a counting-sequence token as a binding (a documentation
    placeholder); its at-rest copy still never shows it, and the analysis is unchanged."""
    from proxy.core.identifiers.catalog import Catalog
    from proxy.core.identifiers.textscan import scan_text

    for text in (
        "export GH_TOKEN=ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        "Authorization: Bearer sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    ):
        secret = text.split("=")[-1].split()[-1]
        out = redact_secrets(text)
        assert secret not in out and "[redacted:" in out, out
        # the gate's own analysis still calls it a placeholder (no binding, no alarm)
        assert not [m for m in scan_text(text, Catalog.load_default()) if m.value == secret]


def test_the_default_sensitive_rules_built_alone_are_the_catalogs_own() -> None:
    """Before the shipped catalogue is compiled, redaction's first pass uses its sensitive
    rules compiled alone (a first log line does not wait for the whole table): the same
    rules, unfiltered alike, as derived from the compiled catalogue."""
    from proxy.core import redaction
    from proxy.core.identifiers.catalog import Catalog

    alone = redaction._default_sensitive()
    derived = redaction._sensitive_only(Catalog.load_default())
    assert alone.fingerprint == derived.fingerprint
    assert [(r.id, r.pattern.pattern, r.filters) for r in alone.rules] == [
        (r.id, r.pattern.pattern, r.filters) for r in derived.rules
    ]
    assert alone.rules and all(r.sensitive for r in alone.rules)
    for secret in SECRETS:
        assert redaction.redact_secrets(f"token {secret} here") == redaction.redact_secrets(
            f"token {secret} here", Catalog.load_default()
        )


def test_a_clean_log_line_does_not_compile_the_whole_catalogue() -> None:
    import subprocess
    import sys

    code = (
        "from proxy.core.redaction import redact_secrets\n"
        "from proxy.core.identifiers.catalog import default_catalog_loaded\n"
        "assert redact_secrets('listening on http://127.0.0.1:8788') == 'listening on http://127.0.0.1:8788'\n"
        "print(default_catalog_loaded())\n"
        f"print(redact_secrets('key {SECRETS[0]} end'))\n"
        "print(default_catalog_loaded())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "False"  # the sensitive rules alone sufficed
    assert SECRETS[0] not in out[1] and "[redacted:" in out[1]
    assert out[2] == "True"  # a hit resolves overlaps with the whole catalogue

"""A long message row (encoded in the store's worker: UTF-8 bytes) is written into its
blob a slice at a time (issue 16): the table holds exactly what binding it whole held,
a second write of the same row changes nothing, and it reads back as the same message,
its secrets redacted."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import proxy.state.sqlite as sqlite_mod
import proxy.state.sqlite_rows as sqlite_rows
from proxy.core.messages import Part, make_message
from proxy.state import SQLiteStore
from proxy.state.records import message_to_json, stored_text


def _rows(path: Path) -> dict[str, tuple[bytes | str, str]]:
    with sqlite3.connect(path) as conn:
        return {d: (b, t) for d, b, t in conn.execute("SELECT digest, body, typeof(body) FROM messages")}


@pytest.mark.parametrize("blob_slice", [7, 1 << 20])
async def test_a_long_row_is_streamed_into_its_blob_and_reads_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blob_slice: int
) -> None:
    monkeypatch.setattr(sqlite_mod, "LONG_ROW", 64)
    monkeypatch.setattr(sqlite_rows, "LONG_ROW", 64)
    monkeypatch.setattr(sqlite_rows, "BLOB_SLICE", blob_slice)
    secret = "ghp_" + "a1B2" * 9
    long_ = make_message("tool", [Part("tool_result", "é x" * 40 + " " + secret + " tail", "read", "c1", False, None)], None)
    short = make_message("user", [Part("text", "hi", None, None, False, None)], None)
    # what the store's worker hands the writer for a long text: the row's UTF-8 bytes
    expected = message_to_json(long_).encode("utf-8")  # type: ignore[union-attr]
    monkeypatch.setattr(sqlite_mod, "message_to_json",
                        lambda m: bytearray(expected) if m is long_ else message_to_json(m))
    streamed: list[str] = []
    real = sqlite_mod.insert_streamed
    monkeypatch.setattr(sqlite_mod, "insert_streamed",
                        lambda conn, d, body: (streamed.append(d), real(conn, d, body))[1])
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    await store.open()
    store.put_messages([long_, short])
    await store.flush()
    store.put_messages([long_])  # again: INSERT OR IGNORE, nothing rewritten
    await store.flush()
    assert streamed == [long_.digest, long_.digest]  # the long row took the blob path, twice
    rows = _rows(path)
    assert rows[long_.digest] == (expected, "blob")  # as binding the bytes whole stores them
    assert rows[short.digest][1] == "text"
    got = await store.load_messages([long_.digest, short.digest])
    await store.close()
    assert got[long_.digest].digest == long_.digest
    assert got[long_.digest].parts[0].text == stored_text(long_.parts[0].text)
    assert secret not in got[long_.digest].parts[0].text
    assert got[short.digest] == short


async def test_a_committed_long_row_is_read_a_slice_at_a_time_and_decoded_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import proxy.state.longrows as longrows
    from proxy.core.bodyrefs import MIN_CHARS
    from proxy.state import offload, rawmem
    from proxy.state.records import message_from_json

    monkeypatch.setattr(sqlite_mod, "LONG_ROW", 64)
    monkeypatch.setattr(sqlite_rows, "LONG_ROW", 64)
    monkeypatch.setattr(longrows, "LONG_ROW", 64)
    monkeypatch.setattr(rawmem, "SLICE", 5)
    secret = "ghp_" + "a1B2" * 9
    ascii_ = make_message("tool", [Part("tool_result", "x" * (MIN_CHARS + 10) + " " + secret + " tail", "read", "c1", False, None)], None)
    other = make_message("user", [Part("text", "é" * MIN_CHARS, None, None, False, None)], None)
    short = make_message("user", [Part("text", "hi", None, None, False, None)], None)
    rows = {m.digest: message_to_json(m).encode("utf-8") for m in (ascii_, other)}  # type: ignore[union-attr]
    monkeypatch.setattr(sqlite_mod, "message_to_json",
                        lambda m: bytearray(rows[m.digest]) if m.digest in rows else message_to_json(m))
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    await store.open()
    store.put_messages([ascii_, other, short])
    await store.close()

    read: list[int] = []
    real = sqlite_mod.read_blob
    monkeypatch.setattr(sqlite_mod, "read_blob", lambda *a: (read.append(a[-1]), real(*a))[1])
    again = SQLiteStore(path)  # nothing pending: committed rows
    await again.open()
    made: list[int] = []
    step = rawmem.AsciiText.step
    monkeypatch.setattr(rawmem.AsciiText, "step", lambda self: (made.append(1), step(self))[1])
    got = await again.load_messages([ascii_.digest, other.digest, short.digest])
    await again.close()
    assert sorted(read) == sorted(len(r) for r in rows.values())  # both long rows from their blobs
    for m in (ascii_, other):
        assert got[m.digest] == message_from_json(rows[m.digest])  # what decoding the whole row gives
        assert got[m.digest].digest == m.digest
    assert secret not in got[ascii_.digest].parts[0].text
    assert got[short.digest] == short
    if offload.can_offload():
        assert offload._REQUEST._pool is not None  # decoded in the worker
        assert len(made) > MIN_CHARS // 5  # its long ASCII text made here 5 bytes at a time

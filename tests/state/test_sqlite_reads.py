"""SQLite store: a read never waits for the writer — a committed row is read on the
reader's connection, a pending one taken from memory as a committed read would return
it — and the writer's backlog is bounded (issue 16: a read of an old row waited 7.8 s
behind one pending 10 MB text's redaction, 17 s behind four; a read of a row of one's
own still pending waited for the whole batch, others' large rows included)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import proxy.state.records as records
import proxy.state.sqlite as sqlite_mod
from proxy.core.messages import text_message
from proxy.core.redaction import secret_spans
from proxy.state import SQLiteStore

HUGE = "HUGE-TEXT "
KEY = "sk-live-" + "a1B2c3D4e5F6g7H8i9J0kLmN"


class Gate:
    """Redaction of texts starting with :data:`HUGE` blocks until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def spans(self, text: str) -> list[tuple[int, int, str, str]]:
        if text.startswith(HUGE):
            self.entered.set()
            assert self.release.wait(60), "test never released the redaction"
        return secret_spans(text)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    monkeypatch.setattr(records, "spans_of", g.spans)
    yield g
    g.release.set()  # never leave the writer blocked


async def _until(cond: Callable[[], bool]) -> None:
    for _ in range(3000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


async def test_read_of_another_conversation_does_not_wait_for_a_pending_redaction(gate: Gate, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db", flush_delay=0.0)
    await store.open()
    old = text_message("user", f"old row of conversation Y, key {KEY}")
    store.put_messages([old])
    store.put_blob("sys-y", "be brief")
    await store.flush()

    huge = text_message("user", HUGE + f"conversation X {KEY} " + "x" * 1000)
    store.put_messages([huge])
    await _until(gate.entered.is_set)  # the writer is inside the huge text's redaction

    got = await asyncio.wait_for(store.load_messages([old.digest]), 30)
    assert not gate.release.is_set()
    assert got[old.digest].digest == old.digest
    assert KEY not in got[old.digest].text and "[redacted:" in got[old.digest].text
    assert await asyncio.wait_for(store.load_blobs(["sys-y"]), 30) == {"sys-y": "be brief"}

    # a row of Y's own queued behind X's (the writer still busy): taken from memory,
    # redacted as a committed read returns it, without waiting for the writer
    mine = text_message("user", f"new row of conversation Y, key {KEY}")
    store.put_messages([mine])
    store.put_blob("sys-y2", f"be brief, {KEY}")
    got = await asyncio.wait_for(store.load_messages([mine.digest, old.digest]), 30)
    blobs = await asyncio.wait_for(store.load_blobs(["sys-y2", "sys-y"]), 30)
    assert not gate.release.is_set()
    assert set(got) == {mine.digest, old.digest}
    from_memory = got[mine.digest]
    assert from_memory.digest == mine.digest
    assert KEY not in from_memory.text and "[redacted:" in from_memory.text
    assert blobs["sys-y"] == "be brief" and KEY not in blobs["sys-y2"] and "[redacted:" in blobs["sys-y2"]

    gate.release.set()
    await store.flush()
    committed = (await store.load_messages([mine.digest]))[mine.digest]
    assert (committed.text, committed.digest, committed.parts) == (from_memory.text, from_memory.digest, from_memory.parts)
    assert await store.load_blobs(["sys-y2"]) == {"sys-y2": blobs["sys-y2"]}
    got = await asyncio.wait_for(store.load_messages([huge.digest]), 30)
    assert got[huge.digest].digest == huge.digest and KEY not in got[huge.digest].text
    await store.close()

    reopened = SQLiteStore(tmp_path / "s.db")
    await reopened.open()
    assert set(await reopened.load_messages([old.digest, huge.digest, mine.digest])) == {old.digest, huge.digest, mine.digest}
    await reopened.close()


async def test_backlog_is_bounded_by_waiting_not_dropping(
    gate: Gate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_mod, "MAX_BACKLOG_CHARS", 3000)
    store = SQLiteStore(tmp_path / "s.db", flush_delay=0.0)
    await store.open()
    await store.room()  # nothing pending: no wait

    first = text_message("user", HUGE + "1 " + "a" * 2000)
    store.put_messages([first])
    await _until(gate.entered.is_set)
    more = [text_message("user", f"{HUGE}{i} " + "b" * 2000) for i in range(2, 5)]
    store.put_messages(more)  # writes never block: they queue
    assert store.backlog() > 3000

    room = asyncio.ensure_future(store.room())
    await asyncio.sleep(0.2)
    assert not room.done()  # over the bound: the large request waits
    gate.release.set()
    await asyncio.wait_for(room, 30)
    assert store.backlog() <= 3000
    await store.close()

    reopened = SQLiteStore(tmp_path / "s.db")
    await reopened.open()
    wanted = [m.digest for m in (first, *more)]
    assert set(await reopened.load_messages(wanted)) == set(wanted)  # nothing was shed
    await reopened.close()


async def test_a_long_pending_row_is_redacted_beside_the_reader_not_on_it(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A long row still pending (its redaction in the store's worker, behind the writer's
    own) is made ready off the reader thread: a read of anything else goes on meanwhile."""
    entered, release = threading.Event(), threading.Event()

    def in_worker(fn: Callable[..., object], *args: object, out: int = 0) -> object:
        entered.set()
        assert release.wait(60), "test never released the redaction"
        return fn(*args)

    monkeypatch.setattr(records, "OFFLOAD_CHARS", 500)
    monkeypatch.setattr(sqlite_mod, "OFFLOAD_CHARS", 500)
    monkeypatch.setattr(records, "in_store_worker", in_worker)
    store = SQLiteStore(tmp_path / "s.db", flush_delay=0.0)
    await store.open()
    try:
        long_ = text_message("tool", f"{HUGE} key {KEY} " + "z" * 1000)
        store.put_messages([long_])
        await _until(entered.is_set)  # the writer waits for the worker
        mine = text_message("user", f"small row, key {KEY}")
        store.put_messages([mine])
        both = asyncio.ensure_future(store.load_messages([long_.digest, mine.digest]))
        await asyncio.sleep(0.1)
        got = await asyncio.wait_for(store.load_messages([mine.digest]), 30)  # not behind the long row
        assert not release.is_set() and not both.done()
        assert KEY not in got[mine.digest].text
        release.set()
        got = await asyncio.wait_for(both, 30)
        assert got[long_.digest].digest == long_.digest and KEY not in got[long_.digest].text
        assert got[long_.digest].text.endswith("z" * 1000)
    finally:
        release.set()
        await store.close()

"""The Redis store's pipelined batches (:mod:`proxy.state.redis_pipeline`) on a real
``redis-server``: the next batch is written before the last is answered, answers come
back in the order the calls were made, a connection failure sends every unanswered
batch again in that order on a new connection, and a Redis that does not answer in
time fails them all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.state.protocol import StateUnavailable
from proxy.state.redis import RedisStore
from tests.support.redis_server import RedisServer, require_redis


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[RedisStore, Any]]:
    import redis

    require_redis()
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore(server.url, timeout=5.0)
        await store.open()  # connected, scripts loaded
        await store.ping()
        raw = redis.Redis.from_url(server.url)
        try:
            yield store, raw
        finally:
            await store.close()
            raw.close()


async def _written(store: RedisStore, flights: int) -> None:
    for _ in range(200):
        if len(store._pipe._flights) >= flights:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{len(store._pipe._flights)} batches in flight, {flights} expected")


async def test_the_next_batch_is_written_before_the_last_is_answered(served: tuple[RedisStore, Any]) -> None:
    store, raw = served
    raw.execute_command("CLIENT", "PAUSE", 400, "ALL")  # Redis answers nothing for 0.4 s
    first = asyncio.ensure_future(store._call("RPUSH", "k", "a"))
    await _written(store, 1)
    second = asyncio.ensure_future(store._call("RPUSH", "k", "b"))
    await _written(store, 2)  # written while the first is unanswered
    assert not first.done() and not second.done()
    assert await first == 1 and await second == 2  # answered in order
    assert store._pipe.deepest == 2
    assert raw.lrange("k", 0, -1) == [b"a", b"b"]


async def test_a_failed_connection_sends_every_unanswered_batch_again_in_order(served: tuple[RedisStore, Any]) -> None:
    store, raw = served
    raw.execute_command("CLIENT", "PAUSE", 300, "ALL")
    calls = []
    for item in ("a", "b", "c"):
        calls.append(asyncio.ensure_future(store._call("RPUSH", "k", item)))
        await _written(store, len(calls))
    old = store._conn
    old._writer.transport.abort()  # the connection drops with three batches unanswered
    assert await asyncio.gather(*calls) == [1, 2, 3]
    assert store._conn is not old and store.available
    assert raw.lrange("k", 0, -1) == [b"a", b"b", b"c"]  # each once, in the order called


async def test_a_batch_written_on_a_connection_that_just_failed_goes_in_order_with_the_rest(
    served: tuple[RedisStore, Any],
) -> None:
    store, raw = served
    raw.execute_command("CLIENT", "PAUSE", 300, "ALL")
    calls = []
    for item in ("a", "b"):
        calls.append(asyncio.ensure_future(store._call("RPUSH", "k", item)))
        await _written(store, len(calls))
    store._conn._writer.transport.abort()
    calls.append(asyncio.ensure_future(store._call("RPUSH", "k", "c")))  # its writer finds the connection lost
    assert await asyncio.gather(*calls) == [1, 2, 3]
    assert raw.lrange("k", 0, -1) == [b"a", b"b", b"c"]


async def test_calls_made_while_batches_are_in_flight_go_in_one_batch(served: tuple[RedisStore, Any]) -> None:
    from proxy.state.redis_pipeline import PIPELINE_DEPTH

    store, raw = served
    raw.execute_command("CLIENT", "PAUSE", 300, "ALL")
    calls = []
    for i in range(PIPELINE_DEPTH):
        calls.append(asyncio.ensure_future(store._call("RPUSH", "k", str(i))))
        await _written(store, i + 1)
    late = [asyncio.ensure_future(store._call("RPUSH", "k", x)) for x in ("x", "y")]
    await asyncio.sleep(0.05)
    assert len(store._pipe._flights) == PIPELINE_DEPTH and len(store._pipe._queue) == 2  # waiting
    await asyncio.gather(*calls, *late)
    assert store._pipe.deepest == PIPELINE_DEPTH
    assert raw.lrange("k", 0, -1) == [*(str(i).encode() for i in range(PIPELINE_DEPTH)), b"x", b"y"]


async def test_a_redis_that_does_not_answer_in_time_fails_every_unanswered_call(tmp_path: Path) -> None:
    import redis

    require_redis()
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore(server.url, timeout=0.3)
        await store.open()
        raw = redis.Redis.from_url(server.url)
        try:
            from proxy.state.redis_pipeline import PIPELINE_DEPTH

            raw.execute_command("CLIENT", "PAUSE", 1500, "ALL")
            calls = []
            for i in range(PIPELINE_DEPTH):
                calls.append(asyncio.ensure_future(store._call("RPUSH", "k", str(i))))
                await _written(store, i + 1)
            calls.append(asyncio.ensure_future(store._call("RPUSH", "k", "queued")))  # waits for room
            for fut in calls:
                with pytest.raises(StateUnavailable) as err:
                    await asyncio.wait_for(fut, 3)  # none left waiting
                assert err.value.reason in ("timeout", "unreachable")
            assert calls[0].exception().reason == "timeout"  # type: ignore[union-attr]
            assert not store.available and not store._pipe._flights and not store._pipe._queue
        finally:
            await asyncio.sleep(1.3)  # the pause ends before the store closes
            await store.close()
            raw.close()


def _syncs(raw: Any) -> int:
    stats = raw.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_syncs_of_one_namespace_made_before_it_is_written_share_one_script(served: tuple[RedisStore, Any]) -> None:
    store, raw = served
    before = _syncs(raw)
    a, b, c = await asyncio.gather(store.sync("t", "t", 0), store.sync("t", "t", 0), store.sync("t", "t", 5))
    assert a is b and c is not a  # another cursor is another sync
    assert _syncs(raw) - before == 2


async def test_a_sync_already_written_is_not_joined(served: tuple[RedisStore, Any]) -> None:
    store, raw = served
    before = _syncs(raw)
    raw.execute_command("CLIENT", "PAUSE", 300, "ALL")
    first = asyncio.ensure_future(store.sync("t", "t", 0))
    await _written(store, 1)  # sent: a commit another replica makes now may come after it
    second = asyncio.ensure_future(store.sync("t", "t", 0))
    await _written(store, 2)
    a, b = await asyncio.gather(first, second)
    assert a is not b and _syncs(raw) - before == 2
    # a caller with conversations to read again in full does not join either
    before = _syncs(raw)
    await asyncio.gather(store.sync("t", "t", 0), store.sync("t", "t", 0, reload=["cv_x"]))
    assert _syncs(raw) - before == 2


async def test_a_connection_already_replaced_takes_only_its_own_batch_with_it() -> None:
    """The writer finds that the connection it wrote on failed and was replaced while
    it wrote: only its batch goes back in the queue — the batches in flight are on the
    new connection and will be answered there (sent again, they would run twice)."""
    from proxy.state.redis_pipeline import Call, Flight, Pipeline

    class Store:
        available = True
        _conn: object = object()  # the new connection

    pipe = Pipeline(Store())  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    in_flight = [Call(("RPUSH", "k", "a"), loop.create_future(), 0)]
    pipe._flights.append(Flight(in_flight, False, Store._conn, loop.time() + 5))
    mine = [Call(("RPUSH", "k", "b"), loop.create_future(), 1)]
    pipe._connection_failed(object(), mine, ConnectionError("gone"))  # an old connection
    assert [f.calls for f in pipe._flights] == [in_flight] and Store._conn is not None
    assert pipe._queue == mine and mine[0].tries == 1
    assert pipe._task is not None
    pipe._task.cancel()

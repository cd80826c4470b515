"""A large body is written a slice per event-loop step (issue 16): aiohttp's ``write``
suspends only while the transport is paused, and a loopback socket takes megabytes at
once, so without a yield of its own the whole 10 MB went out in one step (1-4 ms of the
loop's CPU, other tenants' callbacks waiting behind it)."""

from __future__ import annotations

import asyncio

from proxy.server import sliced


class _NeverPaused:
    """A stream writer whose ``write`` never suspends (a socket that takes everything),
    noting for each write how many times another task got to run before it."""

    def __init__(self, ticks: list[int]) -> None:
        self.ticks = ticks
        self.seen: list[int] = []
        self.data = bytearray()

    async def write(self, chunk: memoryview) -> None:
        self.seen.append(len(self.ticks))
        self.data += chunk


def test_each_slice_is_written_in_a_step_of_its_own() -> None:
    body = bytes(range(256)) * ((3 * sliced.SLICE + 123) // 256 + 1)
    payload = sliced.SlicedBytesPayload(body)

    async def main() -> _NeverPaused:
        ticks: list[int] = []
        done = asyncio.Event()

        async def other_tenant() -> None:  # one loop step per iteration, until the write is done
            while not done.is_set():
                ticks.append(1)
                await asyncio.sleep(0)

        other = asyncio.create_task(other_tenant())
        await asyncio.sleep(0)
        writer = _NeverPaused(ticks)
        await payload.write_with_length(writer, None)  # type: ignore[arg-type]
        done.set()
        await other
        return writer

    writer = asyncio.run(main())
    assert bytes(writer.data) == body  # the bytes unchanged
    slices = -(-len(body) // sliced.SLICE)
    assert len(writer.seen) == slices
    # the other task ran between every two slices
    assert all(b > a for a, b in zip(writer.seen, writer.seen[1:], strict=False))


def test_a_declared_length_still_cuts_the_body() -> None:
    body = b"y" * (2 * sliced.SLICE + 5)

    async def main() -> bytes:
        w = _NeverPaused([])
        await sliced.SlicedBytesPayload(body).write_with_length(w, sliced.SLICE + 1)  # type: ignore[arg-type]
        return bytes(w.data)

    assert asyncio.run(main()) == body[: sliced.SLICE + 1]

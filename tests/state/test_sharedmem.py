"""Long worker arguments and results through shared memory (issue 16): what the worker
gets is exactly what was passed, only segment names cross the pipe, and no segment is
left behind — whatever the call's outcome."""

from __future__ import annotations

import os
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.state import offload, sharedmem

pytestmark = pytest.mark.skipif(not sharedmem.supported(), reason="no POSIX shared memory on this platform")

CHARS = st.characters(min_codepoint=0, max_codepoint=0x10FFFF)  # lone surrogates included
ASCII = st.characters(max_codepoint=127)  # written from the str's own buffer


def _segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("cg-")} if os.path.isdir("/dev/shm") else set()


class _Made:
    """The segments this process creates while it is active (other processes on the
    machine — another test run, another server — make and remove ``cg-`` segments of
    their own, so the whole of ``/dev/shm`` is no measure of what this test left)."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        real = sharedmem._posixshmem.shm_open

        def shm_open(name: str, flags: int, mode: int = 0o777) -> int:
            if flags & os.O_CREAT:
                self.names.append(name.lstrip("/"))
            return real(name, flags, mode=mode)

        mp.setattr(sharedmem._posixshmem, "shm_open", shm_open)

    def left(self) -> list[str]:
        return [n for n in self.names if n in _segments()]


def _echo(*args: Any) -> tuple[Any, ...]:
    return args


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(CHARS, max_size=40) | st.text(ASCII, max_size=40) | st.binary(max_size=40), max_size=4),
       small=st.integers(1, 9),
       slice_=st.integers(1, 7))
def test_packed_arguments_reach_the_callee_unchanged(texts: list[str | bytes], small: int, slice_: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        made = _Made(mp)
        mp.setattr(sharedmem, "HANDOFF_BYTES", small)
        mp.setattr(sharedmem, "SLICE", slice_)
        args = (texts, tuple(texts), "short", 7, None)
        packed = sharedmem.pack(args)
        try:
            long_ = [t for t in texts if len(t) >= small]
            wire = pickle.dumps(packed.args)
            assert all((t.encode("utf-8", "surrogatepass") if isinstance(t, str) else t) not in wire
                       for t in long_ if len(t) > 8)
            assert sharedmem.call(_echo, packed.args) == args  # what the worker side rebuilds
        finally:
            packed.release()
        assert made.left() == []
        assert bool(made.names) == any(len(t) >= small for t in [*texts, "short"])  # a segment exactly when one was due


def _upper_bytes(text: str) -> tuple[int, bytes]:
    return len(text), text.upper().encode("utf-8", "surrogatepass")


def test_a_long_result_comes_back_through_the_output_segment() -> None:
    text = "é" * (sharedmem.HANDOFF_BYTES + 3) + "\ud800"
    packed = sharedmem.pack((text,))
    try:
        out = packed.output(4 * len(text))
        result = sharedmem.call(_upper_bytes, packed.args, out)
        assert isinstance(result[-1], sharedmem._Written)  # not the bytes themselves
        n, data = packed.finish(result, out)
        assert (n, bytes(data)) == _upper_bytes(text)
        # a result larger than the segment comes back as it is
        small = packed.output(8)
        assert sharedmem.call(_upper_bytes, packed.args, small) == _upper_bytes(text)
    finally:
        packed.release()
    assert not any(n for n in _segments() if n in {o.name.lstrip("/") for o in (out, small)})


def test_the_store_worker_gets_long_arguments_and_gives_long_results_through_shared_memory() -> None:
    text = "x" * (2 * sharedmem.HANDOFF_BYTES) + "ghp_" + "a1B2" * 9
    with pytest.MonkeyPatch.context() as mp:
        made = _Made(mp)
        n, data = offload.in_store_worker(_upper_bytes, text, out=len(text) + 8)
        assert offload._STORE._pool is not None  # it ran in the worker process
        assert (n, bytes(data)) == _upper_bytes(text) and isinstance(data, bytearray)
        assert offload._STORE.submit(len, text).result(timeout=60) == len(text)
        assert len(made.names) >= 2  # the argument's segment and the result's, at least
        assert made.left() == []

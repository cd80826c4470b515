"""Long texts handed to a worker process, and its long results, through shared memory
(issue 16).

A worker call's arguments travel pickled through a pipe, and ``ForkingPickler.dumps``
of a 10 MB ``str`` is one C call of ~20 ms holding the GIL (``bytes``: ~5 ms) in the
pool's feeder thread: the event loop waits for it, and with it every other tenant's
request (7% of the GIL samples under ``bench.stall``'s load). A long ``str``/``bytes``
argument is therefore written into a POSIX shared-memory segment — ``bytes`` straight
from their buffer, a ``str`` encoded a slice of :data:`SLICE` at a time, the copying
done by ``pwrite`` without the GIL — and only the segment's name crosses the pipe. A
call may also give the worker an output segment (:meth:`Packed.output`) for its long
result, read back here by ``preadv`` into a ``bytearray``.

The copying is done by a thread of its own (:func:`submit`), never by the caller: the
event loop hands a 10 MB body to the worker without copying it itself (in the kernel,
a fresh segment's pages cost ~20 ms of the caller's CPU time for 10 MB). An ASCII
``str`` is written straight from its own buffer (slicing and encoding it first held
the GIL for two copies of every slice: the packer thread's GIL samples under
``bench.stall``), and a result is read into a ``bytearray`` not zeroed first.

The server creates and owns every segment (mode 0600, unlinked as soon as the call is
over, registered with multiprocessing's resource tracker, which unlinks what a killed
server left); the worker only opens them. Segments are read and written through their
descriptors, never mapped: a full ``/dev/shm`` (Docker's default is 64 MB) is then an
``OSError`` — and the call falls back to the pipe — not a ``SIGBUS``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, InvalidStateError
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Any, TypeVar

from proxy.state import rawmem
from proxy.state.priority import background_pool

T = TypeVar("T")

__all__ = ["HANDOFF_BYTES", "SLICE", "Joined", "Output", "Packed", "call", "pack", "submit", "supported"]

#: Arguments at least this long (characters or bytes) go through shared memory.
HANDOFF_BYTES = 1 << 20
#: Bytes encoded or copied per step.
SLICE = 1 << 20

try:
    import _posixshmem  # what multiprocessing.shared_memory uses on POSIX
except ImportError:  # Windows: arguments are pickled as they are
    _posixshmem = None


def supported() -> bool:
    return _posixshmem is not None


@dataclass(frozen=True, slots=True)
class _Ref:
    """A long argument in a segment: its name, its length in bytes, and whether it is
    the UTF-8 (surrogatepass) of a ``str``."""

    name: str
    size: int
    text: bool


@dataclass(frozen=True, slots=True)
class Output:
    """A segment of ``capacity`` bytes a worker writes its result into (see :func:`call`)."""

    name: str
    capacity: int


class Joined:
    """``bytes`` pieces that the worker gets as one ``bytes`` (their concatenation):
    each piece is written into the segment as it is, never joined here. Pickled (no
    shared memory), it is the joined ``bytes``."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def __len__(self) -> int:
        return sum(map(len, self.pieces))

    def __reduce__(self) -> tuple[Any, ...]:
        return bytes, (b"".join(self.pieces),)


@dataclass(frozen=True, slots=True)
class _Written:
    """A result's bytes, ``size`` of them, are in the call's output segment."""

    size: int


def _pieces(value: str | bytes | bytearray) -> Iterator[bytes | memoryview]:
    if isinstance(value, (bytes, bytearray)):  # (a bytearray arrives as bytes)
        view = memoryview(value)
        for at in range(0, len(value), SLICE):
            yield view[at : at + SLICE]
        return
    if value.isascii():  # its UTF-8 is its own buffer: written from there, no copy made here
        addr = rawmem.ascii_address(value)
        for at in range(0, len(value), SLICE):
            yield memoryview((ctypes.c_char * min(SLICE, len(value) - at)).from_address(addr + at)).cast("B")
        return
    step = max(1, SLICE // 4)
    for at in range(0, len(value), step):
        yield value[at : at + step].encode("utf-8", "surrogatepass")


def _write_all(fd: int, data: bytes | memoryview, at: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n


def _read_into(fd: int, into: bytearray | memoryview, at: int = 0) -> None:
    view = memoryview(into)
    while view:
        n = os.preadv(fd, [view[:SLICE]], at)
        if not n:
            raise OSError("shared segment shorter than announced")
        view, at = view[n:], at + n


class Packed:
    """A call's arguments with their long strings in segments of this process; release
    them (:meth:`release`) once the call is over, whatever its outcome."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self.args: tuple[Any, ...] = ()

    def _new(self, size: int) -> tuple[str, int]:
        assert _posixshmem is not None
        name = "/cg-" + secrets.token_hex(8)
        fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        self._fds[name] = fd
        resource_tracker.register(name, "shared_memory")
        if size:
            os.ftruncate(fd, size)
        return name, fd

    def put(self, value: Any) -> Any:
        """``value`` with every long ``str``/``bytes`` in it (inside tuples and lists too)
        written into a segment and replaced by its reference (and a :class:`Joined`'s
        pieces, one after the other)."""
        if isinstance(value, (str, bytes, bytearray, Joined)) and len(value) >= HANDOFF_BYTES:
            name, fd = self._new(0)
            at = 0
            for piece in value.pieces if isinstance(value, Joined) else _pieces(value):
                _write_all(fd, piece, at)
                at += len(piece)
            return _Ref(name, at, isinstance(value, str))
        if isinstance(value, tuple):
            return tuple(self.put(v) for v in value)
        if isinstance(value, list):
            return [self.put(v) for v in value]
        return value

    def output(self, capacity: int) -> Output:
        """A segment for a result of at most ``capacity`` bytes (sparse: only what the
        worker writes takes memory)."""
        name, _ = self._new(capacity)
        return Output(name, capacity)

    def finish(self, result: Any, out: Output) -> Any:
        """A result of :func:`call` with ``out``: its last item the bytes the worker wrote
        into the segment (a ``bytearray``)."""
        *head, last = result
        if not isinstance(last, _Written):
            return result
        data = rawmem.new_bytearray(last.size)  # not zeroed first: every byte is read into it
        _read_into(self._fds[out.name], data)
        return (*head, data)

    def release(self) -> None:
        fds, self._fds = self._fds, {}
        for name, fd in fds.items():
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(OSError):
                _posixshmem.shm_unlink(name)
            with contextlib.suppress(Exception):
                resource_tracker.unregister(name, "shared_memory")


def pack(args: tuple[Any, ...]) -> Packed:
    """``args`` with their long strings in new segments (:class:`Packed`)."""
    packed = Packed()
    try:
        packed.args = packed.put(args)
    except BaseException:
        packed.release()
        raise
    return packed


@contextlib.contextmanager
def _opened(name: str) -> Iterator[int]:
    """The worker's descriptor of one of the server's segments."""
    assert _posixshmem is not None
    fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0o600)
    try:
        yield fd
    finally:
        os.close(fd)


def _take(value: Any) -> Any:
    if isinstance(value, _Ref):
        data = bytearray(value.size)
        with _opened(value.name) as fd:
            _read_into(fd, data)
        return data.decode("utf-8", "surrogatepass") if value.text else bytes(data)
    if isinstance(value, tuple):
        return tuple(_take(v) for v in value)
    if isinstance(value, list):
        return [_take(v) for v in value]
    return value


def call(fn: Callable[..., Any], args: tuple[Any, ...], out: Output | None = None) -> Any:
    """In the worker: ``fn`` of the arguments :func:`pack` made. With ``out``, ``fn``
    returns a tuple whose last item is ``bytes``: written into that segment when they
    fit, and replaced in the result by how many there are (:meth:`Packed.finish`);
    sent back as they are when they do not fit or the segment cannot take them."""
    result = fn(*_take(args))
    if out is None:
        return result
    *head, data = result
    if len(data) > out.capacity:
        return result
    try:
        with _opened(out.name) as fd:
            _write_all(fd, data, 0)
    except OSError:  # e.g. /dev/shm full: through the pipe instead
        return result
    return (*head, _Written(len(data)))


def _long(value: Any) -> bool:
    if isinstance(value, (str, bytes, bytearray, Joined)):
        return len(value) >= HANDOFF_BYTES
    if isinstance(value, (tuple, list)):
        return any(_long(v) for v in value)
    return False


#: Writes the long arguments into their segments and submits the call: a thread, so that
#: the caller (the event loop) never copies 10 MB itself.
_PACKER = background_pool("cg-sharedmem", 1)


def submit(pool: Executor, fn: Callable[..., T], args: tuple[Any, ...], out: int = 0) -> Future[T]:
    """``fn(*args)`` submitted to ``pool`` (a process pool), its long arguments through
    shared memory, and the long last item of its result too when ``out`` gives its
    greatest size in bytes (:func:`call`); where shared memory is missing or full, as a
    plain call through the pipe. The future's exception is the pool's failure (a broken
    pool included)."""
    if not supported() or not (out or _long(args)):
        return pool.submit(fn, *args)
    fut: Future[T] = Future()

    def start() -> None:
        if not fut.set_running_or_notify_cancel():
            return  # cancelled before it started
        try:
            try:
                packed = pack(args)
            except OSError:  # no room in shared memory: through the pipe
                _chain(pool.submit(fn, *args), fut, None, None)
                return
            try:
                output = packed.output(out) if out else None
                inner = pool.submit(call, fn, packed.args, output)
            except OSError:
                packed.release()
                _chain(pool.submit(fn, *args), fut, None, None)
                return
            except BaseException:
                packed.release()
                raise
            _chain(inner, fut, packed, output)
        except BaseException as exc:  # noqa: BLE001 - e.g. a broken pool: the caller's to handle
            with contextlib.suppress(InvalidStateError):
                fut.set_exception(exc)

    _PACKER.submit(start)
    return fut


def _chain(inner: Future[Any], fut: Future[Any], packed: Packed | None, output: Output | None) -> None:
    """``inner``'s outcome to ``fut`` (running), its output read and its segments
    released before ``fut``'s caller is woken (it may check for them)."""

    def done(f: Future[Any]) -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            if f.cancelled():
                error = InvalidStateError("the worker call was cancelled")
            elif (error := f.exception()) is None:
                result = packed.finish(f.result(), output) if packed is not None and output is not None else f.result()
        except BaseException as exc:  # noqa: BLE001 - reading the output failed
            error = exc
        finally:
            if packed is not None:
                packed.release()
        with contextlib.suppress(InvalidStateError):  # its caller gave up meanwhile
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)

    inner.add_done_callback(done)

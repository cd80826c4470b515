"""Connections of ``serve --workers N`` handed to the workers in turn.

The supervisor listens and accepts; each accepted connection is passed (``SCM_RIGHTS``
over a Unix socket pair, one per worker) to the next live worker in round-robin order,
which serves it on its own event loop like one it accepted itself. Clients keep their
connections open (an agent holds one keep-alive connection for its whole run), so how
connections are spread is how load is spread: the kernel's ``SO_REUSEPORT`` hashing
spreads a few long-lived connections at random (8 connections over 2 workers split
6/2 or worse about a third of the time), round-robin spreads them evenly. This is
what Node's ``cluster`` module does by default on Linux, for the same reason.

- :class:`Dispatcher` (the supervisor): a thread accepting on the listening socket;
  a worker that died is skipped (its channel is refused) until it is started again
  with a new channel.
- :class:`HandoffSite` (a worker): an aiohttp site reading connections from its
  channel instead of accepting them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading

from aiohttp import web

__all__ = ["HANDOFF_FD_ENV", "Dispatcher", "HandoffSite", "handoff_fd"]

log = logging.getLogger(__name__)

#: The worker's end of its channel (set by the supervisor).
HANDOFF_FD_ENV = "COMPACTION_GATE_HANDOFF_FD"
#: Connections read from the channel per wake-up at most.
_BATCH = 16


def handoff_fd() -> int | None:
    """The channel this worker receives connections on (``None``: not a worker)."""
    value = os.environ.get(HANDOFF_FD_ENV)
    return int(value) if value and value.isdigit() else None


class Dispatcher:
    """Accept on ``listener`` and hand each connection to the next worker's channel."""

    def __init__(self, listener: socket.socket, n: int) -> None:
        self.listener = listener
        self.channels: list[socket.socket | None] = [None] * n
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def channel_for(self, index: int) -> int:
        """A new channel for worker ``index`` (started or restarted); returns the fd
        the worker inherits (the caller closes it once the worker is started)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)  # a worker that does not read (starting, stuck) is skipped
        with self._lock:
            old, self.channels[index] = self.channels[index], ours
        if old is not None:
            old.close()
        fd = theirs.detach()
        os.set_inheritable(fd, True)
        return fd

    def start(self) -> None:
        self.listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._run, name="cg-dispatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting (connections already handed over stay with their worker)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            for i, ch in enumerate(self.channels):
                if ch is not None:
                    ch.close()
                self.channels[i] = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            with conn:
                self._hand(conn)

    def _hand(self, conn: socket.socket) -> None:
        with self._lock:
            n = len(self.channels)
            for _ in range(n):
                i, self._next = self._next, (self._next + 1) % n
                ch = self.channels[i]
                if ch is None:
                    continue
                try:
                    socket.send_fds(ch, [b"c"], [conn.fileno()])
                    return
                except OSError:
                    continue  # that worker is gone, or its channel is full: the next one
        log.warning("no worker to take a connection; closing it")


class HandoffSite(web.BaseSite):
    """Serve the connections the supervisor hands over on channel ``fd``."""

    __slots__ = ("_channel", "_tasks")

    def __init__(self, runner: web.BaseRunner, fd: int) -> None:
        super().__init__(runner)
        self._channel = socket.socket(fileno=fd)
        self._channel.setblocking(False)
        self._tasks: set[asyncio.Task[object]] = set()

    @property
    def name(self) -> str:
        return "handoff"

    async def start(self) -> None:
        await super().start()
        asyncio.get_running_loop().add_reader(self._channel.fileno(), self._take)

    def _take(self) -> None:
        loop = asyncio.get_running_loop()
        server = self._runner.server
        for _ in range(_BATCH):
            try:
                msg, fds, _flags, _addr = socket.recv_fds(self._channel, 1, 4)
            except BlockingIOError:
                return
            except OSError:
                msg, fds = b"", []
            if not msg and not fds:  # the supervisor is gone
                loop.remove_reader(self._channel.fileno())
                return
            for fd in fds:
                sock = socket.socket(fileno=fd)
                if server is None:
                    sock.close()
                    continue
                sock.setblocking(False)
                task = loop.create_task(loop.connect_accepted_socket(server, sock))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._channel.fileno())
        self._channel.close()
        await super().stop()

"""Group commit: the commits a process makes in one event-loop step — or while its
previous group is being committed — handed to the store together, as one transaction.

:class:`CommitGroups` queues each :meth:`~CommitGroups.commit` and runs one task that
takes the whole queue as a group, awaits ``commit_many(group)`` (one outcome per
commit, in order), answers every caller of the group, and takes the next queue, until
nothing is queued. The task starts in the loop step after the first commit was queued,
so the other requests of that step join; while a group's transaction runs on a thread
the next group gathers. A caller is answered only once ``commit_many`` returned — its
transaction committed — so nothing is acknowledged before it is durable and visible to
every process. An exception fails every commit of its group."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from proxy.state.protocol import Commit, Committed, StateUnavailable

__all__ = ["CommitGroups"]


def _again(exc: BaseException) -> BaseException:
    """``exc`` for one more waiter of a group (an unavailable store: a fresh exception
    each; a cancelled or interrupted group: unavailable, its outcome unknown; anything
    else, a bug: the same)."""
    if isinstance(exc, StateUnavailable):
        return StateUnavailable(str(exc), exc.reason)
    if not isinstance(exc, Exception):
        return StateUnavailable("the commit was interrupted", "unreachable")
    return exc


class CommitGroups:
    """Commits queued for ``commit_many`` in groups (see the module docstring)."""

    def __init__(self, commit_many: Callable[[list[Commit]], Awaitable[list[Committed]]]) -> None:
        self._commit_many = commit_many
        self._queue: list[tuple[Commit, asyncio.Future[Committed]]] = []
        self._task: asyncio.Task[None] | None = None

    async def commit(self, change: Commit) -> Committed:
        """``change``'s outcome, once the transaction of its group is committed."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Committed] = loop.create_future()
        self._queue.append((change, fut))
        if self._task is None:
            self._task = loop.create_task(self._run())
        return await asyncio.shield(fut)  # a cancelled caller does not cancel the others' commit

    async def _run(self) -> None:
        try:
            while self._queue:
                group, self._queue = self._queue, []
                try:
                    results = await self._commit_many([c for c, _ in group])
                except BaseException as exc:
                    for _, fut in group:
                        if not fut.done():
                            fut.set_exception(_again(exc))
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, fut), res in zip(group, results, strict=True):
                    if not fut.done():
                        fut.set_result(res)
        finally:
            self._task = None
            left, self._queue = self._queue, []
            for _, fut in left:
                if not fut.done():
                    fut.set_exception(StateUnavailable("the commit was interrupted", "unreachable"))

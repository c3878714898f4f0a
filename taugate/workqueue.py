"""The one way taugate runs background work: a deduplicating, delayed queue of keys handled by
one or more workers, never one key by two at once (client-go's ``workqueue``: a key added while
it is being handled is handled again after). Periodic work is a key its handler adds again."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Hashable


class WorkQueue:
    """``add(key, delay)`` schedules ``key`` after ``delay`` seconds; a key already waiting keeps
    the earlier time, so a burst of events is one run. ``run(handle, workers)`` handles due keys,
    earliest first, ``workers`` at a time, until ``stop()`` (the keys in hand are handled first)
    or cancellation. Taking the next key is O(log n) (a heap; a key moved earlier leaves its old
    entry behind, skipped when it comes up), so a backlog of 10,000 runs is not 10,000 scans of
    10,000. Use from one event loop."""

    def __init__(self) -> None:
        self._due: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._order = itertools.count()
        self._active: set[Hashable] = set()
        self._again: dict[Hashable, float] = {}
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self.processed = 0

    def add(self, key: Hashable, delay: float = 0.0) -> None:
        due = time.monotonic() + max(0.0, delay)
        if key in self._active:  # handled again once its worker is done
            if key not in self._again or due < self._again[key]:
                self._again[key] = due
            return
        if key not in self._due or due < self._due[key]:
            self._due[key] = due
            heapq.heappush(self._heap, (due, next(self._order), key))
            if self._wake is not None:
                self._wake.set()

    def __len__(self) -> int:
        return len(self._due) + len(self._again)

    def stop(self) -> None:
        """End ``run`` once the keys in hand (if any) are handled."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()

    def _next_due(self) -> tuple[Hashable, float] | None:
        """The earliest waiting key and its time, stale heap entries dropped on the way."""
        while self._heap:
            due, _, key = self._heap[0]
            if self._due.get(key) == due:
                return key, due
            heapq.heappop(self._heap)
        return None

    async def run(self, handle: Callable[[Hashable], Awaitable[None]], workers: int = 1) -> None:
        self._wake = asyncio.Event()
        try:
            if workers <= 1:
                await self._work(handle)
            else:  # a handler's exception ends every worker, as it ends the one
                async with asyncio.TaskGroup() as group:
                    for _ in range(workers):
                        group.create_task(self._work(handle))
        finally:
            self._stopping = False  # a stop() before or during this run ends it, not the next one

    async def _work(self, handle: Callable[[Hashable], Awaitable[None]]) -> None:
        assert self._wake is not None
        while not self._stopping:
            found = self._next_due()
            wait = None if found is None else found[1] - time.monotonic()
            if found is None or (wait is not None and wait > 0):
                self._wake.clear()
                # asyncio.timeout, not wait_for: Python 3.11's wait_for returns normally when it is
                # cancelled just as the event is set (gh-86296), and the cancelled worker then
                # waited on, so stopping hung (seen with several workers: each one's set wakes the rest).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                continue
            key = found[0]
            heapq.heappop(self._heap)
            del self._due[key]
            self._active.add(key)
            if self._heap:  # another worker may take the next key now
                self._wake.set()
            try:
                await handle(key)
            finally:
                self._active.discard(key)
                self.processed += 1
                again = self._again.pop(key, None)
                if again is not None:
                    self.add(key, again - time.monotonic())
            self._wake.set()  # a worker waiting for a later key looks again


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel a worker task and wait until it ended (a handler's thread finishes on its own)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

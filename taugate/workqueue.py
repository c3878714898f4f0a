"""The one way taugate runs background work: a deduplicating, delayed queue of keys with one
worker (client-go's ``workqueue`` idea). Periodic work is a key its handler adds again."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Hashable


class WorkQueue:
    """``add(key, delay)`` schedules ``key`` after ``delay`` seconds; a key already waiting keeps
    the earlier time, so a burst of events is one run. ``run(handle)`` handles due keys one at a
    time, earliest first, until ``stop()`` (the key being handled finishes first) or cancellation.
    Use from one event loop."""

    def __init__(self) -> None:
        self._due: dict[Hashable, float] = {}
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self.processed = 0

    def add(self, key: Hashable, delay: float = 0.0) -> None:
        due = time.monotonic() + max(0.0, delay)
        if key not in self._due or due < self._due[key]:
            self._due[key] = due
            if self._wake is not None:
                self._wake.set()

    def __len__(self) -> int:
        return len(self._due)

    def stop(self) -> None:
        """End ``run`` once the key in hand (if any) is handled."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()

    async def run(self, handle: Callable[[Hashable], Awaitable[None]]) -> None:
        self._wake = asyncio.Event()
        try:
            while not self._stopping:
                self._wake.clear()
                key, due = min(self._due.items(), key=lambda item: item[1], default=(None, None))
                wait = None if due is None else due - time.monotonic()
                if wait is None or wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
                    continue
                del self._due[key]
                await handle(key)
                self.processed += 1
        finally:
            self._stopping = False  # a stop() before or during this run ends it, not the next one


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel a worker task and wait until it ended (a handler's thread finishes on its own)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

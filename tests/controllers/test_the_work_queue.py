"""The work queue every background loop runs on (``taugate/workqueue.py``): earliest key first, a
burst of adds is one handling, several workers never hold one key at once, a key added while it is
handled is handled again after, and a backlog of 10,000 keys is taken in O(log n) each."""

from __future__ import annotations

import asyncio

from taugate.workqueue import WorkQueue


async def _drain(q: WorkQueue, handle, until, workers: int = 1) -> None:
    """Run the queue until ``until()`` holds, then stop it (the keys in hand finish)."""
    task = asyncio.create_task(q.run(handle, workers))
    try:
        while not until():
            await asyncio.sleep(0)  # yield to the workers
            if task.done():
                task.result()
                break
    finally:
        q.stop()
        await task


async def test_keys_are_handled_earliest_first_and_a_burst_of_adds_is_one_handling():
    q = WorkQueue()
    seen: list[str] = []

    async def handle(key):
        seen.append(key)

    q.add("late", 0.05)
    q.add("soon", 0.01)
    for _ in range(5):
        q.add("now")
    q.add("late", 0.0)  # moved earlier: its first entry is left behind and skipped
    await _drain(q, handle, lambda: len(seen) >= 3)
    assert seen == ["now", "late", "soon"]


async def test_several_workers_never_hold_one_key_and_a_key_added_meanwhile_is_handled_again_after():
    q = WorkQueue()
    holding: set[str] = set()
    overlaps: list[str] = []
    count = {"a": 0, "b": 0, "c": 0}
    gate = asyncio.Event()

    async def handle(key):
        if key in holding:
            overlaps.append(key)
        holding.add(key)
        count[key] += 1
        if key == "a" and count["a"] == 1:
            q.add("a")  # a change while "a" is handled: "a" again, after, never beside itself
            await gate.wait()
        await asyncio.sleep(0)
        holding.discard(key)

    for k in ("a", "b", "c"):
        q.add(k)

    async def release():
        while count["b"] == 0 or count["c"] == 0:  # the other workers went on while "a" was held
            await asyncio.sleep(0)
        gate.set()

    releaser = asyncio.create_task(release())
    await _drain(q, handle, lambda: count["a"] == 2, workers=3)
    await releaser
    assert overlaps == []
    assert count == {"a": 2, "b": 1, "c": 1}


async def test_a_backlog_of_ten_thousand_keys_is_handled_once_each_in_order():
    q = WorkQueue()
    seen: list[int] = []

    async def handle(key):
        seen.append(key)

    for i in reversed(range(10_000)):
        q.add(i, i * 1e-9)
    await _drain(q, handle, lambda: len(seen) == 10_000, workers=4)
    assert sorted(seen) == list(range(10_000)) and len(set(seen)) == 10_000
    assert q.processed == 10_000


async def test_a_handlers_error_ends_the_run_with_that_error():
    q = WorkQueue()

    async def handle(key):
        raise RuntimeError(f"broken {key}")

    q.add("x")
    for workers in (1, 3):
        q.add("x")
        try:
            await q.run(handle, workers)
        except* RuntimeError as group:
            assert "broken x" in str(group.exceptions[0])
        else:
            raise AssertionError("the error was swallowed")

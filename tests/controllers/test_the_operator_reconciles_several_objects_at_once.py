"""The operator's reconciles run ``OperatorOptions.workers`` at once in the controller's own
threads (a fleet's cold start: hundreds of workspaces, each a few requests to a busy API server),
never one key by two workers, and stopping waits for the reconciles still running (a leader
releases its Lease only after its last write)."""

from __future__ import annotations

import asyncio
import threading

from taugate.controllers.operator import Controller, OperatorOptions
from taugate.settings import Settings


class Gate:
    """Reconciles whose first ``n`` wait inside until all ``n`` are in at once and the test lets
    them go (a barrier of ``n`` + 1, so the test proves the overlap instead of timing it); ``full``
    is set when the ``n``-th is in, ``all_done`` after ``total`` reconciles."""

    def __init__(self, n: int, total: int) -> None:
        self.n, self.total = n, total
        self.barrier = threading.Barrier(n + 1, timeout=30)
        self.full = threading.Event()
        self.lock = threading.Lock()
        self.calls = 0
        self.inside: set = set()
        self.overlap: list[tuple] = []
        self.threads: set[str] = set()
        self.done: list[tuple] = []
        self.all_done = threading.Event()

    def __call__(self, key):
        with self.lock:
            if key in self.inside:
                self.overlap.append(key)
            self.inside.add(key)
            self.threads.add(threading.current_thread().name)
            self.calls += 1
            first = self.calls <= self.n
            if self.calls == self.n:
                self.full.set()
        try:
            if first:
                self.barrier.wait()
        finally:
            with self.lock:
                self.inside.discard(key)
                self.done.append(key)
                if len(self.done) == self.total:
                    self.all_done.set()


def _controller(workers: int, reconcile) -> Controller:
    ctl = Controller(kube=None, settings=Settings(), options=OperatorOptions(workers=workers, resync_seconds=3600))
    ctl.reconcile = reconcile  # the dispatch to reconcile_* is the operator's own tests' (test_operator.py)
    return ctl


def test_four_workers_reconcile_four_objects_at_once_in_the_controllers_own_threads():
    # the policy key and three workspaces meet inside; then the workspace queued again while it waited
    gate = Gate(4, total=5)

    async def main():
        ctl = _controller(4, gate)
        ctl.task = asyncio.create_task(ctl.run())
        keys = [("workspace", "tau-platform", f"ws-{i}") for i in range(3)]
        for key in keys:
            ctl.enqueue(key)
        assert await asyncio.to_thread(gate.full.wait, 30)
        ctl.enqueue(keys[0])  # the same key again while it is handled: after, never beside itself
        await asyncio.to_thread(gate.barrier.wait)
        assert await asyncio.to_thread(gate.all_done.wait, 30)
        await ctl.stop()
        return ctl

    ctl = asyncio.run(asyncio.wait_for(main(), 60))
    assert gate.overlap == [] and ctl.errors == 0 and ctl.reconciles == 5
    assert gate.done.count(("workspace", "tau-platform", "ws-0")) == 2
    assert len(gate.threads) >= 4 and all(name.startswith("taugate-reconcile") for name in gate.threads)


def test_stopping_waits_for_a_reconcile_still_running_in_its_thread():
    entered, release = threading.Event(), threading.Event()
    finished = []

    def slow(key):
        entered.set()
        release.wait(30)
        finished.append(key)

    async def main():
        ctl = _controller(2, slow)
        ctl.task = asyncio.create_task(ctl.run())
        await asyncio.to_thread(entered.wait, 30)
        stopping = asyncio.create_task(ctl.stop())
        done, _ = await asyncio.wait({stopping}, timeout=1)  # the worker task is cancelled by now
        assert not done and finished == []
        release.set()
        await stopping
        return finished

    assert asyncio.run(asyncio.wait_for(main(), 60)) == [("admission-policy", "", "taugate-admitted-workloads")]

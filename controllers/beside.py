"""The recorder in a process of its own beside the controllers' (``run_beside``), started by the
acting operator and ending with it.

kopf calls none of an operator's handlers until every one of its indices has listed its whole
resource (kopf ``_core/reactor/observation.py``/``processing.py``: the ``operator_indexed``
toggles), and the recorder indexes every run's Jobs, Workloads, Pods and every Node: 145 s at 5,000
Nodes and 10,000 Jobs, which the workspaces once waited for. Then it reconciles every run it finds.
A kopf operator of its own on a thread of the same process no longer made the workspaces wait for
its indices, but both still took turns on one interpreter lock (docs/performance.md: the first
workspace reconciled 80 s after a cold start at 5,000 Nodes). In a process of its own (spawned:
a fresh interpreter, no thread of the parent's copied) it lists and records on the other core.

The parent and the child talk over one pipe. The child says ``hello`` once it runs; the parent
sends ``stop`` (the child's kopf stops, the child exits 0) and ``ping`` (the liveness probe,
``Beside.responds``: answered from the child's event loop, so a wedged loop fails the probe). The
child ignores SIGINT and SIGTERM (the parent, the container's process, decides when it stops);
when the pipe ends without ``stop`` the parent is gone (a leader that lost its Lease exits at once,
``leader.exit_at_once``) and the child exits at once too, so no record is written after the next
leader may write. The child's failure (its message) ends the parent: a replica without its
recorder would follow no run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Coroutine
from multiprocessing import resource_tracker
from typing import Any

import kopf
import kubernetes.client

from taugate import logs
from taugate.controllers.kopf_startup import (
    quiet_routine_handler_lines,
    register_connection,
    wake_waiters_only_on_change,
)
from taugate.controllers.recorder.config import RecorderConfig
from taugate.controllers.recorder.evidence.records import EvidenceError
from taugate.settings import Settings

log = logging.getLogger("taugate.operator")


class Beside:
    """The recorder's process: ``start`` spawns it, ``ended`` waits for its end (its exit code;
    ``failure`` holds what it said when it failed), ``stop`` asks it to stop and waits (after
    ``stop_seconds``, kills it).

    The controllers' liveness probe (``register_probe``) asks its event loop to answer within
    ``limit`` seconds, as the controllers' own loop must answer kopf's health endpoint (a wedged
    recorder would otherwise record nothing with the pod Live). Below the chart's probe timeout
    (3 s), so the probe's answer says why; the kubelet restarts the pod after four failures 15 s
    apart."""

    limit = 2.0
    start_seconds = 60.0
    stop_seconds = 30.0

    def __init__(self, cfg: kubernetes.client.Configuration, settings: Settings, config: RecorderConfig,
                 test_mode: bool = False) -> None:
        self._args = (cfg, settings, config, test_mode, logs.configured())
        self.process: Any = None  # the multiprocessing.Process
        self._conn: Any = None
        self._pongs: dict[int, asyncio.Future] = {}
        self._sent = 0
        self.failure: str | None = None  # what the child said when it failed
        self.failure_kind: str | None = None
        self._gone: asyncio.Future | None = None
        self._hello = False
        self._ran = False
        self._started = 0.0

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        """Spawn the child (it builds its recorder and kopf operator there). Call on the event loop
        that then runs ``ended`` and the probe."""
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process = context.Process(target=child_main, args=(child, *self._args), name="taugate-recorder")
        self._started = time.monotonic()
        _start_deaf(self.process)
        child.close()
        loop = asyncio.get_running_loop()
        self._gone = loop.create_future()
        loop.add_reader(self._conn.fileno(), self._receive)
        loop.add_reader(self.process.sentinel, self._exited)

    def _receive(self) -> None:
        try:
            self._take(self._conn.recv())
        except (EOFError, OSError):  # the child is gone: ``_exited`` ends ``ended``
            asyncio.get_running_loop().remove_reader(self._conn.fileno())

    def _take(self, message: tuple) -> None:
        if message[0] == "hello":
            self._hello = True
        elif message[0] == "pong":
            fut = self._pongs.pop(message[1], None)
            if fut is not None and not fut.done():
                fut.set_result(message[2])
        elif message[0] == "failed":
            self.failure_kind, self.failure = message[1], message[2]

    def _exited(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.process.sentinel)
        loop.remove_reader(self._conn.fileno())
        with contextlib.suppress(EOFError, OSError):
            while self._conn.poll():  # what it said before it exited, up to the pipe's end
                self._take(self._conn.recv())
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    async def ended(self) -> int:
        """Wait until the child has exited; its exit code."""
        assert self._gone is not None, "start() first"
        await asyncio.shield(self._gone)
        await asyncio.to_thread(self.process.join)
        return self.process.exitcode

    async def stop(self) -> None:
        """Ask the child to stop; after ``stop_seconds``, kill it."""
        if self.process is None or self.process.exitcode is not None:
            return
        with contextlib.suppress(OSError):  # gone already
            self._conn.send(("stop",))
        try:
            async with asyncio.timeout(self.stop_seconds):
                await self.ended()
            return
        except TimeoutError:
            pass
        log.warning("the recorder's process did not stop within %g s: killing it", self.stop_seconds)
        self.process.kill()  # it ignores SIGTERM: its parent decides when it stops
        await self.ended()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    async def responds(self) -> dict:
        """How long the recorder's loop took to answer; raises TimeoutError past ``limit``, when
        its loop has ended, or when the child has not said hello (a fresh interpreter importing
        taugate and kopf, 2-3 s) or started its loop ``start_seconds`` after its start."""
        if self.process is None:
            return {"recorder": "starting"}
        if not self._hello:
            if time.monotonic() - self._started < self.start_seconds:
                return {"recorder": "starting"}
            raise TimeoutError
        self._sent += 1
        seq = self._sent
        fut = self._pongs[seq] = asyncio.get_running_loop().create_future()
        started = time.monotonic()
        try:
            self._conn.send(("ping", seq))
            async with asyncio.timeout(self.limit):
                state = await fut
        except OSError:
            raise TimeoutError from None  # the child is gone: ``ended`` ends the operator
        finally:
            self._pongs.pop(seq, None)
        if state == "running":
            self._ran = True
            return {"recorderLoopSeconds": round(time.monotonic() - started, 3)}
        if state == "starting" and not self._ran and time.monotonic() - self._started < self.start_seconds:
            return {"recorder": "starting"}
        raise TimeoutError  # no loop after start_seconds, or no longer one

    def register_probe(self, registry: kopf.OperatorRegistry) -> None:
        """A kopf probe on the controllers' health endpoint (HTTP 500 when it fails)."""

        @kopf.on.probe(registry=registry, id="recorder")
        async def _recorder_responds(**_: Any) -> dict:
            try:
                return await self.responds()
            except TimeoutError:
                raise kopf.PermanentError(
                    f"the recorder's event loop has not answered within {self.limit:g} s") from None


SIGNALS = {signal.SIGTERM, signal.SIGINT}
"""What the child ignores: its parent decides when it stops (``child_main``)."""


def _start_deaf(process: Any) -> None:
    """Start ``process`` from a thread that blocks ``SIGNALS``. The child inherits the mask across
    the fork and exec, so a signal sent to the whole process group while it imports (a terminal's
    Ctrl-C; an init such as dumb-init forwards the kubelet's SIGTERM to the group) stays pending
    until ``child_main`` ignores it, instead of killing it by the default action; the parent's
    other threads keep their masks, so the parent hears it."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            # The first start launches multiprocessing's resource tracker, which unblocks SIGINT
            # and SIGTERM in the calling thread after (CPython Lib/multiprocessing/
            # resource_tracker.py ensure_running): launched first, before the mask is set.
            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
            process.start()
        except BaseException as e:
            failed.append(e)

    starter = threading.Thread(target=run, name="taugate-recorder-start")
    starter.start()
    starter.join()
    if failed:
        raise failed[0]


async def run_beside(controllers: Coroutine[Any, Any, None], beside: Beside) -> None:
    """Run the controllers' kopf operator and, beside it, the recorder's process.

    One stopping stops the other: the controllers on their stop flag, a signal or an error (the
    recorder is then asked to stop); the recorder only on an error (raised here, so the process
    exits and the pod restarts)."""
    # Created before the controllers' operator first runs, so that kopf counts it among the tasks it
    # found, not among the ones it cancels as hung at its exit.
    beside.start()
    side = asyncio.create_task(beside.ended(), name="taugate-recorder-process")
    main = asyncio.create_task(controllers, name="taugate-operator")
    try:
        done, _ = await asyncio.wait({main, side}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not main.done():
            main.cancel()
        with logs.timed(log, "stopped the recorder's process"):
            await beside.stop()
        await asyncio.wait({main, side})
        beside.close()
    error = None if main.cancelled() else main.exception()
    if error is not None:
        raise error
    if main in done:
        return
    if beside.failure_kind == EvidenceError.__name__:  # the command's one line: "recorder: ..."
        raise EvidenceError(beside.failure or "")
    if beside.failure is not None:
        raise RuntimeError(f"the recorder's operator failed: {beside.failure_kind}: {beside.failure}")
    raise RuntimeError(f"the recorder's process stopped on its own (exit code {side.result()}; its log says why)")


def run_kopf(registry: kopf.OperatorRegistry, stop: threading.Event,
             loops: list[asyncio.AbstractEventLoop]) -> bool:
    """Run kopf for ``registry`` on a new event loop (appended to ``loops``) until ``stop`` is set;
    whether it was (False: kopf ended on its own). kopf waits on a ``threading.Event`` stop flag in
    an executor thread (kopf ``_cogs/aiokits/aioadapters.py``), which ``asyncio.run`` joins at its
    end: the flag is set whatever ends kopf, or a failing kopf would wait there forever."""
    asked: list[bool] = []

    async def operator() -> None:
        loops.append(asyncio.get_running_loop())
        try:
            await kopf.operator(registry=registry, standalone=True, clusterwide=True, stop_flag=stop)
        finally:
            asked.append(stop.is_set())
            stop.set()

    asyncio.run(operator())
    return asked[0]


def child_main(conn: multiprocessing.connection.Connection, cfg: kubernetes.client.Configuration,
               settings: Settings, config: RecorderConfig, test_mode: bool, logging_setup: Any) -> None:
    """The recorder's process: its kopf operator on a thread, the pipe on the main thread."""
    for sig in SIGNALS:  # a pending one (blocked since the spawn, ``_start_deaf``) is discarded
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    if logging_setup is not None:
        logs.configure(*logging_setup)
    quiet_routine_handler_lines()
    wake_waiters_only_on_change()
    stop = threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []
    failed: list[bool] = []
    sending = threading.Lock()
    ended_r, ended_w = os.pipe()

    def send(message: tuple) -> None:
        with sending, contextlib.suppress(OSError):  # the parent is gone: the main thread exits
            conn.send(message)

    def run() -> None:
        from taugate.controllers.recorder.watch import Recorder

        try:
            recorder = Recorder.create(config, settings, cfg)
            try:
                registry = kopf.OperatorRegistry()
                register_connection(registry, cfg, test_mode)
                recorder.register(registry)
                asked = run_kopf(registry, stop, loops)
            finally:
                recorder.close()
            if not asked:
                failed.append(True)
                send(("failed", "Stopped", "kopf ended on its own (the log above says why)"))
        except BaseException as e:
            failed.append(True)
            log.exception("the recorder failed")
            send(("failed", e.__class__.__name__, str(e)))
        finally:
            os.write(ended_w, b"x")

    send(("hello",))
    worker = threading.Thread(target=run, name="taugate-recorder")
    worker.start()
    while True:
        ready = multiprocessing.connection.wait([conn, ended_r])
        if ended_r in ready:
            break
        try:
            message = conn.recv()
        except (EOFError, OSError):
            # The parent is gone without asking to stop (a lost Lease exits it at once): so does this.
            os._exit(1)
        if message[0] == "stop":
            stop.set()
        elif message[0] == "ping":
            try:
                loops[0].call_soon_threadsafe(send, ("pong", message[1], "running"))
            except IndexError:
                send(("pong", message[1], "starting"))
            except RuntimeError:  # its loop is closed: the recorder is ending
                send(("pong", message[1], "ended"))
    worker.join()
    sys.exit(1 if failed else 0)  # through atexit: the kubernetes client's temporary key files go

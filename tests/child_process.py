"""A child process measured by itself: its exit code, output, wall time and its own peak memory.

The peak is the child's ``ru_maxrss`` from ``os.wait4`` on its pid (the rusage of that one
process, reaped here), not ``getrusage(RUSAGE_CHILDREN)``, which is the largest peak of any child
the test run ever reaped (a 2.6 GB compiler earlier in the run would fail every memory check)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    peak_mib: float
    """The child's own peak resident memory (``ru_maxrss``, KiB on Linux) in MiB."""


def run_measured(args: list[str], *, cwd: str | os.PathLike | None = None, stdin: bytes | None = None,
                 env: dict[str, str] | None = None, timeout: float = 120) -> Finished:
    """Run ``args`` to its end and measure it; killed (and the test failed) after ``timeout`` s."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        if stdin is not None:
            inp.write(stdin)
            inp.seek(0)
        started = time.monotonic()
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=inp if stdin is not None else subprocess.DEVNULL,
                                stdout=out, stderr=err)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        finally:
            killer.cancel()
        seconds = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        assert seconds < timeout, f"{args[:4]} did not finish within {timeout} s"
        out.seek(0)
        err.seek(0)
        return Finished(proc.returncode, out.read(), err.read(), seconds, usage.ru_maxrss / 1024)

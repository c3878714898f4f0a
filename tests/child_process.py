"""A child process measured by itself: its exit code, output, wall time and its own peak memory.

``getrusage(RUSAGE_CHILDREN).ru_maxrss`` is the largest peak of any child the test run ever
reaped (a 2.6 GB compiler earlier in the run fails every later memory check), and even a
child's own ``ru_maxrss`` (``os.wait4``) starts at the size of the process it was forked from:
Linux keeps the memory high-water mark of the address space a process replaces at ``exec``
(``exec_mmap`` -> ``setmax_mm_hiwater_rss``), and Python forks the command from the test process
(vfork: its address space), so a 400 MB pytest makes every child "peak" at 400 MB. So the command
is started by a small launcher (a fresh interpreter, ~10 MB), which forks and execs it and
reaps it with ``os.wait4``: the peak reported is the command's own, or the launcher's ~10 MB
when the command is smaller."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

_LAUNCHER = """
import os, sys
report, command = int(sys.argv[1]), sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.close(report)
    try:
        os.execvp(command[0], command)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
os.write(report, b"%d %d" % (os.waitstatus_to_exitcode(status), usage.ru_maxrss))
"""


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    peak_mib: float
    """The command's own peak resident memory (``ru_maxrss`` of its ``wait4``, KiB on Linux) in MiB."""


def run_measured(args: list[str], *, cwd: str | os.PathLike | None = None, stdin: bytes | None = None,
                 env: dict[str, str] | None = None, timeout: float = 120) -> Finished:
    """Run ``args`` to its end and measure it; killed (its whole process group) and the test
    failed after ``timeout`` seconds."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        if stdin is not None:
            inp.write(stdin)
            inp.seek(0)
        read_end, write_end = os.pipe()
        started = time.monotonic()
        try:
            proc = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, str(write_end), *args], cwd=cwd, env=env,
                                    stdin=inp if stdin is not None else subprocess.DEVNULL, stdout=out, stderr=err,
                                    pass_fds=(write_end,), start_new_session=True)
        finally:
            os.close(write_end)
        killer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
        killer.start()
        try:
            proc.wait()
            report = os.read(read_end, 64)
        finally:
            killer.cancel()
            os.close(read_end)
        seconds = time.monotonic() - started
        assert seconds < timeout, f"{args[:4]} did not finish within {timeout} s"
        assert report, f"{args[:4]}: the launcher reported nothing (exit {proc.returncode})"
        code, maxrss_kib = (int(x) for x in report.split())
        out.seek(0)
        err.seek(0)
        return Finished(code, out.read(), err.read(), seconds, maxrss_kib / 1024)

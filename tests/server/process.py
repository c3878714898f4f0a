"""``taugate serve`` as a child process, for end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Served(subprocess.Popen):
    """A ``taugate serve`` child whose stderr (its logs) is read as it comes, so a server that logs
    every decision never blocks on a full pipe; ``stderr_text()`` is what it wrote so far."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        super().__init__(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self._err: list[str] = []
        self._drain = threading.Thread(target=lambda: self._err.extend(self.stderr), daemon=True)
        self._drain.start()

    def stderr_text(self) -> str:
        return "".join(self._err)

    def stop(self, timeout: float = 30) -> str:
        """SIGTERM, wait (kill after ``timeout`` seconds), then everything it wrote to stderr."""
        self.terminate()
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
        self._drain.join(timeout)
        return self.stderr_text()


def serve(*args: str, env: dict[str, str] | None = None) -> Served:
    """Start ``python -m taugate.cli serve ARGS`` with piped output (kill it when done);
    ``env``: extra environment variables (``TAUGATE_*`` settings)."""
    return Served([sys.executable, "-m", "taugate.cli", "serve", *args], env={**os.environ, **(env or {})})


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory (``VmRSS``) or its peak (``VmHWM``) in MiB, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise LookupError(f"{field} not in /proc/{pid}/status")


async def startup_lines(proc: Served) -> tuple[int, Path]:
    """Read the two start-up lines: the port served and the CA certificate path."""
    lines = []
    for _ in range(2):
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout=60)
        assert line, proc.stop()
        lines.append(line)
    port = int(re.search(r"on https://127\.0\.0\.1:(\d+)$", lines[0].strip()).group(1))
    ca = Path(re.search(r"CA certificate: (\S+)$", lines[1].strip()).group(1))
    return port, ca


@contextlib.asynccontextmanager
async def serving(*args: str, env: dict[str, str] | None = None):
    """``taugate serve ARGS`` for the ``async with`` block: yields (process, port, CA path);
    afterwards SIGTERM must stop it with exit code 0 (it is killed whatever happens)."""
    proc = serve(*args, env=env)
    try:
        port, ca = await startup_lines(proc)
        yield proc, port, ca
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

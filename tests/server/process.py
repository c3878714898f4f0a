"""``taugate serve`` as a child process, for end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``python -m taugate.cli serve ARGS`` with piped output (kill it when done);
    ``env``: extra environment variables (``TAUGATE_*`` settings)."""
    return subprocess.Popen([sys.executable, "-m", "taugate.cli", "serve", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory (``VmRSS``) or its peak (``VmHWM``) in MiB, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise LookupError(f"{field} not in /proc/{pid}/status")


async def startup_lines(proc: subprocess.Popen) -> tuple[int, Path]:
    """Read the two start-up lines: the port served and the CA certificate path."""
    lines = []
    for _ in range(2):
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout=60)
        assert line, proc.stderr.read()
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

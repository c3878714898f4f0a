"""``taugate serve`` as a child process, for end-to-end tests."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def serve(*args: str) -> subprocess.Popen:
    """Start ``python -m taugate.cli serve ARGS`` with piped output (kill it when done)."""
    return subprocess.Popen([sys.executable, "-m", "taugate.cli", "serve", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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

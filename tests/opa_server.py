"""A real OPA server for tests: ``opa run --server`` on a free loopback port.

The ``opa`` binary is built from the Go module pinned in ``tests/e2e/gomod/opa/go.mod`` by
``tests/e2e/build.sh`` (cached under ``~/.cache/taugate-e2e``; a cold build takes about five
minutes on 2 cores), the way the end-to-end tier builds every component. No binary is an error
(``ControlPlaneError`` with the build's output), never a skip.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.e2e.controlplane import LOOPBACK, _die_with_parent, build, free_port


def opa_binary() -> Path:
    """The ``opa`` binary (built or found in the cache); raises ``ControlPlaneError``."""
    path = build("opa")["opa"] / "opa"
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"tests/e2e/build.sh reported {path.parent} but it holds no executable opa")
    return path


class OpaServer:
    """``opa run --server`` on ``url`` (``http://127.0.0.1:PORT``), logging to ``log``.

    ``start()`` waits for ``GET /health``; ``restart()`` (same port, every pushed policy lost),
    ``pause()``/``resume()`` (SIGSTOP/SIGCONT: connections are accepted by the kernel and never
    answered, a late server), ``stop()``; ``policies()`` reads back what was pushed."""

    def __init__(self, binary: Path, workdir: Path):
        self.binary, self.workdir = binary, workdir
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.log = workdir / f"opa-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30.0) -> OpaServer:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(self.binary), "run", "--server", f"--addr={LOOPBACK}:{self.port}", "--disable-telemetry",
                 "--log-level=error"], stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
                preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"opa exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"opa did not answer /health within {timeout_s:g} s:\n{self.log.read_text()[-3000:]}")

    def policies(self) -> dict[str, str]:
        """Policy id -> Rego source, as the server holds them (``GET /v1/policies``)."""
        with urllib.request.urlopen(self.url + "/v1/policies", timeout=5) as r:
            answer = json.load(r)
        return {p["id"]: p["raw"] for p in answer.get("result", [])}

    def pause(self) -> None:
        """Stop the server (SIGSTOP) and return once every one of its threads is stopped: the
        signal is delivered asynchronously, and on a loaded machine a thread still running could
        answer one more request."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()]
            except FileNotFoundError:  # a thread ended while we looked
                continue
            if all(state in ("T", "t") for state in states):
                return
            time.sleep(0.01)
        raise AssertionError(f"OPA (pid {self.proc.pid}) did not stop within 10 s of SIGSTOP")

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

"""Where the admission server reads cluster state (``StateProvider``, ``SnapshotStateProvider``)
and its TLS (``TLSSource``)."""

from __future__ import annotations

import logging
import os
import ssl
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from taugate.settings import Settings
from taugate.snapshot import ClusterState, SnapshotError, load_snapshot

log = logging.getLogger("taugate.webhook")

@runtime_checkable
class StateProvider(Protocol):
    """Where the server reads cluster state. ``state`` is the current immutable
    ``ClusterState`` (None before the first load); ``ready`` is True once it is usable;
    ``age_seconds()`` is how old it is (seconds since the last successful load or watch event).
    Optional: ``async start()`` / ``async stop()`` (run with the server) and ``check()``
    (called from a worker thread every second, e.g. to reload a changed file)."""

    @property
    def state(self) -> ClusterState | None: ...

    @property
    def ready(self) -> bool: ...

    def age_seconds(self) -> float: ...


class TLSSource(Protocol):
    """The server's TLS: a live ``context`` and ``check()`` that reloads the certificate into
    that same context when its files change (called on the event loop thread every second and
    on SIGHUP; True when a new certificate is served). ``certs.serving.ServingTLS`` is one."""

    context: ssl.SSLContext

    def check(self) -> bool: ...


class SnapshotStateProvider:
    """Cluster state from a snapshot file (``taugate serve --cluster FILE``).

    Loads at construction (``SnapshotError`` with a one-line reason on bad input); ``check()``
    reloads when the file's stat changes, and a broken new file keeps the previous state (logged).
    ``age_seconds()`` counts from the last successful load."""

    def __init__(self, path: str | Path, settings: Settings):
        self.path = Path(path)
        self.settings = settings
        self._stat = self._stat_now()
        self._state = load_snapshot(self.path, settings)
        self._loaded = time.monotonic()
        self.generation = 0

    def _stat_now(self):
        try:
            s = os.stat(self.path)
        except OSError:
            return None
        return (s.st_ino, s.st_size, s.st_mtime_ns)

    @property
    def state(self) -> ClusterState:
        return self._state

    @property
    def ready(self) -> bool:
        return True

    def age_seconds(self) -> float:
        return time.monotonic() - self._loaded

    def check(self) -> bool:
        """Reload the file when it changed; True when a new state is in use."""
        stat = self._stat_now()
        if stat is None or stat == self._stat:
            return False
        self._stat = stat
        try:
            new = load_snapshot(self.path, self.settings)
        except SnapshotError as e:
            log.warning("keeping the previous cluster state: %s", e)
            return False
        self._state, self._loaded = new, time.monotonic()
        self.generation += 1
        log.info("cluster state reloaded from %s", self.path)
        return True

"""``Memo``: the one bounded memo admission's pure functions remember results in.

Used for what depends only on JSON already seen (a spec's structure problems, a pod spec's GPU
demand, a template's policy input) and, per cluster state (``ClusterState.memo``), for what depends
only on the state and a few facts of an object (the policy input's context part, a resolution).
"""

from __future__ import annotations

import weakref
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(dict[K, V]):
    """A dict of remembered results holding at most ``size`` entries: full, it starts again
    (cleared, not least-recently-used: the entries are cheap to rebuild and the same few come back
    at once). Reads and ``put`` are single dict operations, safe from any thread under the GIL.
    A key built on an object's identity must keep that object alive in its value, so the identity
    is never reused while the entry exists."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size
        _every[id(self)] = self

    def put(self, key: K, value: V) -> V:
        """Remember ``value`` under ``key`` and return it."""
        if len(self) >= self.size:
            self.clear()
        self[key] = value
        return value


_every: weakref.WeakValueDictionary[int, Memo[Any, Any]] = weakref.WeakValueDictionary()
"""Every memo alive, by identity (a dict is not hashable, so not a WeakSet)."""


def forget_everything() -> None:
    """Empty every memo there is: what counts as a GPU changed (``taugate.devices.configure``)."""
    for memo in list(_every.values()):
        memo.clear()

"""The mutating webhook's JSONPatch (RFC 6902), recorded as the mutation edits its copy.

``Edits`` wraps the deep copy that ``webhook.mutation`` edits. Every change goes through one of
its four methods (``container``, ``set``, ``set_default``, ``append``), which changes the copy and
records where; ``patch()`` then turns the record into operations whose values are read from the
finished copy. Pointers are built by the ``jsonpointer`` library (``JsonPointer.from_parts``:
``~`` and ``/`` in label keys escaped as RFC 6901 says), never by string formatting.

Why not ``jsonpatch.make_patch(original, edited)``: diffing two whole objects cost ~170 us of the
~370 us a RayJob CREATE took (bench/, issue 4), while the mutation already knows each place it
changed. The library stays the oracle: the tests apply every patch with ``jsonpatch`` and compare
the result with the edited copy, on every sample and on randomly generated objects.

Rules that keep the record exact for any sequence of edits:
- a key set where it was missing (or a container put where there was none) is ``add``, a
  different value over an existing key is ``replace``; setting an equal value records nothing;
- an item appended to a list is ``add`` at its index, in order;
- every operation carries the final value at its path, read when ``patch()`` is called, so an
  edit inside a path already recorded is not recorded again, and a new operation drops the
  earlier ones inside its own path (the container created for labels is one ``add`` with every
  label in it).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jsonpointer

Parts = tuple[str | int, ...]


@lru_cache(maxsize=8192)
def pointer(parts: Parts) -> str:
    """The RFC 6901 JSON pointer of ``parts`` (``("metadata", "labels", "a/b")`` ->
    ``/metadata/labels/a~1b``), built by ``jsonpointer``; the same few paths recur on every
    request, so they are remembered."""
    return jsonpointer.JsonPointer.from_parts(parts).path


class Edits:
    """A deep copy of an object (``doc``) under edit, with the JSONPatch of its changes.

    ``doc`` must be a copy the caller owns (``webhook.mutation.deep_copy``). Paths are tuples of
    keys and list indexes from the root, e.g. ``("spec", "template", "spec")``; the holder
    passed with a path must be the container at that path in ``doc``.
    """

    __slots__ = ("doc", "_ops")

    def __init__(self, doc: dict):
        self.doc = doc
        self._ops: list[tuple[str, Parts]] = []  # (op, parts) in the order made

    @property
    def changed(self) -> bool:
        """True once anything was changed."""
        return bool(self._ops)

    def _record(self, op: str, parts: Parts) -> None:
        # An operation's value is read whole from the finished copy, so an edit inside a path
        # already recorded is in it, and a new operation supersedes those inside its own path.
        n = len(parts)
        kept = []
        for entry in self._ops:
            done = entry[1]
            if len(done) < n and parts[:len(done)] == done:
                return
            if not (len(done) > n and done[:n] == parts):
                kept.append(entry)
        kept.append((op, parts))
        self._ops = kept

    def container(self, holder: dict, path: Parts, key: str, kind: type[dict] | type[list]) -> Any:
        """``holder[key]`` when it is a ``kind`` (dict or list); else a new empty one put there
        (a missing or null value is replaced: mutation runs only on well-formed objects)."""
        value = holder.get(key)
        if isinstance(value, kind):
            return value
        value = holder[key] = kind()
        self._record("add", path + (key,))
        return value

    def set(self, holder: dict, path: Parts, key: str, value: Any) -> None:
        """``holder[key] = value``, recorded unless it already held an equal value of the same
        JSON type (``True`` is not ``1``)."""
        if key in holder:
            old = holder[key]
            if type(old) is type(value) and old == value:
                return
            holder[key] = value
            self._record("replace", path + (key,))
        else:
            holder[key] = value
            self._record("add", path + (key,))

    def set_default(self, holder: dict, path: Parts, key: str, value: Any) -> None:
        """``holder.setdefault(key, value)``, recorded when the key was missing."""
        if key not in holder:
            holder[key] = value
            self._record("add", path + (key,))

    def append(self, items: list, path: Parts, value: Any) -> None:
        """``items.append(value)`` where ``items`` is the list at ``path``."""
        items.append(value)
        self._record("add", path + (len(items) - 1,))

    def patch(self) -> list[dict] | None:
        """The RFC 6902 operations, in order, that turn the original into ``doc``; None when
        nothing changed. Values are the finished ones in ``doc`` (shared, not copied)."""
        if not self._ops:
            return None
        doc = self.doc
        out = []
        for op, parts in self._ops:
            value = doc
            for part in parts:
                value = value[part]
            out.append({"op": op, "path": pointer(parts), "value": value})
        return out

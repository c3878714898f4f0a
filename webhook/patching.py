"""The mutating webhook's JSONPatch (RFC 6902), recorded as the mutation edits the object.

Not ``jsonpatch.make_patch(original, edited)``: diffing two whole objects cost ~170 us of the
~370 us a RayJob CREATE took (bench/, issue 4), while mutation knows each place it changed; the
tests keep ``jsonpatch`` as the oracle. Every operation carries the final value at its path, read
when ``patch()`` is called, so edits inside a container an operation already carries record
nothing, and replacing a container drops the operations recorded inside it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jsonpointer
import orjson

Parts = tuple[str | int, ...]


@lru_cache(maxsize=8192)
def pointer(parts: Parts) -> str:
    """Built by ``jsonpointer`` (``~`` and ``/`` in label keys escaped per RFC 6901), never by
    string formatting; remembered, since the same few paths recur on every request."""
    return jsonpointer.JsonPointer.from_parts(parts).path


def _same(a: Any, b: Any) -> bool:
    """Same type and ``==``, and for containers the same canonical JSON too (``==`` holds
    ``True == 1`` deep inside)."""
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, (dict, list)):
        return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
    return True


class Edits:
    """An object (``doc``) under edit, with the JSONPatch of its changes.

    ``doc`` must be an object the caller owns. The holder passed with a path must be the container
    at that path in ``doc``. A value passed to ``set``, ``set_default`` or ``append`` must be a new
    object, not a container already in ``doc`` (later edits through its old path would not be
    recorded).
    """

    __slots__ = ("doc", "_ops", "_inside")

    def __init__(self, doc: dict):
        self.doc = doc
        # (op, parts, holder, key): the value is ``holder[key]`` when the patch is built
        self._ops: list[tuple[str, Parts, Any, str | int]] = []
        # containers inside a value an operation carries (by id, kept alive so an id is never reused)
        self._inside: dict[int, Any] = {}

    @property
    def changed(self) -> bool:
        return bool(self._ops)

    @property
    def paths(self) -> list[Parts]:
        return [parts for _, parts, _, _ in self._ops]

    def _carried(self, value: Any) -> None:
        if isinstance(value, dict):
            self._inside[id(value)] = value
            for v in value.values():
                self._carried(v)
        elif isinstance(value, list):
            self._inside[id(value)] = value
            for v in value:
                self._carried(v)

    def _record(self, op: str, parts: Parts, holder: Any, key: str | int, old: Any) -> None:
        if isinstance(old, (dict, list)):  # a container is replaced: drop the operations inside it
            n = len(parts)
            self._ops = [e for e in self._ops if not (len(e[1]) > n and e[1][:n] == parts)]
        self._ops.append((op, parts, holder, key))

    def container(self, holder: dict, path: Parts, key: str, kind: type[dict] | type[list]) -> Any:
        """``holder[key]`` when it is a ``kind``; else a new empty one put there (a missing or null
        value is replaced: mutation runs only on well-formed objects)."""
        old = holder.get(key)
        if isinstance(old, kind):
            return old
        value = holder[key] = kind()
        if id(holder) not in self._inside:
            self._record("add", path + (key,), holder, key, old)
        self._inside[id(value)] = value
        return value

    def set(self, holder: dict, path: Parts, key: str, value: Any) -> None:
        """Recorded unless it already held the same JSON value (``True`` is not ``1``)."""
        present = key in holder
        old = holder.get(key)
        if present and _same(old, value):
            return
        holder[key] = value
        if id(holder) not in self._inside:
            self._record("replace" if present else "add", path + (key,), holder, key, old)
        if isinstance(value, (dict, list)):
            self._carried(value)

    def set_default(self, holder: dict, path: Parts, key: str, value: Any) -> None:
        if key not in holder:
            holder[key] = value
            if id(holder) not in self._inside:
                self._ops.append(("add", path + (key,), holder, key))
            if isinstance(value, (dict, list)):
                self._carried(value)

    def append(self, items: list, path: Parts, value: Any) -> None:
        items.append(value)
        if id(items) not in self._inside:
            index = len(items) - 1
            self._ops.append(("add", path + (index,), items, index))
        if isinstance(value, (dict, list)):
            self._carried(value)

    def insert(self, items: list, path: Parts, index: int, value: Any) -> None:
        """A JSONPatch ``add`` at ``index``. Operations are read by index when the patch is built, so
        make it before any other edit inside ``items``."""
        items.insert(index, value)
        if id(items) not in self._inside:
            self._ops.append(("add", path + (index,), items, index))
        if isinstance(value, (dict, list)):
            self._carried(value)

    def patch(self) -> list[dict] | None:
        """None when nothing changed. Values are the finished ones in ``doc`` (shared, not copied)."""
        if not self._ops:
            return None
        return [{"op": op, "path": pointer(parts), "value": holder[key]} for op, parts, holder, key in self._ops]

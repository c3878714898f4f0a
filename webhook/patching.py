"""The mutating webhook's JSONPatch: ``jsonpatch``'s diff, fed only the parts that differ.

``jsonpatch.JsonPatch.from_diff`` walks every value of both documents (abc ``isinstance``
checks per node), so on a RayJob most of its time went to subtrees the mutation never touched.
``make_patch`` first drops, on both sides, dict entries whose values are equal (same JSON type,
compared by CPython's C ``==``), and turns equal list elements at the same index into the same
placeholder object, which equals no real element. The pruned documents have the same paths for
everything that differs, so the library's diff of them is a correct patch for the originals: an
operation can only carry a value of the edited document that differs from the original, never a
pruned one, and its pointers are still built by the library.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jsonpatch
import jsonpointer
import orjson

_MARK = "\x00taugate-unchanged"  # no Kubernetes field has this name


def _same(a: Any, b: Any) -> bool:
    """JSON equality: Python's ``==`` (in C) first, then, for containers found equal, their
    canonical JSON, since ``==`` holds ``True == 1`` deep inside."""
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, (dict, list)):
        return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
    return True


def _prune(src: Any, dst: Any) -> tuple[Any, Any]:
    if isinstance(src, dict) and isinstance(dst, dict):
        s2, d2 = {}, {}
        for k, v in src.items():
            if k in dst and _same(v, dst[k]):
                continue
            if k in dst:
                s2[k], d2[k] = _prune(v, dst[k])
            else:
                s2[k] = v
        for k, v in dst.items():
            if k not in src:
                d2[k] = v
        return s2, d2
    if isinstance(src, list) and isinstance(dst, list):
        s2, d2 = list(src), list(dst)
        for i in range(min(len(src), len(dst))):
            if _same(src[i], dst[i]):
                s2[i] = d2[i] = {_MARK: i}  # equal on both sides, unequal to any real element
            else:
                s2[i], d2[i] = _prune(src[i], dst[i])
        return s2, d2
    return src, dst


@lru_cache(maxsize=4096)
def _parts(pointer: str) -> tuple[str, ...]:
    return tuple(jsonpointer.JsonPointer(pointer).parts)


class _CachedPointer(jsonpointer.JsonPointer):
    """``jsonpointer.JsonPointer`` whose parsing (escapes checked, ``~0``/``~1`` undone) is
    remembered: the diff builds two pointers per operation, and the same few paths recur on
    every request. Passed to jsonpatch through its public ``pointer_cls``; same ``parts``."""

    def __init__(self, pointer: str):
        self.parts = list(_parts(pointer))


def make_patch(src: dict, dst: dict) -> list[dict]:
    """The RFC 6902 JSONPatch (list of operations) that turns ``src`` into ``dst``; empty when
    they are equal. Both must be JSON documents (dicts, lists, strings, numbers, bools, None)."""
    if _same(src, dst):
        return []
    s, d = _prune(src, dst)
    # optimization=False skips the library's pass that folds remove+add pairs into move/replace:
    # a mutation adds and replaces, so it has none to fold, and the pass cost ~45% of the diff.
    return jsonpatch.JsonPatch.from_diff(s, d, optimization=False, dumps=orjson.dumps,
                                         pointer_cls=_CachedPointer).patch

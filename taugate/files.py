"""The one atomic write every part uses and the one bounded read every file goes through
(``read_limited``): a file over its limit (or endless, ``/dev/zero``) is refused in one line naming
it and the limit (``InputError``; the commands exit 2), never read into memory."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml


def write_atomic(path: str | Path, data: bytes, mode: int = 0o644, *, make_parents: bool = False) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old or the new content, never a
    mix, and the new content survives a crash once this returns (temp file + fsync + rename +
    directory fsync). ``mode`` is applied before the rename (0600 for keys). On error the
    temporary file is removed and ``path`` is unchanged. ``make_parents`` creates the directory
    first. Raises ``OSError`` (and ``TypeError`` for data that is not bytes)."""
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# --- reading manifests and snapshots -----------------------------------------------------------

MAX_INPUT_BYTES = 128 * 1024 * 1024
"""Largest manifest or snapshot file read (a 5,000-node snapshot is ~50 MB); a larger input (or
``/dev/zero``) is refused after reading this many bytes, never read whole."""

MAX_EVIDENCE_BYTES = 64 * 1024 * 1024
"""Largest ``events.jsonl`` or ``evidence.json`` of one run read (an event is ~0.5 KB and a run
records tens of them: 64 MiB is over 100,000 events); verifying folds every event in memory,
so the bound is what keeps ``taugate evidence verify`` from a MemoryError."""

MAX_POLICY_FILE_BYTES = 8 * 1024 * 1024
"""Largest Rego module or ``enforcement.yaml`` read (the bundled library's largest is ~10 KB)."""

MAX_KEY_FILE_BYTES = 1024 * 1024
"""Largest PEM file (a key, a certificate chain or a CA bundle) read; a chain of 100 certificates
is ~200 KB."""

MAX_KUBECONFIG_BYTES = 16 * 1024 * 1024
"""Largest kubeconfig file accepted (the Kubernetes client library reads it whole; one with a few
embedded certificates is ~10 KB)."""

MAX_WORKLOAD_FILE_BYTES = 16 * 1024 * 1024
"""Largest piece of a workload's own output the operator reads at once: the artifact index, and
each read of the metrics JSONL (which goes on from where it stopped on the next read)."""

MAX_ALIAS_VALUES = 1_000_000
"""Values YAML aliases may add to a file once expanded (a billion-laughs document adds ~10^9)."""

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
"""Files read from a directory, as ``kubectl apply -f DIR`` reads them."""


class InputError(ValueError):
    """An input that cannot be read; the message is one line naming the input and the problem."""


def _size(limit: int) -> str:
    return f"{limit // 1048576} MiB" if limit % 1048576 == 0 else f"{limit:,} bytes"


def read_limited(path: str | os.PathLike[str], limit: int = MAX_INPUT_BYTES,
                 what: str = "manifests and snapshots") -> bytes:
    """The bytes of ``path`` (``-``: standard input), at most ``limit``; ``what`` names the kind
    of file in the error. Raises ``InputError`` for a missing or unreadable file, a directory, or
    an input larger than ``limit`` (a regular file by its size, before anything is read; a
    stream after ``limit`` bytes)."""
    name = "standard input" if str(path) == "-" else str(path)
    too_large = InputError(f"{name}: larger than {_size(limit)}; taugate reads {what} up to that size")
    try:
        if str(path) == "-":
            import sys

            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                    raise too_large
                data = f.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{name}: is a directory, not a file") from None
    except OSError as e:
        raise InputError(f"{name}: cannot read: {e.strerror or type(e).__name__}") from None
    if len(data) > limit:
        raise too_large
    return data


def read_text_limited(path: str | os.PathLike[str], limit: int, what: str) -> str:
    """``read_limited`` as UTF-8 text; ``InputError`` also for bytes that are not UTF-8."""
    data = read_limited(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start})") from None


def expand_paths(paths: list[str]) -> list[str]:
    """``-f`` arguments as files: a directory becomes its ``*.yaml``, ``*.yml`` and ``*.json``
    files, recursively, sorted (``kubectl apply -R -f DIR``); ``-`` (standard input) and files
    are kept. Raises ``InputError`` for a missing path or a directory without manifests."""
    out: list[str] = []
    for p in paths:
        if p == "-" or not os.path.isdir(p):
            if p != "-" and not os.path.exists(p):
                raise InputError(f"{p}: no such file or directory")
            out.append(p)
            continue
        found = sorted(str(f) for f in Path(p).rglob("*") if f.suffix in MANIFEST_SUFFIXES and f.is_file())
        if not found:
            raise InputError(f"{p}: a directory with no {', '.join('*' + s for s in MANIFEST_SUFFIXES)} file")
        out.extend(found)
    return out


def _loader_base() -> type[yaml.SafeLoader]:
    import yaml

    base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser: ~10x faster
    return base


def _strict_loader() -> type[yaml.SafeLoader]:
    """A YAML safe loader that refuses duplicate mapping keys, naming both lines (kubectl's
    sigs.k8s.io/yaml rejects them: ``mapping key "x" already defined``). Merge keys (``<<``)
    may still be overridden, as YAML 1.1 specifies."""
    import yaml

    class StrictLoader(_loader_base()):  # type: ignore[misc]  # a base chosen at run time (libyaml or not)
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node)
                    line = key_node.start_mark.line + 1
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r} (also at line {seen[key]}); kubectl rejects "
                                        f"duplicate keys", key_node.start_mark)
                    seen[key] = line
            mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
            return mapping

    return StrictLoader


_LOADER: type[yaml.SafeLoader] | None = None


class _TooManyAliasValues(Exception):
    pass


def _alias_values(doc: Any, limit: int) -> int:
    """How many values YAML aliases add to ``doc`` (a mapping or sequence shared by aliases
    counts once more, whole, at every further appearance). Raises ``_TooManyAliasValues``
    past ``limit`` and ``RecursionError`` for a document that contains itself."""
    memo: dict[int, int] = {}
    active: set[int] = set()
    extra = 0

    def size(v: Any) -> int:
        nonlocal extra
        if not isinstance(v, (dict, list)):
            return 1
        key = id(v)
        if key in memo:
            extra += memo[key]
            if extra > limit:
                raise _TooManyAliasValues
            return memo[key]
        if key in active:
            raise RecursionError("a YAML alias refers to a mapping or sequence that contains it")
        active.add(key)
        n = 1 + sum(size(item) for item in (v.values() if isinstance(v, dict) else v))
        active.discard(key)
        memo[key] = n
        return n

    size(doc)
    return extra


def load_documents(data: bytes, name: str) -> list[Any]:
    """The documents of a YAML or JSON input (``name`` is used in errors). JSON (``{`` or ``[``
    first) is read with orjson; YAML with a safe loader that refuses duplicate keys, and whose
    aliases may add at most ``MAX_ALIAS_VALUES`` values (billion laughs) and never make a
    document contain itself. Raises ``InputError`` with the line of a YAML problem."""
    import orjson
    import yaml

    global _LOADER
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{name}: not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise InputError(f"{name}: the file is empty")
    if "\x00" in text:
        raise InputError(f"{name}: contains NUL bytes; not a YAML or JSON file")
    if text.lstrip()[:1] in ("{", "["):
        try:  # JSON (a List or an array of objects): orjson, ~50x faster than YAML at 5,000 nodes
            data_ = orjson.loads(text)
            return data_ if isinstance(data_, list) else [data_]
        except orjson.JSONDecodeError:
            pass  # flow-style YAML (or JSON with duplicate keys etc.): parsed below
    if _LOADER is None:
        _LOADER = _strict_loader()
    try:
        docs = list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        reason = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{name}: invalid YAML{where}: {reason}") from None
    except RecursionError:
        raise InputError(f"{name}: YAML nested too deeply") from None
    if "*" in text:  # aliases are only possible where a '*' is
        for i, doc in enumerate(docs):
            try:
                _alias_values(doc, MAX_ALIAS_VALUES)
            except RecursionError as e:
                raise InputError(f"{name}: document {i + 1}: {e}") from None
            except _TooManyAliasValues:
                raise InputError(f"{name}: document {i + 1}: YAML aliases add more than {MAX_ALIAS_VALUES:,} "
                                 f"values (a \"billion laughs\" document); refused") from None
    return docs

"""Files that are never half-written: the one atomic write every part uses (certificates,
evidence records, exported snapshots)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)

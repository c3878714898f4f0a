"""Field paths: one type (``Path``, a tuple of keys and indexes) and one rendering (``field_path``)
in the form Kubernetes uses in its own validation errors (apimachinery ``field.Path``):
``spec.workerGroupSpecs[0].template``, ``metadata.labels["kueue.x-k8s.io/queue-name"]``.

Every ``Violation.field`` taugate writes is ``field_path`` of a ``Path``; a pydantic error's ``loc``
becomes a ``Path`` through ``loc_path``.
"""

from __future__ import annotations

from functools import lru_cache

Path = tuple[str | int, ...]
"""Where a value is in an object: ``("spec", "workerGroupSpecs", 0, "template")``."""


@lru_cache(maxsize=4096)
def field_path(path: Path) -> str:
    """Render a path (a tuple) as Kubernetes field paths read: ``spec.workerGroupSpecs[0].template``.
    The same few paths recur on every review, so they are remembered."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "/" in part or "." in part:
            out += f"[{part!r}]".replace("'", '"')
        else:
            out += f".{part}" if out else part
    return out


def loc_path(loc: tuple[str | int, ...]) -> Path:
    """A pydantic error's ``loc`` (its keys and indexes, aliases as the object spells them) as a
    ``Path``; the marker pydantic ends it with for a mapping key it rejects (``"[key]"``) is dropped."""
    return loc[:-1] if loc and loc[-1] == "[key]" else loc


@lru_cache(maxsize=256)
def label_field(key: str) -> str:
    """Field path of one label, e.g. ``metadata.labels["kueue.x-k8s.io/queue-name"]`` (always
    bracketed, as Kubernetes writes label keys in its errors)."""
    return f'metadata.labels["{key}"]'


@lru_cache(maxsize=256)
def annotation_field(key: str) -> str:
    """Field path of one annotation, e.g. ``metadata.annotations["kueue.x-k8s.io/job-min-parallelism"]``."""
    return f'metadata.annotations["{key}"]'

"""``taugate snapshot export``: the live cluster state as the snapshot file ``--cluster`` reads,
server bookkeeping dropped and Nodes trimmed, checked with ``taugate.snapshot.build_state`` before
anything is written.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import yaml

from taugate.access import metadata_of
from taugate.controllers import resources as R
from taugate.files import write_atomic
from taugate.kubeaccess import KubeError
from taugate.settings import Settings
from taugate.snapshot import build_state
from taugate.state_objects import DRA_RESOURCES, RESOURCE_CLAIMS, trim, usable_objects

_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "ownerReferences",
                  "managedFields", "selfLink", "deletionGracePeriodSeconds")


def clean(obj: dict, res: R.Resource) -> dict:
    """One object as a snapshot document: server-set metadata removed (pure)."""
    obj = trim(res, obj)
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_FIELDS}
    ann = {k: v for k, v in (meta.get("annotations") or {}).items()
           if not k.startswith("kopf.zalando.org/") and k != "kubectl.kubernetes.io/last-applied-configuration"}
    if ann:
        meta["annotations"] = ann
    else:
        meta.pop("annotations", None)
    out = {"apiVersion": obj.get("apiVersion") or res.api_version, "kind": obj.get("kind") or res.kind,
           "metadata": meta}
    out.update({k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")})
    return out


def collect(kube: Any) -> list[dict]:
    """Every object of the snapshot kinds, cleaned, in snapshot order (reads the API once)."""
    out: list[dict] = []
    for res in R.STATE_RESOURCES:
        try:
            items = kube.list(res)
        except KubeError as e:
            if e.status == 404 and res in DRA_RESOURCES:  # resource.k8s.io/v1 not served: no DRA objects
                continue
            raise
        if res in DRA_RESOURCES:  # what admission reads of them; a pod's own claims are left out
            items = [trim(res, o) for o in items
                     if res is not RESOURCE_CLAIMS or not metadata_of(o).get("ownerReferences")]
        out.extend(clean(o, res) for o in sorted(items, key=lambda o: (R.namespace_of(o) or "", R.name_of(o))))
    return out


def render(objects: list[dict], source: str, skipped: list[str]) -> str:
    """The snapshot file text: a header comment, then one YAML document per object."""
    when = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    header = [f"# taugate cluster snapshot exported from {source} at {when} by `taugate snapshot export`.",
              "# Read it with `taugate admit -f OBJECT.yaml --cluster FILE` or `taugate serve --cluster FILE`."]
    header += [f"# left out: {line}" for line in skipped]
    body = yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False)
    return "\n".join(header) + "\n" + body


def export_snapshot(kube: Any, settings: Settings | None = None, *,
                    source: str = "the cluster") -> tuple[str, list[str]]:
    """(snapshot text, what was left out and why). Raises ``taugate.snapshot.SnapshotError`` if the
    result would not load (a bug: the objects were already filtered)."""
    settings = settings or Settings()
    kept, skipped = usable_objects(collect(kube), settings.system_namespace)
    build_state(kept, settings, source=source)  # the file must load as written
    return render(kept, source, skipped), skipped


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (``taugate.files.write_atomic``: never half a file).

    A symbolic link is followed: the file it points to is replaced, the link stays. Raises
    ``IsADirectoryError`` / ``OSError`` (errno EINVAL) when the real path exists and is not a
    regular file (a directory, FIFO or device would otherwise be renamed over), and ``OSError``
    when it cannot be written."""
    real = Path(os.path.realpath(path))
    if real.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))
    if real.exists() and not real.is_file():
        raise OSError(22, "exists and is not a regular file", str(path))
    write_atomic(real, text.encode())

"""The vocabulary of a run's conditions: condition types, time formats, the value types the
derivations exchange and small readers of API objects."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from taugate import labels
from taugate.access import as_dict, metadata_of

ADMITTED = "Admitted"
SCHEDULED = "Scheduled"
GPU_HEALTHY = "GPUHealthy"
PROGRESSING = "Progressing"
COMPLETED = "Completed"
FAILED = "Failed"
ARTIFACT_SAVED = "ArtifactSaved"
QUOTA_RELEASED = "QuotaReleased"
GPUS_RELEASED = "GPUsReleased"

STATE_ORDER: tuple[str, ...] = (ADMITTED, SCHEDULED, GPU_HEALTHY, PROGRESSING, COMPLETED, ARTIFACT_SAVED)
"""The six states in lifecycle order; the fifth slot is ``Completed`` or, for a failed run, ``Failed``."""
RELEASE_TYPES: tuple[str, ...] = (QUOTA_RELEASED, GPUS_RELEASED)
ALL_TYPES: tuple[str, ...] = STATE_ORDER + RELEASE_TYPES

RUN_ID_RE = re.compile(rf"^[0-9a-f]{{{labels.RUN_ID_LENGTH}}}$")

# Reasons a container terminated that are failures even with exit code 0 unknown; "Completed" is
# the kubelet's reason for exit code 0 (Kubernetes ContainerStateTerminated).
FAILURE_RANK = {"OOMKilled": 0, "Evicted": 1, "ContainerCannotRun": 2, "DeadlineExceeded": 3,
                 "StartError": 4, "Error": 5}



def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it (``2024-05-01T10:00:00Z``) -> aware UTC
    datetime; None when absent or unparsable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def format_time(dt: datetime) -> str:
    """An aware datetime -> RFC 3339 UTC with second precision (``metav1.Time`` format)."""
    return dt.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro(dt: datetime) -> str:
    """An aware datetime -> RFC 3339 UTC with microseconds (``metav1.MicroTime`` format)."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")



@dataclass(frozen=True)
class Finding:
    """One derived condition before it is merged with the previous ones.

    ``status`` is ``"True"``/``"False"``/``"Unknown"``; ``reason`` is CamelCase; ``source`` the
    object that proves it (``{"kind", "name", "namespace"?, "uid"?, "path"?}``); ``since`` the
    source's own transition time (RFC 3339) when it has one, else the recorder uses "now".
    """

    type: str
    status: str
    reason: str
    message: str
    source: dict | None = None
    since: str | None = None


@dataclass(frozen=True)
class ProgressState:
    """What the recorder knows about a run's training progress.

    - ``source``: ``{"kind": "File", "path": ...}`` or a Pod log.
    - ``records``: metric records (JSONL lines, or matching log lines) seen so far.
    - ``step``: the largest step seen (``None`` if the records carry none).
    - ``last_advance``: RFC 3339 time ``records`` or ``step`` last grew; ``first_advance``: of the
      first record.
    """

    source: dict
    records: int
    step: float | None
    last_advance: str
    first_advance: str

    def wire(self) -> dict:
        """As stored in ``TauRun.status.progress`` (None fields left out)."""
        out = {"source": self.source, "records": self.records, "step": self.step,
               "lastAdvanceTime": self.last_advance, "firstAdvanceTime": self.first_advance}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_wire(cls, data: Any) -> ProgressState | None:
        """Tolerant inverse of :meth:`wire`; None for anything malformed."""
        if not isinstance(data, Mapping):
            return None
        try:
            step = data.get("step")
            return cls(source=dict(data.get("source") or {}), records=int(data.get("records") or 0),
                       step=float(step) if step is not None else None,
                       last_advance=str(data["lastAdvanceTime"]), first_advance=str(data["firstAdvanceTime"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class ProgressSample:
    """One reading of the run's metrics: ``records`` count and largest ``step`` (or None)."""

    source: dict
    records: int
    step: float | None


@dataclass(frozen=True)
class ArtifactListing:
    """What the artifact probe found under the run's output path (``root``); ``index`` the parsed
    artifact index or None; ``files`` ``{"path": relative, "size": bytes, "sha256": hex}``."""

    root: str
    index: dict | None = None
    files: tuple[dict, ...] = ()


@dataclass
class RunView:
    """Everything observed about one run at one moment.

    - ``owner``: the run's root object (None once deleted).
    - ``workloads``: the owner's Kueue Workloads (``kueue.x-k8s.io/job-uid`` label or owner reference).
    - ``pods``: live pods carrying the run-id label; ``nodes``: Node objects by name.
    - ``failures``: termination records captured so far (:func:`pod_terminations`).
    - ``owner_deleted``: the owner was seen before and is gone now (deleted before it finished:
      the run ends as ``Failed``/``Deleted``; ``Completed``/``Deleted`` when ``serving``).
    - ``serving``: the root's kind never ends on its own (``run.outcome.SERVING_KINDS``).
    """

    run_id: str
    namespace: str
    owner: dict | None = None
    workloads: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    nodes: dict[str, dict] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    progress: ProgressState | None = None
    artifacts: ArtifactListing | None = None
    log_pattern: str | None = None
    metrics_path: str | None = None
    owner_deleted: bool = False
    serving: bool = False


@dataclass(frozen=True)
class DeriveOptions:
    """- ``gpu_health_conditions``: NPD condition types that mark a GPU node unhealthy when True.
    - ``stall_after``: seconds without progress before ``Progressing=False/Stalled``.
    """

    gpu_health_conditions: tuple[str, ...]
    stall_after: float = 600.0



def object_ref(obj: Mapping) -> dict:
    """``{"apiVersion", "kind", "name", "namespace", "uid"}`` (missing keys left out)."""
    meta = metadata_of(obj)
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
           "namespace": meta.get("namespace"), "uid": meta.get("uid")}
    return {k: v for k, v in ref.items() if v}


def source_of(obj: Mapping, kind: str | None = None) -> dict:
    """The ``source`` of a condition: kind, name, namespace (no apiVersion/uid)."""
    meta = metadata_of(obj)
    src = {"kind": kind or obj.get("kind"), "name": meta.get("name"), "namespace": meta.get("namespace")}
    return {k: v for k, v in src.items() if v}


def pod_phase(pod: Mapping) -> str:
    return str(as_dict(pod.get("status")).get("phase") or "Pending")


def node_name(pod: Mapping) -> str | None:
    name = as_dict(pod.get("spec")).get("nodeName")
    return name if isinstance(name, str) and name else None


def pod_name(pod: Mapping) -> str:
    return str(metadata_of(pod).get("name") or "?")


def terminal_pod(pod: Mapping) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def by_type(conditions: Iterable[Mapping]) -> dict[str, dict]:
    return {str(c.get("type")): dict(c) for c in conditions if isinstance(c, Mapping) and c.get("type")}

"""Pydantic model of TauRun (group ``tau.azure.com``, version ``v1alpha1``): taugate's own kind,
one per run-id, written only by the recorder (``taugate.controllers.recorder.watch``). The other kinds,
and the base ``TauModel``, are in ``taugate.models``.

Raises ``pydantic.ValidationError`` on objects that break the schema (for example a run-id that is
not 24 lowercase hex characters).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from taugate.models import Condition, ObjectMeta, TauModel


class RunSource(TauModel):
    """What proves a run condition: an object (``kind``, ``name``, ``namespace``), a file or
    directory (``kind: File``/``Path`` with ``path``), or a pod's log (``container``)."""

    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    path: str | None = None
    container: str | None = None


class RunCondition(Condition):
    """A run state: a ``metav1.Condition`` plus the ``source`` object it was read from."""

    source: RunSource | None = None


class RunObjectRef(TauModel):
    """The run's own object: a KubeRay RayJob or a batch/v1 Job."""

    api_version: str
    """apiVersion of the run's workload."""
    kind: str
    """Kind of the run's workload."""
    name: str
    """Name of the run's workload."""
    namespace: str | None = None
    """Namespace of the run's workload (the TauRun's own)."""
    uid: str | None = None
    """UID of the run's workload."""


class TauRunSpec(TauModel):
    """What the run is: its run-id (24 lowercase hex, ``tau.azure.com/run-id``), object,
    workspace, LocalQueue and workload profile (as the admission record and labels say)."""

    run_id: str = Field(pattern=r"^[0-9a-f]{24}$")
    """The run-id: 24 lowercase hex characters, the tau.azure.com/run-id label of the workload and its pods."""
    object: RunObjectRef
    """The workload the run belongs to."""
    workspace: str | None = None
    """The workspace the run belongs to."""
    queue: str | None = None
    """The LocalQueue the run was queued in."""
    profile: str | None = None
    """The workload profile the run was admitted under."""
    profile_set_hash: str | None = None
    """Hash of the profile set at admission (the admission record's)."""


class RunFailure(TauModel):
    """A pod termination record kept after the pod is gone (Kubernetes ContainerStateTerminated:
    ``reason`` such as ``OOMKilled``, ``exitCode``; or a pod-level reason such as ``Evicted``)."""

    key: str | None = None
    pod: str
    pod_uid: str | None = None
    container: str | None = None
    node: str | None = None
    reason: str
    exit_code: int | None = None
    signal: int | None = None
    message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None


class RunProgress(TauModel):
    """Training progress as last read: metric ``records`` seen, largest ``step``, and the times
    (RFC 3339 with microseconds) progress first and last advanced."""

    source: RunSource | None = None
    records: int = Field(default=0, ge=0)
    step: float | None = None
    last_advance_time: str | None = None
    first_advance_time: str | None = None


class RunArtifacts(TauModel):
    """What the artifact probe found under the run's output path (``bytes`` is the total size)."""

    root: str | None = None
    index: bool = False
    files: int = Field(default=0, ge=0)
    bytes: int = Field(default=0, ge=0)


class RunEvidenceRef(TauModel):
    """Where the run's evidence record is and its signed head (SHA-256 of the last event line)."""

    path: str | None = None
    events: int = Field(default=0, ge=0)
    head: str | None = None
    key_id: str | None = None
    final: bool = False


class TauRunStatus(TauModel):
    """The six run states (``conditions``, lifecycle order, then ``QuotaReleased`` and
    ``GPUsReleased``), the ``stage`` a run that is not done is in, and what backs them."""

    phase: Literal["Queued", "Scheduling", "Running", "Succeeded", "Failed"] | None = None
    stage: str | None = None
    reason: str | None = None
    message: str | None = None
    conditions: list[RunCondition] = Field(default_factory=list)
    workload: str | None = None
    nodes: list[str] = Field(default_factory=list)
    failures: list[RunFailure] = Field(default_factory=list)
    progress: RunProgress | None = None
    artifacts: RunArtifacts | None = None
    evidence: RunEvidenceRef | None = None


class TauRun(TauModel):
    """One run of a workspace (namespaced, named by run-id); written only by the recorder."""

    api_version: str = "tau.azure.com/v1alpha1"
    kind: Literal["TauRun"] = "TauRun"
    metadata: ObjectMeta
    spec: TauRunSpec
    """What the run is: run-id, workload, workspace, queue and profile."""
    status: TauRunStatus | None = None
    """Where the run stands and the evidence behind it."""

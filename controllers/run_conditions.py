"""Pure derivation of a run's six states (and its two release lines) from plain observed objects.

Everything here is a function over dicts as the API server returns them (Kueue ``Workload``,
KubeRay ``RayJob``, ``batch/v1`` ``Job``, core ``Pod`` and ``Node``) plus what the probes read
from the run's data path; no I/O, no clock (``now`` is an argument). The recorder
(``controllers/recorder.py``) gathers the objects and writes the result.

The six states, in the order a run goes through them (``STATE_ORDER``):

1. ``Admitted``: the Kueue Workload holds a quota reservation and is admitted (Kueue conditions
   ``QuotaReserved`` / ``Admitted`` / ``Evicted`` / ``Preempted``).
2. ``Scheduled``: every pod of the run is bound to a node (``spec.nodeName``; the pod's
   ``PodScheduled`` condition says why not).
3. ``GPUHealthy``: no node the run's pods run on has a Node Problem Detector GPU condition that is
   ``True`` (``Settings.gpu_health_conditions``), and every such node is ``Ready``.
4. ``Progressing``: training metrics advance (metrics JSONL or log lines); ``False`` with reason
   ``Stalled`` after a quiet period.
5. ``Completed`` or ``Failed`` (one slot): KubeRay ``jobDeploymentStatus``/``jobStatus`` or the
   Job's ``Complete``/``Failed`` conditions; the failure reason comes from pod termination
   records (e.g. ``OOMKilled``), captured while the pods still exist.
6. ``ArtifactSaved``: an artifact index or files under the run's output path.

Then the two release lines (``RELEASE_TYPES``): ``QuotaReleased`` (the Workload is ``Finished``
or gone) and ``GPUsReleased`` (no pod of the run is left running on a node).

A derivation returns ``None`` when its evidence is gone (pods deleted after the end, the
Workload garbage-collected): the previous condition then stands, so a finished run keeps its
history after Kubernetes deletes the objects that proved it.

The derivations live in modules of one job each (``run_values``, ``run_admitted``,
``run_scheduled``, ``run_gpu_health``, ``run_progress``, ``run_completion``, ``run_merge``,
``run_diagnosis``); this module is their one import for the recorder and the CLI.
"""

from __future__ import annotations

from taugate.controllers.run_admitted import derive_admitted, expected_pod_count, workload_owner_uid
from taugate.controllers.run_completion import (
    Outcome,
    derive_artifact_saved,
    derive_gpus_released,
    derive_outcome,
    derive_quota_released,
    describe_failure,
    owner_outcome,
    pod_terminations,
    root_failure,
)
from taugate.controllers.run_diagnosis import Diagnosis, diagnose, phase
from taugate.controllers.run_gpu_health import derive_gpu_healthy, run_nodes
from taugate.controllers.run_merge import condition_reason, derive, derive_findings, merge_conditions
from taugate.controllers.run_progress import (
    advance_progress,
    derive_progressing,
    parse_log_progress,
    parse_metrics_jsonl,
)
from taugate.controllers.run_scheduled import derive_scheduled
from taugate.controllers.run_values import (
    ADMITTED,
    ALL_TYPES,
    ARTIFACT_SAVED,
    COMPLETED,
    FAILED,
    GPU_HEALTHY,
    GPUS_RELEASED,
    PROGRESSING,
    QUOTA_RELEASED,
    RELEASE_TYPES,
    RUN_ID_RE,
    SCHEDULED,
    STATE_ORDER,
    ArtifactListing,
    DeriveOptions,
    Finding,
    ProgressSample,
    ProgressState,
    RunView,
    format_micro,
    format_time,
    object_ref,
    parse_time,
    source_of,
)

__all__ = [
    "ADMITTED",
    "ALL_TYPES",
    "ARTIFACT_SAVED",
    "ArtifactListing",
    "COMPLETED",
    "DeriveOptions",
    "Diagnosis",
    "FAILED",
    "Finding",
    "GPUS_RELEASED",
    "GPU_HEALTHY",
    "Outcome",
    "PROGRESSING",
    "ProgressSample",
    "ProgressState",
    "QUOTA_RELEASED",
    "RELEASE_TYPES",
    "RUN_ID_RE",
    "RunView",
    "SCHEDULED",
    "STATE_ORDER",
    "advance_progress",
    "condition_reason",
    "derive",
    "derive_admitted",
    "derive_artifact_saved",
    "derive_findings",
    "derive_gpu_healthy",
    "derive_gpus_released",
    "derive_outcome",
    "derive_progressing",
    "derive_quota_released",
    "derive_scheduled",
    "describe_failure",
    "diagnose",
    "expected_pod_count",
    "format_micro",
    "format_time",
    "merge_conditions",
    "object_ref",
    "owner_outcome",
    "parse_log_progress",
    "parse_metrics_jsonl",
    "parse_time",
    "phase",
    "pod_terminations",
    "root_failure",
    "run_nodes",
    "source_of",
    "workload_owner_uid",
]

"""Kubeflow Trainer ``trainer.kubeflow.org/v1alpha1`` TrainJob: ``spec.trainer`` sized training nodes on a runtime.

A TrainJob names a (Cluster)TrainingRuntime (``spec.runtimeRef``) whose JobSet template holds the
pod templates; the TrainJob sets the trainer's size (``spec.trainer.numNodes``, and the
``resourcesPerNode`` the trainer puts on the runtime's ``node`` container) and patches the rest
through ``spec.runtimePatches``, one entry per manager. Admission holds no runtime (the webhook
reads no cluster object per request), so taugate's rule is: **in a workspace a TrainJob states its
size**, ``spec.trainer.numNodes`` and ``spec.trainer.resourcesPerNode``; one that leaves either to
its runtime is refused on CREATE, naming both fields (``checks``). A platform engineer gets GPU
arithmetic that holds without reading cluster-scoped runtimes on every request, and the researcher
a one-line fix; the runtimes themselves are the platform team's (ClusterTrainingRuntimes are
cluster-scoped). The GPUs a runtime gives its other containers or replicated jobs (the
initializers, an MPI launcher with ``runLauncherAsNode``) are not counted: Kueue still charges
them against the queue's quota, as it reads the runtime.

Upstream rules followed here:

- GPU arithmetic: the trainer's pods are ``numNodes`` pods of the runtime's ``node`` container
  with ``resourcesPerNode`` as its resources (trainer v2.2.0 ``pkg/runtime/core/trainingruntime.go``
  ``newRuntimeInfo``: the trainer-ancestor PodSet count and ``Containers[node].Resources =
  ResourcesPerNode``; ``pkg/runtime/framework/plugins/plainml``, ``torch`` ``EnforceMLPolicy``:
  ``Count = trainJob.Spec.Trainer.NumNodes``; ``plugins/jobset/builder.go`` ``Trainer``), which is
  what Kueue reserves (kueue v0.17 ``pkg/controller/jobs/trainjob/trainjob_controller.go``
  ``PodSets``: the child JobSet the trainer would build, through the JobSet integration's
  ``PodSets``). One pod template, role ``node``. An MPI runtime with ``runLauncherAsNode`` runs
  ``max(numNodes - 1, 1)`` nodes plus the launcher (``plugins/mpi`` ``EnforceMLPolicy``): the same
  ``numNodes`` pods for 2 nodes or more.
- Queued with the ``kueue.x-k8s.io/queue-name`` label and suspended through ``spec.suspend``
  (kueue v0.17 ``trainjob_webhook.go`` ``Default``, ``trainjob_controller.go`` ``Suspend``).
- run-id and placement reach the pods through taugate's own runtime patch (``MANAGER``), put
  first in ``spec.runtimePatches`` on CREATE (``create_inserts``): the ``node`` replicated job's pod
  template gets the run-id label, the profile's node selector and tolerations, and the workspace
  data volume (trainer v2.2.0 ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` ``RuntimePatch``,
  ``PodTemplatePatch``, ``PodSpecPatch``). Kueue injects its flavor's node selector and
  tolerations the same way, in its own entry (manager ``kueue.x-k8s.io/manager``, which its
  webhook adds and ``RunWithPodSetsInfo`` fills on admission); the trainer applies the entries in
  order as strategic merge patches (``trainingruntime.go`` ``mergeRuntimePatches``), so node
  selectors merge and Kueue's entry, after taugate's, has the last word on tolerations (a pod
  spec's ``tolerations`` is replaced, not merged, by a strategic merge patch), as the flavor
  Kueue admitted the job to requires. The replicated job is named ``node`` (trainer
  ``constants.Node``: "the name of the Job and container for the trainer node"), which every
  Kubeflow runtime has; the trainer refuses a patch of a replicated job its runtime lacks
  (``plugins/jobset/jobset.go`` ``Validate``), so no other replicated job is patched: an MPI
  runtime's ``launcher`` (which gets ``resourcesPerNode`` too with ``runLauncherAsNode``) is
  placed by Kueue's flavor alone, and the initializers get the run-id through the child JobSet
  (below).
- Runtime patches change only while the TrainJob is suspended and its JobSet inactive, and
  ``spec.trainer`` never (``jobset.go`` ``checkRuntimePatchesImmutability``; the CRD's
  ``self == oldSelf`` rules), so taugate's UPDATE edits stay off them (``templates_mutable``).
- The JobSet the trainer creates (controller owner: the TrainJob) is a child: it inherits the
  run-id from the ``node`` pod template and is not queued again (Kueue's JobSet integration skips
  a JobSet whose owner it manages).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Required

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from taugate.access import as_dict
from taugate.fieldpath import Path
from taugate.kinds.base import WorkloadKind
from taugate.outcome import Outcome, by_conditions
from taugate.pods import PodTemplate, as_int
from taugate.structure import (
    Affinity,
    Int32,
    ObjectMeta,
    ResourceRequirements,
    StringMap,
    Toleration,
)
from taugate.violation import Violation

MANAGER = "tau.azure.com/taugate"
"""The ``manager`` of taugate's own entry in ``spec.runtimePatches`` (a domain-prefixed path, as
the trainer requires: ``plugins/jobset/jobset.go`` ``Validate``, ``IsDomainPrefixedPath``)."""
NODE = "node"
"""The trainer's replicated job and container name (trainer v2.2.0 ``pkg/constants`` ``Node``)."""
TRAINER = ("spec", "trainer")
"""Where the TrainJob's trainer (``numNodes``, ``resourcesPerNode``) is."""


def own_patch() -> dict[str, Any]:
    """taugate's empty runtime patch: the ``node`` replicated job's pod template with the ``node``
    container (where mutation mounts the workspace data volume), filled by mutation."""
    return {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": NODE, "template": {"spec": {"template": {"metadata": {}, "spec": {
            "containers": [{"name": NODE}]}}}}}]}}}}


def _node_template(patch: Any) -> tuple[int, dict[str, Any]] | None:
    """``(index, pod template patch)`` of the ``node`` replicated job in one runtime patch, or None."""
    rjobs = as_dict(as_dict(as_dict(as_dict(patch).get("trainingRuntimeSpec")).get("template")).get("spec")).get(
        "replicatedJobs")
    for j, rjob in enumerate(rjobs if type(rjobs) is list else ()):
        if as_dict(rjob).get("name") == NODE:
            template = as_dict(as_dict(rjob.get("template")).get("spec")).get("template")
            if type(template) is dict:
                return j, template
    return None


def _patch_path(i: int, j: int) -> Path:
    return ("spec", "runtimePatches", i, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", j, "template",
            "spec", "template")


def node_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The pod spec the trainer gives the ``node`` pods, as far as admission can know it without
    the runtime: every runtime patch's ``node`` pod template in order, as the trainer merges them
    (``mergeRuntimePatches``: node selector keys merge, the last ``affinity`` and non-empty
    ``tolerations`` win, volumes add up), and the ``node`` container with
    ``spec.trainer.resourcesPerNode`` as its resources."""
    out: dict[str, Any] = {}
    selector: dict[str, Any] = {}
    volumes: list[Any] = []
    patches = spec.get("runtimePatches")
    for patch in patches if type(patches) is list else ():
        found = _node_template(patch)
        if found is None:
            continue
        pod = as_dict(found[1].get("spec"))
        selector.update(as_dict(pod.get("nodeSelector")))
        for key in ("affinity", "tolerations", "priorityClassName"):
            if pod.get(key):
                out[key] = pod[key]
        if type(pod.get("volumes")) is list:
            volumes += pod["volumes"]
    if selector:
        out["nodeSelector"] = selector
    if volumes:
        out["volumes"] = volumes
    out["containers"] = [{"name": NODE, "resources": as_dict(as_dict(spec.get("trainer")).get("resourcesPerNode"))}]
    return out


def own_patch_index(spec: dict[str, Any]) -> int | None:
    """The index of taugate's entry (``MANAGER``) in ``spec.runtimePatches``, or None."""
    patches = spec.get("runtimePatches")
    for i, patch in enumerate(patches if type(patches) is list else ()):
        if as_dict(patch).get("manager") == MANAGER:
            return i
    return None


# --- spec model -------------------------------------------------------------------------------


class ContainerPatch(TypedDict, total=False):
    """trainer v2.2.0 ``ContainerPatch``: a runtime container by ``name`` and its volume mounts."""

    name: Required[str]
    volumeMounts: list[dict[str, Any]] | None


class PodSpecPatch(TypedDict, total=False):
    """trainer v2.2.0 ``PodSpecPatch``: the pod spec fields a runtime patch may set, as far as
    placement and the data volume read them."""

    nodeSelector: StringMap | None
    affinity: Affinity | None
    tolerations: list[Toleration] | None
    volumes: list[dict[str, Any]] | None
    containers: list[ContainerPatch] | None


class PodTemplatePatch(TypedDict, total=False):
    """trainer v2.2.0 ``PodTemplatePatch``: labels and annotations, and the pod spec patch."""

    metadata: ObjectMeta | None
    spec: PodSpecPatch | None


class JobSpecPatch(TypedDict, total=False):
    """trainer v2.2.0 ``JobSpecPatch``: the pod template patch."""

    template: PodTemplatePatch | None


class JobTemplatePatch(TypedDict, total=False):
    """trainer v2.2.0 ``JobTemplatePatch``: the Job spec patch."""

    spec: JobSpecPatch | None


class ReplicatedJobPatch(TypedDict, total=False):
    """trainer v2.2.0 ``ReplicatedJobPatch``: a replicated job by ``name`` and its patch."""

    name: Required[str]
    template: JobTemplatePatch | None


class JobSetSpecPatch(TypedDict, total=False):
    """trainer v2.2.0 ``JobSetSpecPatch``: per replicated job patches."""

    replicatedJobs: list[ReplicatedJobPatch] | None


class JobSetTemplatePatch(TypedDict, total=False):
    """trainer v2.2.0 ``JobSetTemplatePatch``: the JobSet spec patch."""

    spec: JobSetSpecPatch | None


class TrainingRuntimeSpecPatch(TypedDict, total=False):
    """trainer v2.2.0 ``TrainingRuntimeSpecPatch``: the JobSet template patch."""

    template: JobSetTemplatePatch | None


class RuntimePatch(TypedDict, total=False):
    """trainer v2.2.0 ``RuntimePatch``: its ``manager`` (required) and the runtime spec patch."""

    manager: Required[str]
    trainingRuntimeSpec: TrainingRuntimeSpecPatch | None


class Trainer(TypedDict, total=False):
    """trainer v2.2.0 ``Trainer``: ``numNodes`` (int32) and ``resourcesPerNode``."""

    numNodes: Int32 | None
    resourcesPerNode: ResourceRequirements | None


def _own_patch_whole(spec: TrainJobSpec) -> TrainJobSpec:
    """taugate's runtime patch, when present, holds the ``node`` pod template mutation writes into
    (a copy of another object's, or a hand-written one, may not)."""
    i = own_patch_index(dict(spec))
    if i is not None and _node_template(spec["runtimePatches"][i]) is None:  # type: ignore[index]
        raise PydanticCustomError("own_patch", "is taugate's runtime patch (manager {manager}) without the {node} "
                                  "replicated job's pod template; remove it: taugate writes it", {
                                      "manager": MANAGER, "node": NODE, "at": f"runtimePatches[{i}]"})
    return spec


class TrainJobSpecFields(TypedDict, total=False):
    """trainer v2.2.0 ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` ``TrainJobSpec`` as far as
    admission reads it: ``trainer``, ``runtimePatches`` and ``suspend``."""

    trainer: Trainer | None
    runtimePatches: list[RuntimePatch] | None
    suspend: bool | None


TrainJobSpec = Annotated[TrainJobSpecFields, AfterValidator(_own_patch_whole)]
"""``TrainJobSpecFields`` with taugate's own runtime patch whole."""


class TrainJob(WorkloadKind):
    """Kubeflow Trainer ``trainer.kubeflow.org/v1alpha1`` TrainJob: one pod template (role
    ``node``), ``spec.trainer.numNodes`` pods with ``resourcesPerNode``, written through taugate's
    runtime patch; suspended at ``spec.suspend``."""

    group, version, resource, kind = "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"
    spec_model = TrainJobSpec
    pod_priority_field = False  # a runtime patch's pod spec has no priorityClassName (the trainer's CRD)
    templates_from_spec = False  # the node template's pod spec is assembled from several fields
    upstream = ("kueue v0.17 pkg/controller/jobs/trainjob/trainjob_controller.go PodSets, RunWithPodSetsInfo, "
                "trainjob_webhook.go Default; trainer v2.2.0 pkg/runtime/core/trainingruntime.go newRuntimeInfo, "
                "mergeRuntimePatches, pkg/runtime/framework/plugins/jobset/jobset.go Validate, "
                "checkRuntimePatchesImmutability")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """The trainer's ``node`` pods: ``spec.trainer.numNodes`` (1 when unset, which ``checks``
        refuses on CREATE) pods of ``node_pod_spec``, their GPUs read from
        ``spec.trainer.resourcesPerNode`` (``resources_at``). Its ``path`` and ``template`` are
        taugate's runtime patch's ``node`` pod template, where mutation writes the run-id and
        placement; before that patch exists (a CREATE not yet mutated, or an UPDATE that removed
        it) a detached template at the place ``create_inserts`` puts it."""
        spec = as_dict(obj.get("spec"))
        i = own_patch_index(spec)
        found = _node_template(spec["runtimePatches"][i]) if i is not None else None
        if i is not None and found is not None:
            path, template = _patch_path(i, found[0]), found[1]
        else:
            path, template = _patch_path(0, 0), {}
        nodes = max(as_int(as_dict(spec.get("trainer")).get("numNodes"), 1), 0)
        return [PodTemplate.of("node", NODE, path, TRAINER, nodes, template, {}, spec=node_pod_spec(spec),
                               resources_at=TRAINER + ("resourcesPerNode",))]

    def create_inserts(self, spec: dict[str, Any]) -> list[tuple[str, int, Any]]:
        """taugate's runtime patch (``own_patch``), first in ``spec.runtimePatches``, unless there."""
        return [] if own_patch_index(spec) is not None else [("runtimePatches", 0, own_patch())]

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """False: runtime patches may change only while the TrainJob is suspended and its JobSet
        has no active job (trainer v2.2.0 ``checkRuntimePatchesImmutability``), which admission
        cannot see, so an UPDATE never touches them: a patch of ours never fails one."""
        return False

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """On CREATE, a TrainJob states its size: ``spec.trainer.numNodes`` and
        ``spec.trainer.resourcesPerNode`` (what its runtime would otherwise give it is out of
        admission's sight, module docstring). ``spec.trainer`` is immutable, so an UPDATE is never
        judged by this rule (an existing TrainJob's updates by Kueue or the trainer pass)."""
        if old is not None:
            return []
        trainer = as_dict(as_dict(obj.get("spec")).get("trainer"))
        missing = [f for f in ("numNodes", "resourcesPerNode") if trainer.get(f) is None]
        if not missing:
            return []
        return [Violation("trainjob-size", "spec.trainer." + missing[0],
            f"is not set ({' and '.join('spec.trainer.' + m for m in missing)} missing); in a workspace a TrainJob "
            f"states its size, since the runtime's numNodes and container resources are not visible to admission "
            f"and its GPUs could not be checked against the workload profile and the queue; fix: set "
            f"spec.trainer.numNodes (e.g. 2) and spec.trainer.resourcesPerNode (e.g. limits: {{nvidia.com/gpu: 8}}, "
            f"or only cpu and memory for a CPU run)")]

    def outcome(self, obj: Mapping[str, Any], status: dict[str, Any]) -> Outcome:
        """Kubeflow Trainer v2.2.0 ``pkg/apis/trainer/v1alpha1/trainjob_types.go``: condition
        ``Complete`` True is success, ``Failed`` True is failure (reason e.g. ``DeadlineExceeded``),
        ``Suspended`` True means Kueue holds it; running while any ``jobsStatus[].active`` (child
        Jobs with running or pending pods) is above 0. Kueue reads the same conditions (kueue v0.17
        ``trainjob_controller.go`` ``Finished``)."""
        return by_conditions(obj, success="Complete", failure="Failed", suspended="Suspended", running=None,
                             end_field=None)


KIND = TrainJob()

"""Kubeflow Trainer ``trainer.kubeflow.org/v1alpha1`` TrainJob: ``spec.trainer`` sized training nodes on a runtime.

Admission reads no runtime (no cluster object per request), so **in a workspace a TrainJob states
its size**, ``spec.trainer.numNodes`` and ``spec.trainer.resourcesPerNode``, or is refused on
CREATE (``checks``). GPUs a runtime gives its other containers (initializers, an MPI launcher) are
not counted; Kueue still charges them, as it reads the runtime.

Upstream rules followed here:

- GPU arithmetic: ``numNodes`` pods of the runtime's ``node`` container with ``resourcesPerNode``
  (trainer v2.2.0 ``pkg/runtime/core/trainingruntime.go`` ``newRuntimeInfo``;
  ``pkg/runtime/framework/plugins/plainml``, ``torch`` ``EnforceMLPolicy``;
  ``plugins/jobset/builder.go`` ``Trainer``), what Kueue reserves (kueue v0.17
  ``pkg/controller/jobs/trainjob/trainjob_controller.go`` ``PodSets``). An MPI runtime with
  ``runLauncherAsNode`` runs ``max(numNodes - 1, 1)`` nodes plus the launcher (``plugins/mpi``
  ``EnforceMLPolicy``): the same ``numNodes`` pods for 2 nodes or more.
- Queued by the ``kueue.x-k8s.io/queue-name`` label, suspended at ``spec.suspend`` (kueue v0.17
  ``trainjob_webhook.go`` ``Default``, ``trainjob_controller.go`` ``Suspend``).
- run-id and placement reach the pods through taugate's own runtime patch (``MANAGER``), first in
  ``spec.runtimePatches`` (trainer ``trainjob_types.go`` ``RuntimePatch``, ``PodTemplatePatch``,
  ``PodSpecPatch``). Kueue's entry (``kueue.x-k8s.io/manager``, filled by ``RunWithPodSetsInfo``)
  comes after it and the trainer applies them in order as strategic merge patches
  (``trainingruntime.go`` ``mergeRuntimePatches``), so Kueue's flavor has the last word on
  tolerations. Only the ``node`` replicated job is patched (trainer ``constants.Node``): the
  trainer refuses a patch of a replicated job its runtime lacks (``plugins/jobset/jobset.go``
  ``Validate``).
- Runtime patches change only while suspended with an inactive JobSet, ``spec.trainer`` never
  (``jobset.go`` ``checkRuntimePatchesImmutability``; the CRD's ``self == oldSelf``), so UPDATE
  edits stay off them.
- The trainer's JobSet is a child: it inherits the run-id and is not queued again (Kueue's JobSet
  integration skips a JobSet whose owner it manages).
"""

from __future__ import annotations

import json
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
"""A domain-prefixed path, as the trainer requires (``plugins/jobset/jobset.go`` ``Validate``,
``IsDomainPrefixedPath``)."""
NODE = "node"
"""The trainer's replicated job and container name (trainer v2.2.0 ``pkg/constants`` ``Node``)."""
TRAINER = ("spec", "trainer")


def own_patch() -> dict[str, Any]:
    """taugate's empty runtime patch: the ``node`` pod template with the ``node`` container."""
    return {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": NODE, "template": {"spec": {"template": {"metadata": {}, "spec": {
            "containers": [{"name": NODE}]}}}}}]}}}}


def _node_template(patch: Any) -> tuple[int, dict[str, Any]] | None:
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
    """The pod spec the trainer gives the ``node`` pods, as far as admission can know it: the
    runtime patches merged in order as the trainer does (``mergeRuntimePatches``: node selector
    keys merge, the last ``affinity`` and non-empty ``tolerations`` win, volumes add up), with
    ``resourcesPerNode`` on the ``node`` container."""
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
    patches = spec.get("runtimePatches")
    for i, patch in enumerate(patches if type(patches) is list else ()):
        if as_dict(patch).get("manager") == MANAGER:
            return i
    return None




class ContainerPatch(TypedDict, total=False):
    """trainer v2.2.0 ``ContainerPatch``: a runtime container by ``name`` and its volume mounts."""

    name: Required[str]
    volumeMounts: list[dict[str, Any]] | None


class PodSpecPatch(TypedDict, total=False):
    """trainer v2.2.0 ``PodSpecPatch``, as far as placement and the data volume read it."""

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
    """trainer v2.2.0 ``Trainer``."""

    numNodes: Int32 | None
    resourcesPerNode: ResourceRequirements | None


def _own_patch_whole(spec: TrainJobSpec) -> TrainJobSpec:
    """taugate's runtime patch, when present, holds the ``node`` pod template mutation writes into
    (a copied or hand-written one may not)."""
    i = own_patch_index(dict(spec))
    if i is not None and _node_template(spec["runtimePatches"][i]) is None:  # type: ignore[index]
        raise PydanticCustomError("own_patch", "is taugate's runtime patch (manager {manager}) without the {node} "
                                  "replicated job's pod template; remove it: taugate writes it", {
                                      "manager": MANAGER, "node": NODE, "at": f"runtimePatches[{i}]"})
    return spec


class TrainJobSpecFields(TypedDict, total=False):
    """trainer v2.2.0 ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` ``TrainJobSpec``, as far as
    admission reads it."""

    trainer: Trainer | None
    runtimePatches: list[RuntimePatch] | None
    suspend: bool | None


TrainJobSpec = Annotated[TrainJobSpecFields, AfterValidator(_own_patch_whole)]


def _cel_own_node_selectors() -> str:
    """CEL: the node selectors of the ``node`` template in taugate's own runtime patches (a list;
    mutation writes the profile's placement there, ``MANAGER``)."""
    spec = "p.trainingRuntimeSpec.template.spec"
    pod = "j.template.spec.template.spec"
    own = (f"has(p.manager) && p.manager == {json.dumps(MANAGER)} && has(p.trainingRuntimeSpec) && "
           f"has(p.trainingRuntimeSpec.template) && has({spec}) && has({spec}.replicatedJobs)")
    node = (f"has(j.name) && j.name == {json.dumps(NODE)} && has(j.template) && has(j.template.spec) && "
            f"has(j.template.spec.template) && has({pod}) && has({pod}.nodeSelector)")
    return (f"object.spec.runtimePatches.filter(p, {own}).map(p, {spec}.replicatedJobs.filter(j, {node})"
            f".map(j, {pod}.nodeSelector))")


def cel_node_template() -> str:
    """CEL (``WorkloadKind.cel_pod_templates``): the ``node`` pods' template as far as the API server's
    policy reads it: ``resourcesPerNode`` on the ``node`` container, and the node selector of
    taugate's own runtime patch (the first one; another manager's patch is the webhook's to judge)."""
    trainer = "object.spec.trainer"
    selectors = _cel_own_node_selectors()
    selector = (f"(has(object.spec.runtimePatches) && {selectors}.exists(l, l.size() > 0) ? "
                f"{selectors}.filter(l, l.size() > 0)[0][0] : {{}})")
    return (f"(has(object.spec) && has({trainer}) && has({trainer}.resourcesPerNode) ? "
            f"[dyn({{'spec': {{'containers': dyn([{{'name': dyn({json.dumps(NODE)}), "
            f"'resources': dyn({trainer}.resourcesPerNode)}}]), 'nodeSelector': dyn({selector})}}}})] : [])")


class TrainJob(WorkloadKind):
    """Kubeflow Trainer TrainJob."""

    group, version, resource, kind = "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"
    cel_pod_templates = cel_node_template()
    spec_model = TrainJobSpec
    pod_priority_field = False  # a runtime patch's pod spec has no priorityClassName (the trainer's CRD)
    templates_from_spec = False  # the node template's pod spec is assembled from several fields
    upstream = ("kueue v0.17 pkg/controller/jobs/trainjob/trainjob_controller.go PodSets, RunWithPodSetsInfo, "
                "trainjob_webhook.go Default; trainer v2.2.0 pkg/runtime/core/trainingruntime.go newRuntimeInfo, "
                "mergeRuntimePatches, pkg/runtime/framework/plugins/jobset/jobset.go Validate, "
                "checkRuntimePatchesImmutability")

    def pod_templates(self, obj: dict[str, Any]) -> list[PodTemplate]:
        """The trainer's ``node`` pods (``numNodes`` 1 when unset, which ``checks`` refuses on
        CREATE), at taugate's runtime patch's ``node`` template where mutation writes; before
        that patch exists, a detached template where ``create_inserts`` puts it."""
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
        """taugate's runtime patch, first in ``spec.runtimePatches``, unless there."""
        return [] if own_patch_index(spec) is not None else [("runtimePatches", 0, own_patch())]

    def templates_mutable(self, old: dict[str, Any]) -> bool:
        """False: runtime patches may change only while suspended with no active job (trainer
        v2.2.0 ``checkRuntimePatchesImmutability``), which admission cannot see."""
        return False

    def checks(self, obj: dict[str, Any], templates: list[PodTemplate], *, queued: bool, old: dict[str, Any] | None,
               elastic_jobs: bool) -> list[Violation]:
        """On CREATE, a TrainJob states ``spec.trainer.numNodes`` and ``resourcesPerNode``.
        ``spec.trainer`` is immutable, so an UPDATE is never judged by this rule."""
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
        """Kubeflow Trainer v2.2.0 ``trainjob_types.go``: ``Complete`` / ``Failed`` conditions
        True; ``Suspended`` True means Kueue holds it; running while any ``jobsStatus[].active`` is
        above 0 (kueue v0.17 ``trainjob_controller.go`` ``Finished`` reads the same)."""
        return by_conditions(obj, success="Complete", failure="Failed", suspended="Suspended", running=None,
                             end_field=None)


KIND = TrainJob()

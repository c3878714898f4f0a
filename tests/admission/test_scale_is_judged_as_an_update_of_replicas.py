"""A change of replicas through the ``scale`` subresource (``kubectl scale``, an HPA) is judged
exactly as the UPDATE of the parent's replicas field (``taugate.webhook.scale``, issue 27): the
stored parent is read, the new count set where the kind's scale subresource writes it, and the
UPDATE decided; it fails closed when the parent cannot be read or changed in between."""

from __future__ import annotations

import copy
import re
import uuid

import pytest
import yaml

from taugate.kinds import KINDS, deployment, pytorchjob
from taugate.kubeaccess import Resource
from taugate.webhook import scale
from taugate.webhook.review import admit, request_for, validate
from taugate.webhook.routes import ROUTES
from tests import upstream
from tests.admission.test_core_kinds_are_governed_when_they_ask_for_gpus import ALICE, gpu_deployment
from tests.paths import (
    JOBSET_CRD,
    LWS_CRD,
    PYTORCH_MNIST_NCCL,
    PYTORCHJOB_CRD,
    RAYCLUSTER_CRD,
    RAYJOB_CRD,
    RAYSERVICE_CRD,
    TRAINJOB_CRD,
)

KUBERNETES = upstream.module_dir("kubernetes")


def stored(obj: dict, state, settings, engine) -> dict:
    """``obj`` as the API server stores it after taugate admitted it in ``vision``."""
    d = admit(obj, state=state, settings=settings, engine=engine, namespace="vision", user_info=ALICE)
    assert d.allowed, d.message
    out = copy.deepcopy(d.object)
    out["metadata"].update(namespace="vision", uid=str(uuid.uuid4()), resourceVersion="4711",
                           creationTimestamp="2026-12-04T16:00:00Z")
    return out


def scale_of(parent: dict, replicas: int | None) -> dict:
    """The ``autoscaling/v1`` Scale the API server builds from ``parent`` (Kubernetes
    ``pkg/registry/apps/deployment/storage/storage.go`` ``scaleFromDeployment``: name, namespace,
    uid, resourceVersion, creationTimestamp; ``spec.replicas``)."""
    meta = {k: parent["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")}
    return {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": meta,
            "spec": {} if replicas is None else {"replicas": replicas}, "status": {"replicas": 0, "selector": ""}}


def scale_request(parent: dict, replicas: int, *, user: dict | None = None) -> dict:
    """The AdmissionRequest the API server sends for ``kubectl scale --replicas=N`` of ``parent``:
    kind Scale, resource the parent's, subResource ``scale``."""
    kind = next(k for k in KINDS if k.kind == parent["kind"])
    resource = {"group": kind.group, "version": kind.version, "resource": kind.resource}
    scale_kind = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    old_replicas = _at(parent, kind.scale_path)
    return {"uid": str(uuid.uuid4()), "kind": scale_kind, "resource": resource, "subResource": "scale",
            "requestKind": scale_kind, "requestResource": resource, "requestSubResource": "scale",
            "name": parent["metadata"]["name"], "namespace": parent["metadata"]["namespace"], "operation": "UPDATE",
            "userInfo": user or ALICE, "object": scale_of(parent, replicas),
            "oldObject": scale_of(parent, old_replicas), "dryRun": False}


def _at(obj: dict, path) -> object:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


class Reads:
    """A reader serving stored objects by (resource, namespace, name), recording each read."""

    def __init__(self, *objects: dict, error: str | None = None):
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self.error = error
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, res: Resource, namespace: str, name: str) -> dict | None:
        self.calls.append((res.plural, namespace, name))
        if self.error:
            raise scale.ObjectUnreadable(self.error)
        return copy.deepcopy(self.objects.get((namespace, name)))


def the_same_update(parent: dict, replicas: int, kind, state, settings, engine):
    """The decision on the UPDATE of ``parent``'s replicas through the object (kubectl patch)."""
    grown = copy.deepcopy(parent)
    at = grown
    for key in kind.scale_path[:-1]:
        at = at.setdefault(key, {})
    at[kind.scale_path[-1]] = replicas
    return validate(request_for(grown, namespace="vision", operation="UPDATE", old=parent, user_info=ALICE),
                    state, settings, engine)


# ---- judged as the UPDATE it is -------------------------------------------------------------------

@pytest.mark.parametrize("replicas", [0, 1, 3, 4, 5, 64])
def test_scaling_a_gpu_deployment_gets_the_answer_of_updating_its_replicas(replicas, state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    d = scale.validate(scale_request(parent, replicas), state, settings, engine, Reads(parent))
    same = the_same_update(parent, replicas, deployment.KIND, state, settings, engine)
    assert (d.allowed, d.message, d.code) == (same.allowed, same.message, same.code)
    assert d.allowed is (replicas <= 4)  # examples/cluster.yaml: h100-1gpu has at most 4 workers


def test_scaling_a_gpu_deployment_past_its_profile_is_refused_naming_spec_replicas(state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    reads = Reads(parent)
    d = scale.validate(scale_request(parent, 64), state, settings, engine, reads)
    assert not d.allowed and d.code == 403
    assert "[workers-match-profile] spec.replicas: asks for 64 workers" in d.message, d.message
    assert reads.calls == [("deployments", "vision", parent["metadata"]["name"])]


def test_scaling_a_pytorchjobs_workers_is_judged_on_its_worker_replicas(state, settings, engine):
    sample = yaml.safe_load(PYTORCH_MNIST_NCCL.read_text())
    for spec in sample["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2", "memory": "8Gi"}
    parent = stored(sample, state, settings, engine)
    for replicas in (1, 40):
        d = scale.validate(scale_request(parent, replicas), state, settings, engine, Reads(parent))
        same = the_same_update(parent, replicas, pytorchjob.KIND, state, settings, engine)
        assert (d.allowed, d.message) == (same.allowed, same.message)
    assert not d.allowed and "Worker: 40 pods x 1 GPUs" in d.message, d.message


def test_a_scale_that_omits_replicas_means_zero_as_the_api_types_say(state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    request = scale_request(parent, 0)
    request["object"]["spec"] = {}
    assert scale.validate(request, state, settings, engine, Reads(parent)).allowed


@pytest.mark.parametrize("replicas", [-1, "64", 2**31, 1.5, True])
def test_a_scale_whose_replicas_is_not_a_count_is_refused_naming_the_field(replicas, state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    request = scale_request(parent, 1)
    request["object"]["spec"]["replicas"] = replicas
    d = scale.validate(request, state, settings, engine, Reads(parent))
    assert not d.allowed and "[scale] spec.replicas" in d.message and "whole number" in d.message, d.message


# ---- fail closed ----------------------------------------------------------------------------------

def test_a_parent_changed_since_the_scale_was_built_is_refused_with_a_conflict_to_retry(state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    request = scale_request(parent, 3)
    newer = copy.deepcopy(parent)
    newer["metadata"]["resourceVersion"] = "4712"
    newer["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    d = scale.validate(request, state, settings, engine, Reads(newer))
    assert not d.allowed and d.code == 409
    assert "changed while it was being scaled" in d.message and "retry" in d.message


def test_a_parent_of_another_uid_under_the_same_name_is_not_the_one_being_scaled(state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    other = copy.deepcopy(parent)
    other["metadata"]["uid"] = "another"
    assert scale.validate(scale_request(parent, 3), state, settings, engine, Reads(other)).code == 409
    assert scale.validate(scale_request(parent, 3), state, settings, engine, Reads()).code == 409  # gone


def test_a_parent_that_cannot_be_read_refuses_the_scale_naming_the_reason_and_the_fix(state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    reads = Reads(error="HTTP 403: deployments.apps is forbidden")
    d = scale.validate(scale_request(parent, 3), state, settings, engine, reads)
    assert not d.allowed and d.code == 503
    assert "forbidden" in d.message and "change spec.replicas on the Deployment itself" in d.message


def test_without_a_way_to_read_the_parent_every_scale_in_a_workspace_is_refused(state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    d = scale.validate(scale_request(parent, 1), state, settings, engine, None)
    assert not d.allowed and "snapshot" in d.message and "kubectl patch" in d.message, d.message


# ---- what is not this module's case reads nothing --------------------------------------------------

def test_a_scale_outside_a_workspace_or_by_taugate_itself_is_allowed_without_reading(state, settings, engine):
    parent = stored(gpu_deployment(replicas=2), state, settings, engine)
    elsewhere = copy.deepcopy(parent)
    elsewhere["metadata"]["namespace"] = "default"
    reads = Reads(parent, elsewhere)
    assert scale.validate(scale_request(elsewhere, 64), state, settings, engine, reads).allowed
    operator = {"username": settings.service_account, "groups": []}
    assert scale.validate(scale_request(parent, 64, user=operator), state, settings, engine, reads).allowed
    assert reads.calls == []


def test_a_request_that_is_not_a_scale_is_decided_by_validation_alone(state, settings, engine):
    obj = stored(gpu_deployment(replicas=2), state, settings, engine)
    request = request_for(obj, namespace="vision", operation="UPDATE", old=obj, user_info=ALICE)
    status = {**request, "subResource": "status"}
    reads = Reads(obj)
    assert scale.validate(request, state, settings, engine, reads).allowed
    assert scale.validate(status, state, settings, engine, reads).allowed
    assert reads.calls == []


# ---- which kinds have a scale subresource ----------------------------------------------------------

def _crd_scale_path(crd_file) -> tuple[str, ...] | None:
    crd = yaml.safe_load(crd_file.read_text())
    served = [v for v in crd["spec"]["versions"] if v.get("storage")]
    scale_sub = (served[0].get("subresources") or {}).get("scale")
    return tuple(scale_sub["specReplicasPath"].lstrip(".").split(".")) if scale_sub else None


@pytest.mark.parametrize(("kind", "crd"), [("RayJob", RAYJOB_CRD), ("RayCluster", RAYCLUSTER_CRD),
                                           ("RayService", RAYSERVICE_CRD), ("JobSet", JOBSET_CRD),
                                           ("LeaderWorkerSet", LWS_CRD), ("PyTorchJob", PYTORCHJOB_CRD),
                                           ("TrainJob", TRAINJOB_CRD)])
def test_a_custom_kinds_scale_path_is_its_crds_spec_replicas_path(kind, crd):
    assert next(k for k in KINDS if k.kind == kind).scale_path == _crd_scale_path(crd)


@pytest.mark.parametrize(("kind", "registry"), [("Deployment", "apps/deployment"), ("StatefulSet", "apps/statefulset"),
                                                ("Job", "batch/job"), ("Pod", "core/pod")])
def test_a_built_in_kind_has_a_scale_path_exactly_when_its_registry_serves_scale(kind, registry):
    source = (KUBERNETES / "pkg" / "registry" / registry / "storage" / "storage.go").read_text()
    serves_scale = re.search(r"\bScaleREST\b", source) is not None
    k = next(k for k in KINDS if k.kind == kind)
    assert (k.scale_path is not None) is serves_scale
    if serves_scale:  # the Go type's Spec.Replicas, as scaleFrom<Kind> reads it
        assert k.scale_path == ("spec", "replicas")
        assert re.search(r"Replicas:\s+\w+\.Spec\.Replicas,", source)


def test_the_validating_route_names_the_scale_subresource_of_every_scalable_kind_and_only_for_update():
    validating = next(r for r in ROUTES if r.path == "/validate")
    scales = {(r.api_groups[0], r.api_versions[0], res, r.operations) for r in validating.rules for res in r.resources
              if res.endswith("/scale")}
    assert scales == {(k.group, k.version, f"{k.resource}/scale", ("UPDATE",)) for k in KINDS if k.scale_path}
    mutating = next(r for r in ROUTES if r.path == "/mutate")
    assert not any("/" in res for r in mutating.rules for res in r.resources)

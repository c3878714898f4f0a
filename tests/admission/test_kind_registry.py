"""The registry of workload kinds (``taugate.kinds``): every kind module is complete, every kind
table in the code derives from the registry, and no other module spells a kind's resource.

The chart's side (webhook rules, the researcher role) is checked in
``tests/install/test_webhook_configurations.py`` and ``tests/install/test_rbac.py``.
"""

from __future__ import annotations

import ast
import copy
import importlib
import json
import pkgutil
import typing
from pathlib import Path

import pytest
from pydantic import TypeAdapter

import taugate.kinds
from taugate.fieldpath import field_path
from taugate.kinds import KIND_NAMES, KINDS, WorkloadKind, kind_for, kind_of, resources_by_group_version
from taugate.kinds.base import WorkloadKind as Base
from taugate.kinds.trainjob import own_patch
from taugate.pods import Role
from taugate.settings import Settings
from taugate.structure import workload_adapter
from taugate.unmanaged import UNMANAGED_KINDS
from taugate.webhook import mutation, review, routes, server
from tests import kubedouble

ROOT = Path(__file__).resolve().parents[2]
KIND_MODULES = sorted(m.name for m in pkgutil.iter_modules(taugate.kinds.__path__) if m.name != "base")
SAMPLES = {
    "RayJob": {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"}, "spec": {"rayClusterSpec": {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": {"spec": {"containers": [
            {"name": "w", "image": "ray", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}]}}},
    "RayCluster": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c"}, "spec": {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 3, "template": {"spec": {"containers": [
            {"name": "w", "image": "ray", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}]}},
    "Job": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": 2,
            "template": {"spec": {"containers": [{"name": "t", "image": "pytorch",
                                                  "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}},
    "Pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "cuda", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
    "Deployment": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 2,
                   "selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}},
                   "spec": {"containers": [{"name": "vllm", "image": "vllm",
                                            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}},
    "StatefulSet": {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {
                    "replicas": 3, "selector": {"matchLabels": {"app": "s"}}, "template": {
                    "metadata": {"labels": {"app": "s"}}, "spec": {"containers": [
                        {"name": "w", "image": "w", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}},
    "JobSet": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"}, "spec": {
        "replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": {
            "spec": {"containers": [{"name": "t", "image": "pytorch",
                                     "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}]}},
    "LeaderWorkerSet": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {
        "name": "lws"}, "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {
            "containers": [{"name": "vllm", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}},
    "PyTorchJob": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt"}, "spec": {
        "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}},
    "RayService": {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "s"}, "spec": {
        "rayClusterConfig": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": {"spec": {"containers": [
                {"name": "w", "image": "ray", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}}},
    # as admitted: its pod template is taugate's runtime patch (taugate.kinds.trainjob)
    "TrainJob": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tj"},
                 "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {
                     "numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}},
                     "runtimePatches": [own_patch()]}},
}
"""One small well-formed object of each kind; a new kind adds its own here."""


def test_every_module_of_the_kinds_package_is_registered_once():
    registered = [type(k).__module__.rsplit(".", 1)[1] for k in KINDS]
    assert sorted(registered) == KIND_MODULES
    assert len({(k.group, k.kind) for k in KINDS}) == len(KINDS)
    assert len({(k.group, k.resource) for k in KINDS}) == len(KINDS)


@pytest.mark.parametrize("name", KIND_MODULES)
def test_every_kind_module_is_complete(name):
    module = importlib.import_module(f"taugate.kinds.{name}")
    kind = module.KIND
    assert isinstance(kind, WorkloadKind)
    for attr in ("group", "version", "resource", "kind", "upstream"):
        assert isinstance(getattr(kind, attr), str), f"{name}: {attr} is not set"
        assert getattr(kind, attr) or attr == "group", f"{name}: {attr} is empty (only the core group is)"
    assert kind.resource == kind.resource.lower() and kind.resource.endswith("s"), "the resource is the plural"
    assert type(kind).pod_templates is not Base.pod_templates, f"{name} does not override pod_templates"
    assert any("spec_model" in vars(c) for c in type(kind).__mro__ if c is not Base), f"{name}: no spec_model"
    assert isinstance(workload_adapter(kind.spec_model), TypeAdapter), f"{name}: spec_model is no pydantic model"
    assert "Upstream rules followed here" in (module.__doc__ or ""), f"{name}: the module docstring names no upstream"
    for method, function in vars(type(kind)).items():
        if callable(function) and not method.startswith("_"):
            assert function.__doc__, f"{name}: {type(kind).__name__}.{method} has no docstring naming its rule"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_kind_has_a_sample_whose_gpu_templates_it_reads_and_which_it_finds_well_formed(kind):
    obj = SAMPLES[kind.kind]
    assert kind_of(obj) is kind
    assert kind.malformed(obj) == []
    templates = kind.pod_templates(obj)
    assert templates and any(t.gpus_per_pod > 0 for t in templates)
    assert all(t.path[:1] == ("spec",) or t.path == () for t in templates)  # () : a Pod is its own template
    assert kind.governs(templates)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_kind_reports_a_pod_template_of_the_wrong_type_with_its_field_path(kind):
    obj = SAMPLES[kind.kind]
    [first, *_] = kind.pod_templates(obj)
    broken = copy.deepcopy(obj)
    holder = broken
    where = first.path + ("spec",) if first.path == () else first.path  # a Pod: its spec
    for part in where[:-1]:
        holder = holder[part]
    holder[where[-1]] = "not a pod template"
    [violation] = kind.malformed(broken)
    assert violation.policy == "object-shape"
    assert violation.field == field_path(where)


def test_a_kind_is_found_by_api_version_or_group_and_nothing_else_is():
    for k in KINDS:
        assert kind_for(k.api_version, k.kind) is k
        assert kind_for(k.group, k.kind) is k
    assert kind_for("apps/v1", "ReplicaSet") is None
    assert kind_for("v1", "Pod") is kind_for("", "Pod") is not None
    assert kind_for(None, "RayJob") is None
    assert kind_of("not an object") is None


def test_the_webhook_rules_are_derived_from_the_registry():
    rules = {(g, v, r) for rule in routes.WORKLOAD_RULES for g in rule.api_groups for v in rule.api_versions
             for r in rule.resources}
    unmanaged = {(u.group, u.version, u.resource) for u in UNMANAGED_KINDS}
    assert rules == {(k.group, k.version, k.resource) for k in KINDS} | unmanaged
    by_group_version = {(r.api_groups[0], r.api_versions[0]): r.resources for r in routes.WORKLOAD_RULES}
    for group_version, resources in resources_by_group_version().items():
        assert by_group_version[group_version][:len(resources)] == resources
    by_path = {r.path: r.rules for r in routes.ROUTES}
    assert by_path["/mutate"] == routes.WORKLOAD_RULES
    # kubectl scale: webhook/scale.py; DRA claims and kubectl debug: webhook/claims.py
    assert by_path["/validate"] == routes.SCALE_RULES + routes.CLAIM_RULES  # /mutate decides the objects
    scales = {(g, v, r) for rule in routes.SCALE_RULES for g in rule.api_groups for v in rule.api_versions
              for r in rule.resources}
    assert scales == {(k.group, k.version, f"{k.resource}/scale") for k in KINDS if k.scale_path}


def test_the_admission_request_of_taugate_admit_names_each_kinds_resource():
    for k in KINDS:
        request = review.request_for(SAMPLES[k.kind], namespace="team-a")
        assert request["resource"] == {"group": k.group, "version": k.version, "resource": k.resource}


def test_children_of_every_kind_are_recognised_by_their_controller_owner():
    assert {(k.group, k.kind) for k in KINDS} == mutation.WORKLOAD_OWNER_KINDS
    for k in KINDS:
        child = {"metadata": {"ownerReferences": [{"apiVersion": k.api_version, "kind": k.kind, "controller": True,
                                                   "name": "parent", "uid": "u"}]}}
        assert mutation.controller_owner(child)["kind"] == k.kind


def test_every_kind_is_a_metric_label_and_has_a_default_lane():
    assert KIND_NAMES <= server.KNOWN_KINDS
    assert Settings().default_lanes == {k.kind: k.default_lane for k in KINDS}


def test_the_test_doubles_discovery_serves_every_kind():
    served = {(key.rsplit("/", 1)[0], key.rsplit("/", 1)[1], kind) for key, kind, namespaced in kubedouble.RESOURCES
              if namespaced}
    assert {(k.api_version, k.resource, k.kind) for k in KINDS} <= served


def _string_constants(path: Path) -> set[str]:
    """The string constants of a module, except dict keys (``{"pods": 3}`` names a count, not a
    resource)."""
    tree = ast.parse(path.read_text())
    keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys}
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in keys}


def test_no_module_outside_the_kinds_package_spells_a_kinds_resource():
    resources = {k.resource for k in KINDS}
    sources = [p for folder in ("taugate", "webhook", "controllers", "certs") for p in (ROOT / folder).rglob("*.py")
               if "kinds" not in p.relative_to(ROOT).parts]
    assert sources
    spelled = {str(p.relative_to(ROOT)): sorted(_string_constants(p) & resources) for p in sources}
    assert {p: r for p, r in spelled.items() if r} == {}


def test_every_pod_template_role_is_described_to_researchers_by_the_policy_library():
    # a role lib.describe does not know leaves every policy message that names it undefined: the
    # policy would silently find nothing for that kind's templates
    lib = (ROOT / "policies" / "lib" / "taugate.rego").read_text()
    roles = typing.get_args(Role)
    assert roles and [r for r in roles if f't.role == "{r}"' not in lib] == []
    schema = json.loads((ROOT / "policies" / "input.schema.json").read_text())
    assert set(schema["$defs"]["podTemplate"]["properties"]["role"]["enum"]) == set(roles)

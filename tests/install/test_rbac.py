"""Least privilege per component: the webhook only reads the cluster state it decides on, the
operator writes only what it manages, and the certificate and cleanup hooks touch only their own
Secret and webhook configurations, by name."""

from __future__ import annotations

import pytest

from taugate import admission_policy, labels
from taugate.controllers.recorder.objects import CHILD_RESOURCES
from taugate.kinds import KINDS
from taugate.state_objects import STATE_RESOURCES
from tests.install.chart import NAMESPACE, allowed, crds, find, hook_events, objects, one, pod_spec, rules_of

# The kinds the webhook's in-cluster state provider (webhook/state_watch.py) lists and
# watches: those a ClusterState is built from.
STATE_KINDS = {(r.group, r.plural) for r in STATE_RESOURCES}
SCALABLE = {(k.group, k.resource) for k in KINDS if k.scale_path}
"""The kinds whose ``scale`` requests the webhook judges on the stored parent."""
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


def test_no_role_uses_a_wildcard(rendered):
    for objs in rendered.values():
        for role in find(objs, "Role") + find(objs, "ClusterRole"):
            for rule in role["rules"]:
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in (rule.get(field) or []), (role["metadata"]["name"], rule)


EVENTS = {("", "events"), ("events.k8s.io", "events")}
"""Where the webhook writes Events on the workloads whose updates it warned about or denied
(``webhook/events.py``), as Kyverno's and Kueue's controllers do."""


def test_the_webhook_can_only_read_the_state_kinds_get_the_parents_of_scale_requests_and_write_events(
        default_objects):
    granted = rules_of(default_objects, "taugate-webhook")
    pairs = {(g, r) for _, rule in granted for g in rule["apiGroups"] for r in rule["resources"]}
    assert pairs == STATE_KINDS | SCALABLE | EVENTS
    reading = [(k, rule) for k, rule in granted if not set(rule["resources"]) & {"events"}]
    assert {v for _, rule in reading for v in rule["verbs"]} == {"get", "list", "watch"}
    for group, resource in EVENTS:
        assert allowed(granted, "create", group, resource) and allowed(granted, "patch", group, resource)
        assert not allowed(granted, "delete", group, resource) and not allowed(granted, "list", group, resource)
    for group, resource in STATE_KINDS:
        assert allowed(granted, "watch", group, resource)
    for group, resource in SCALABLE:  # webhook/scale.py reads the stored parent of a scale request
        assert allowed(granted, "get", group, resource)
        assert not allowed(granted, "list", group, resource) and not allowed(granted, "watch", group, resource)
        assert not allowed(granted, "get", group, f"{resource}/scale")
    assert not allowed(granted, "get", "", "secrets", "taugate-webhook-tls", NAMESPACE)
    assert not allowed(granted, "list", "ray.io", "rayjobs")
    assert not allowed(granted, "get", "ray.io", "rayjobs")


def test_the_operator_writes_what_it_manages_and_nothing_else(default_objects):
    granted = rules_of(default_objects, "taugate-operator")
    for resource in ("namespaces", "serviceaccounts", "persistentvolumeclaims"):
        assert allowed(granted, "create", "", resource, namespace=None)
    assert allowed(granted, "create", "kueue.x-k8s.io", "localqueues")
    assert allowed(granted, "create", "rbac.authorization.k8s.io", "rolebindings")
    assert allowed(granted, "patch", labels.GROUP, "workspaces/status")
    # It keeps the workspace's namespace and data on cleanup, reads Kueue and workloads only,
    # and never touches Secrets, webhook configurations or ClusterRoles (except binding the
    # researcher role by name).
    assert not allowed(granted, "delete", "", "namespaces", "team-a")
    assert not allowed(granted, "delete", "", "persistentvolumeclaims", "team-a-data", "team-a")
    assert not allowed(granted, "patch", "kueue.x-k8s.io", "clusterqueues", "gpu")
    for verb in WRITE_VERBS:
        assert not allowed(granted, verb, "ray.io", "rayjobs", "x", "team-a")
        assert not allowed(granted, verb, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "taugate")
    assert not allowed(granted, "get", "", "secrets", "x", "team-a")
    assert allowed(granted, "bind", "rbac.authorization.k8s.io", "clusterroles", "tau-researcher-v1")
    assert not allowed(granted, "bind", "rbac.authorization.k8s.io", "clusterroles", "cluster-admin")
    assert not allowed(granted, "escalate", "rbac.authorization.k8s.io", "clusterroles", "tau-researcher-v1")


def test_the_operator_may_take_and_renew_its_own_leader_lease_in_the_release_namespace_only(default_objects):
    granted = rules_of(default_objects, "taugate-operator")
    lease = ("coordination.k8s.io", "leases")
    assert allowed(granted, "create", *lease, namespace=NAMESPACE)  # create cannot be limited by name
    for verb in ("get", "patch"):
        assert allowed(granted, verb, *lease, "taugate-operator", NAMESPACE)
        assert not allowed(granted, verb, *lease, "kube-scheduler", NAMESPACE)  # only its own Lease
    for verb in ("create", "get", "patch"):
        assert not allowed(granted, verb, *lease, "taugate-operator", "kube-system")
    for verb in ("update", "delete", "list", "watch"):
        assert not allowed(granted, verb, *lease, "taugate-operator", NAMESPACE)


def test_the_operator_writes_the_policys_parameter_and_no_one_else_may(default_objects):
    granted = rules_of(default_objects, "taugate-operator")
    placements, name = (labels.GROUP, "profileplacements"), admission_policy.NAME
    assert allowed(granted, "create", *placements)  # create cannot be limited by name
    for verb in ("patch", "delete"):
        assert allowed(granted, verb, *placements, name)
        assert not allowed(granted, verb, *placements, "another")
    # get on every object of the kind: the API server's condition for creating a policy with that paramKind
    assert allowed(granted, "get", *placements, "another")
    assert not allowed(granted, "update", *placements, name)
    for role in ("taugate-platform-admin", "tau-researcher-v1"):  # written by the operator only
        rules = [(None, rule) for rule in one(default_objects, "ClusterRole", role)["rules"]]
        for verb in WRITE_VERBS:
            assert not allowed(rules, verb, *placements, name), (role, verb)


def test_quota_raise_is_the_only_way_the_operator_may_patch_a_cluster_queue():
    granted = rules_of(objects({"operator": {"quotaRaise": True}}), "taugate-operator")
    assert allowed(granted, "patch", "kueue.x-k8s.io", "clusterqueues", "gpu")
    assert not allowed(granted, "delete", "kueue.x-k8s.io", "clusterqueues", "gpu")


def test_the_operator_may_manage_every_custom_resource_the_chart_installs(default_objects):
    definitions = [c for c in crds() if c["spec"]["group"] == labels.GROUP]
    assert definitions, f"the chart holds no {labels.GROUP} CRD: run `taugate crds -o charts/taugate/crds`"
    granted = rules_of(default_objects, "taugate-operator")
    for crd in definitions:
        plural = crd["spec"]["names"]["plural"]
        assert allowed(granted, "watch", labels.GROUP, plural), plural
        if "status" in crd["spec"]["versions"][0].get("subresources", {}):
            assert allowed(granted, "patch", labels.GROUP, f"{plural}/status"), plural


@pytest.mark.parametrize("service_account, may", [
    ("taugate-certs-hook", {("get", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "taugate", None),
                            ("patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "taugate",
                             None),
                            ("create", "", "secrets", None, NAMESPACE),
                            ("update", "", "secrets", "taugate-webhook-tls", NAMESPACE)}),
    ("taugate-certs", {("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "taugate", None),
                       ("get", "", "secrets", "taugate-webhook-tls", NAMESPACE)}),
    ("taugate-cleanup", {("delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "taugate", None),
                         ("delete", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "taugate", None),
                         ("delete", "", "secrets", "taugate-webhook-tls", NAMESPACE),
                         ("delete", labels.GROUP, "profileplacements", admission_policy.NAME, None),
                         # it stops the operator first, which would put the policy back
                         ("patch", "apps", "deployments/scale", "taugate-operator", NAMESPACE),
                         ("list", "", "pods", None, NAMESPACE)}),
])
def test_hook_accounts_reach_only_taugates_own_secret_and_configurations(default_objects, service_account, may):
    granted = rules_of(default_objects, service_account)
    for verb, group, resource, name, namespace in may:
        assert allowed(granted, verb, group, resource, name, namespace), (verb, resource, name)
    for verb in ("get", "patch", "delete"):
        assert not allowed(granted, verb, "admissionregistration.k8s.io", "mutatingwebhookconfigurations",
                           "kueue-mutating")
        assert not allowed(granted, verb, "", "secrets", "some-other-secret", NAMESPACE)
    assert not allowed(granted, "list", "", "secrets", namespace=NAMESPACE)
    assert not allowed(granted, "create", "", "secrets", namespace="kube-system")
    assert not allowed(granted, "patch", "apps", "deployments/scale", "taugate-webhook", NAMESPACE)
    assert not allowed(granted, "patch", "apps", "deployments", "taugate-operator", NAMESPACE)


def test_hook_jobs_get_their_rbac_before_they_run_and_clean_it_up(default_objects):
    for job in find(default_objects, "Job"):
        events = hook_events(job)
        assert events, f"Job/{job['metadata']['name']} is not a hook"
        sa = pod_spec(job)["serviceAccountName"]
        weight = int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
        support = [o for o in default_objects if o["metadata"]["name"] == sa and o is not job
                   and o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")]
        assert {o["kind"] for o in support} == {"ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                                "ClusterRoleBinding"}
        for o in support + [job]:
            annotations = o["metadata"]["annotations"]
            assert hook_events(o) == events, o["metadata"]["name"]
            policy = set(annotations["helm.sh/hook-delete-policy"].split(","))
            assert policy == {"before-hook-creation", "hook-succeeded"}
            if o is not job:
                assert int(annotations["helm.sh/hook-weight"]) < weight


def test_the_operator_patches_nodes_only_when_node_labelling_is_enabled(default_objects):
    assert not allowed(rules_of(default_objects, "taugate-operator"), "patch", "", "nodes")
    enabled = objects({"operator": {"labelNodes": True}})
    assert allowed(rules_of(enabled, "taugate-operator"), "patch", "", "nodes")


def test_the_operators_recorder_may_watch_every_registered_kind_and_no_more(default_objects):
    # The recorder follows runs of every registered kind (roots and their children), read-only.
    granted = rules_of(default_objects, "taugate-operator")
    for k in KINDS:
        for verb in ("get", "list", "watch"):
            assert allowed(granted, verb, k.group, k.resource), (verb, k.kind)
        assert not any(allowed(granted, verb, k.group, k.resource) for verb in WRITE_VERBS), k.kind
    for group, _, resource in CHILD_RESOURCES:  # members of no registered kind (a Deployment's ReplicaSets)
        assert all(allowed(granted, verb, group, resource) for verb in ("get", "list", "watch")), resource
        assert not any(allowed(granted, verb, group, resource) for verb in WRITE_VERBS), resource


def test_the_researcher_role_lets_researchers_submit_and_manage_every_registered_kind(default_objects):
    rules = [(None, r) for r in one(default_objects, "ClusterRole", "tau-researcher-v1")["rules"]]
    for k in KINDS:
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
            assert allowed(rules, verb, k.group, k.resource), (verb, k.resource)
        if k.scale_path:  # kubectl scale, judged as an UPDATE of the replicas
            assert all(allowed(rules, verb, k.group, f"{k.resource}/scale") for verb in ("get", "update", "patch"))
        else:
            assert not allowed(rules, "update", k.group, f"{k.resource}/scale")


def test_the_researcher_role_the_operator_binds_ships_with_the_chart_and_grants_no_cluster_writes(default_objects):
    role = one(default_objects, "ClusterRole", "tau-researcher-v1")
    rules = [(None, r) for r in role["rules"]]
    assert allowed(rules, "create", "ray.io", "rayjobs") and allowed(rules, "get", "", "pods/log")
    assert not allowed(rules, "create", "kueue.x-k8s.io", "localqueues")
    assert not allowed(rules, "patch", "tau.azure.com", "tauruns")
    assert not allowed(rules, "get", "", "secrets")
    operator = one(default_objects, "ClusterRole", "taugate-operator")
    bind = [r for r in operator["rules"] if "bind" in r["verbs"]]
    assert bind and bind[0]["resourceNames"] == ["tau-researcher-v1"]
    assert not find(objects({"researcherRole": {"create": False, "name": "tau-researcher-v1"}}), "ClusterRole",
                    "tau-researcher-v1")

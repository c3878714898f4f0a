"""Researchers read taugate's results in their namespaces: the TauRuns of their runs and the
PolicyReports of the background audit, through the researcher role the operator binds and
through Kubernetes' built-in ``view``/``edit``/``admin`` roles, which aggregate the chart's
``<release>-view`` ClusterRole (as Kyverno aggregates its reports). Aggregation is computed
here as the API server's clusterrole-aggregation controller does, from the built-in roles'
labels and selectors read from Kubernetes' bootstrap policy
(plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go ``ClusterRoles``)."""

from __future__ import annotations

import re

import pytest

from tests.install.chart import allowed, find, objects, one
from tests.upstream import module_dir

READS = ("get", "list", "watch")
WRITES = ("create", "update", "patch", "delete", "deletecollection")
RESULTS = (("tau.azure.com", "tauruns"), ("wgpolicyk8s.io", "policyreports"))


def _builtin_roles() -> dict[str, tuple[dict[str, str], str]]:
    """``{name: (labels, selected label)}`` of Kubernetes' aggregated ``admin``, ``edit``, ``view``."""
    policy = (module_dir("kubernetes", "k8s.io/kubernetes") / "plugin" / "pkg" / "auth" / "authorizer" / "rbac"
              / "bootstrappolicy" / "policy.go").read_text()
    found = {}
    for name, label, selected in re.findall(
            r'ObjectMeta: metav1\.ObjectMeta\{Name: "(admin|edit|view)"'
            r'(?:, Labels: map\[string\]string\{"([^"]+)": "true"\})?\},\s*'
            r'AggregationRule: &rbacv1\.AggregationRule\{\s*ClusterRoleSelectors: \[\]metav1\.LabelSelector\{\s*'
            r'\{MatchLabels: map\[string\]string\{"([^"]+)": "true"\}\}', policy):
        found[name] = ({label: "true"} if label else {}, selected)
    assert set(found) == {"admin", "edit", "view"}, found
    return found


def _aggregated_rules(objs: list[dict], role: str) -> list[tuple[None, dict]]:
    """The rules the built-in ClusterRole ``role`` holds once the chart's ClusterRoles are
    installed: every ClusterRole whose labels match its selector, transitively (``view`` is
    labelled into ``edit``, ``edit`` into ``admin``)."""
    builtin = _builtin_roles()
    roles = [(o["metadata"].get("labels") or {}, o.get("rules") or [], None) for o in find(objs, "ClusterRole")]
    roles += [(labels, [], name) for name, (labels, _) in builtin.items()]
    rules: list[tuple[None, dict]] = []
    seen: set[str] = set()

    def collect(name: str) -> None:
        seen.add(name)
        selected = builtin[name][1]
        for labels, own, inner in roles:
            if labels.get(selected) == "true":
                rules.extend((None, r) for r in own)
                if inner and inner not in seen:
                    collect(inner)

    collect(role)
    return rules


@pytest.mark.parametrize("role", ["view", "edit", "admin"])
def test_whoever_may_view_edit_or_administer_a_namespace_may_read_its_runs_and_policy_reports(default_objects,
                                                                                                 role):
    rules = _aggregated_rules(default_objects, role)
    for group, resource in RESULTS:
        assert all(allowed(rules, verb, group, resource, namespace="vision") for verb in READS), (role, resource)


def test_the_aggregated_role_only_reads_namespaced_results(default_objects):
    view = one(default_objects, "ClusterRole", "taugate-view")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    rules = [(None, r) for r in view["rules"]]
    assert not any(allowed(rules, verb, group, resource) for verb in WRITES for group, resource in RESULTS)
    assert {(g, r) for rule in view["rules"] for g in rule["apiGroups"] for r in rule["resources"]} == set(RESULTS)
    assert not allowed(rules, "get", "wgpolicyk8s.io", "clusterpolicyreports")  # cluster-wide, not a namespace's
    assert not allowed(rules, "get", "tau.azure.com", "quotarequests")


def test_the_researcher_role_reads_the_policy_reports_and_runs_of_its_namespace(default_objects):
    rules = [(None, r) for r in one(default_objects, "ClusterRole", "tau-researcher-v1")["rules"]]
    for group, resource in RESULTS:
        assert all(allowed(rules, verb, group, resource) for verb in READS), resource
        assert not any(allowed(rules, verb, group, resource) for verb in WRITES), resource


def test_aggregation_can_be_turned_off_and_then_view_gains_nothing():
    objs = objects({"aggregateToView": False})
    assert not find(objs, "ClusterRole", "taugate-view")
    assert not any(allowed(_aggregated_rules(objs, "view"), "get", group, resource) for group, resource in RESULTS)

"""taugate's policy library (``policies/``) as Kyverno ValidatingPolicies, and Kyverno's own install
objects from its pinned module (``tests/e2e/gomod/kyverno``).

Why ValidatingPolicy (``policies.kyverno.io/v1``, CEL) rather than a ClusterPolicy validate rule
(JMESPath): the library's shared part (``bench/gatekeeper/lib.rego``: the pod templates of a RayJob,
RayCluster or Job with their field paths and replica arithmetic, GPUs per pod with the native
sidecar and init container rules, the workload profile as "the named one, else the first that fits")
is a chain of derived values. A ValidatingPolicy's ``variables`` are named CEL expressions that
build on each other, so ``lib.yaml`` is that chain written once, the same way Rego's rules build on
each other, and each policy's ``violations`` reads it; ClusterPolicy rules would need the chain
redone in JMESPath ``context`` and ``foreach`` per rule. ValidatingPolicy is also the policy type
Kyverno's CEL engine evaluates in admission, in one webhook call for every policy with the same
match (Kyverno's webhook controller aggregates them on ``/vpol/<policies>``).

Kyverno evaluates a policy's CEL on the admission request's ``object`` (after every mutating
webhook); it has no workload profile resolution, node summary or Kueue quota in its input. So, as
for Gatekeeper (``bench/gatekeeper``):

- ``lib.yaml`` (variables every policy starts with) derives the pod templates, pods and GPUs per
  pod from the object, as ``taugate/policy_input.py`` does and as ``lib.rego`` does for Gatekeeper;
- the cluster facts taugate reads live are ``bench.gatekeeper.parameters()`` (computed once from
  ``examples/cluster.yaml`` with taugate's own snapshot code), frozen into each policy as its first
  variable, ``params`` (a CEL literal): the Constraint parameters of the Gatekeeper translation;
- the profile is the one the object's ``tau.azure.com/workload-profile`` label names, else the
  smallest of the workspace's applicable profiles whose ``gpusPerWorker`` holds the largest pod.

``TRANSLATED`` lists the policies translated (one ValidatingPolicy each, ``<policy>.yaml``: its own
variables ending with ``violations``, the list of messages Rego's ``violation`` set holds; the
policy denies, or warns for ``head-without-gpu`` as ``policies/enforcement.yaml`` ships it, when
that list is not empty); ``NOT_TRANSLATED`` the others and why (Gatekeeper's). The policies match
what the Gatekeeper Constraints match: RayJob/RayCluster (``ray.io``) and batch Jobs in namespaces
labelled ``tau.azure.com/workspace``, on CREATE and UPDATE.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import yaml

from bench import gatekeeper
from tests import upstream
from tests.paths import REPO

HERE = Path(__file__).resolve().parent
GOMOD = REPO / "tests" / "e2e" / "gomod" / "kyverno" / "go.mod"
MODULE = "github.com/kyverno/kyverno"
NAMESPACE = "kyverno"
WORKSPACE_LABEL = gatekeeper.WORKSPACE_LABEL
TRANSLATED = gatekeeper.TRANSLATED
"""The same policies as the Gatekeeper translation, one ValidatingPolicy each (``<policy>.yaml``)."""
NOT_TRANSLATED = gatekeeper.NOT_TRANSLATED
ENFORCEMENT = {"head-without-gpu": "Warn"}
"""As ``policies/enforcement.yaml`` ships it: validationActions, else Deny."""
CA_SECRET = "kyverno-svc.kyverno.svc.kyverno-tls-ca"
TLS_SECRET = "kyverno-svc.kyverno.svc.kyverno-tls-pair"
"""The Secrets the release manifest's admission controller reads its CA and serving pair from."""
WEBHOOK_LABEL = "webhook.kyverno.io/managed-by"
"""The label Kyverno's webhook controller puts on every webhook configuration it registers."""


def version() -> str:
    """The Kyverno version pinned in ``tests/e2e/gomod/kyverno/go.mod``."""
    return upstream.pinned("kyverno")[1]


def _root() -> Path:
    return upstream.module_dir("kyverno")


@functools.cache
def _install() -> list[dict]:
    """Kyverno's release manifest from its module (``config/install-latest-testing.yaml``)."""
    return [d for d in yaml.safe_load_all((_root() / "config" / "install-latest-testing.yaml").read_text()) if d]


def crds() -> list[dict]:
    """Kyverno's CRDs from its module's ``config/crds`` (kyverno.io, policies.kyverno.io,
    reports.kyverno.io), without the Policy Reports working group's ``wgpolicyk8s.io`` ones, which
    taugate's chart installs from the same files."""
    out = []
    for path in sorted((_root() / "config" / "crds").rglob("*.yaml")):
        if path.parent.name == "policyreport":
            continue
        out += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "CustomResourceDefinition"]
    return out


def config_maps() -> list[dict]:
    """The admission controller's ConfigMaps as the release manifest ships them (``kyverno``:
    resource filters, the webhooks' namespace selector, ...; ``kyverno-metrics``: the metrics'
    exposure and bucket bounds)."""
    return [copy.deepcopy(d) for d in _install() if d["kind"] == "ConfigMap"]


def _admission_controller() -> dict:
    for d in _install():
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "kyverno-admission-controller":
            return copy.deepcopy(d["spec"]["template"]["spec"]["containers"][0])
    raise RuntimeError("Kyverno's release manifest has no kyverno-admission-controller Deployment")


def admission_controller_args() -> list[str]:
    """The admission controller's arguments in the release manifest's Deployment."""
    return list(_admission_controller()["args"])


def admission_controller_env(namespace: str, pod: str) -> dict[str, str]:
    """The admission controller's environment in the release manifest's Deployment, for a process:
    the field references resolved (``metadata.namespace`` to ``namespace``, ``metadata.name`` to
    ``pod``, the pod name being its identity in the leader election)."""
    fields = {"metadata.namespace": namespace, "metadata.name": pod}
    out = {}
    for e in _admission_controller().get("env") or []:
        if "value" in e:
            out[e["name"]] = str(e["value"])
        else:
            out[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return out


def cel_literal(value: Any) -> str:
    """``value`` (JSON data) as a CEL literal. Every list element and map value is wrapped in
    ``dyn()``: Kubernetes' CEL environment wants homogeneous aggregate literals, and the
    parameters mix strings, numbers and null."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: dyn({cel_literal(v)})" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(f"dyn({cel_literal(v)})" for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are CEL's in a double-quoted string
    raise TypeError(f"no CEL literal for {type(value).__name__}")


def _variables(name: str) -> list[dict]:
    return [{"name": v["name"], "expression": v["expression"]} for v in yaml.safe_load((HERE / name).read_text())]


def policies() -> list[dict]:
    """One ValidatingPolicy per ``TRANSLATED`` policy (``taugate-<policy>``): variables ``params``
    (the frozen cluster facts), ``lib.yaml``'s, then the policy's own (``<policy>.yaml``), and one
    validation, that ``violations`` is empty, whose message is every violation's; matching what
    the Gatekeeper Constraints match; validationActions from ``ENFORCEMENT`` (else Deny),
    failurePolicy Fail."""
    params = {"name": "params", "expression": cel_literal(gatekeeper.parameters())}
    lib = _variables("lib.yaml")
    out = []
    for policy in TRANSLATED:
        own = _variables(f"{policy}.yaml")
        if own[-1]["name"] != "violations":
            raise RuntimeError(f"bench/kyverno/{policy}.yaml does not end with the variable violations")
        out.append({
            "apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": f"taugate-{policy}"},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": ["ray.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                         "resources": ["rayjobs", "rayclusters"]},
                        {"apiGroups": ["batch"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                         "resources": ["jobs"]}],
                    "namespaceSelector": {"matchExpressions": [{"key": WORKSPACE_LABEL, "operator": "Exists"}]}},
                "failurePolicy": "Fail",
                "validationActions": [ENFORCEMENT.get(policy, "Deny")],
                "variables": [params, *lib, *own],
                "validations": [{"expression": "size(variables.violations) == 0",
                                 "messageExpression": "variables.violations.map(m, string(m)).join('; ')"}]}})
    return out

"""Helpers for the install tests: render the chart, read objects, and check what
``kubernetes-validate`` does not (enums, ranges, label-selector semantics).

Rendering is ``helm_python.Chart.load(dir).render(values, name=, namespace=, is_install=True)``
(Helm's own engine through helm-python-sdk: the output of ``helm template``); it is ~1 ms, so the
tests render freely. Objects are plain dicts as ``yaml.safe_load`` reads them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import helm_python
import yaml

REPO = Path(__file__).resolve().parents[2]
# TAUGATE_CHART_DIR: test another copy of the chart (an unpacked package, a work in progress).
CHART = Path(os.environ.get("TAUGATE_CHART_DIR") or REPO / "charts" / "taugate")
RELEASE = "taugate"
NAMESPACE = "taugate-system"

# The variants the issue names: the defaults, cert-manager certificates, and high availability
# (more replicas, hard anti-affinity, monitoring objects on).
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "cert-manager": {"certs": {"mode": "cert-manager"}},
    "cert-manager-cluster-issuer": {"certs": {"mode": "cert-manager",
                                              "certManager": {"issuerRef": {"name": "platform-ca",
                                                                            "kind": "ClusterIssuer"}}}},
    "high-availability": {
        "webhook": {"replicas": 3, "antiAffinity": "hard", "podDisruptionBudget": {"maxUnavailable": 1},
                    "failurePolicyOverrides": {"validate-tau": "Fail"}},
        "priorityClass": {"create": False, "name": "system-cluster-critical"},
        "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
        "networkPolicy": {"webhookFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
    },
    "opa-sidecar": {"webhook": {"opa": {"enabled": True}}},
}

KUBERNETES_VERSIONS = ("1.30.0", "1.35.0")


@lru_cache(maxsize=1)
def chart() -> helm_python.Chart:
    """The chart, loaded once per test session (``Chart`` objects are immutable)."""
    return helm_python.Chart.load(CHART)


# taugate publishes no image, so every install names the one the platform built and pushed
# (docs/install.md); the chart refuses to render without it.
IMAGE_REPOSITORY = "registry.example.com/platform/taugate"


def install_values(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """``values`` with ``image.repository`` set to ``IMAGE_REPOSITORY`` where they name none, as
    every install must set it."""
    values = dict(values or {})
    values["image"] = {"repository": IMAGE_REPOSITORY, **(values.get("image") or {})}
    return values


def render(values: dict[str, Any] | None = None, *, namespace: str = NAMESPACE, name: str = RELEASE) -> dict[str, str]:
    """``{template path: manifest text}`` of a fresh install with ``values`` (``install_values``).
    Raises ``helm_python.HelmValuesError`` (schema) or ``HelmRenderError`` (a template's ``fail``)."""
    return chart().render(install_values(values), name=name, namespace=namespace, is_install=True)


_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser: 10x faster


class StrictLoader(_BASE_LOADER):  # type: ignore[valid-type,misc]
    """``yaml.SafeLoader`` that rejects a mapping with a repeated key. The API server's decoder
    rejects those too, and a template whitespace slip that glues two documents together (a
    ``-}}`` eating the newline before ``---``) shows up as exactly that; plain ``safe_load``
    would silently keep the last value."""


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_documents(text: str) -> list[dict]:
    """The non-empty YAML documents of ``text``, read with ``StrictLoader``."""
    return [doc for doc in yaml.load_all(text, Loader=StrictLoader) if doc]


def objects(values: dict[str, Any] | None = None, **kw: Any) -> list[dict]:
    """Every Kubernetes object a fresh install creates (templates only; CRDs: ``crds()``)."""
    out = []
    for path, text in sorted(render(values, **kw).items()):
        if not path.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        out.extend(load_documents(text))
    return out


def crds() -> list[dict]:
    """The CustomResourceDefinitions in the chart's ``crds/`` folder (Helm installs them first)."""
    docs = []
    for entry in chart().crds:
        docs.extend(load_documents(entry["data"]))
    return docs


def find(objs: Iterable[dict], kind: str, name: str | None = None) -> list[dict]:
    """Objects of ``kind`` (and ``metadata.name`` when given)."""
    return [o for o in objs if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs: Iterable[dict], kind: str, name: str | None = None) -> dict:
    """The single object of ``kind``/``name``; AssertionError when there are none or several."""
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def hook_events(obj: dict) -> set[str]:
    """The ``helm.sh/hook`` events of an object (empty for an ordinary release object)."""
    value = (obj["metadata"].get("annotations") or {}).get("helm.sh/hook", "")
    return {e.strip() for e in value.split(",") if e.strip()}


def routes_file() -> list[dict]:
    """``charts/taugate/files/routes.json`` as the templates read it."""
    return json.loads((CHART / "files" / "routes.json").read_text())["routes"]


# --- label selectors (Kubernetes semantics: every matchLabels pair and every expression must hold) --

def selector_matches(selector: dict | None, labels: dict[str, str]) -> bool:
    """Whether a ``metav1.LabelSelector`` selects an object with ``labels``. An empty or absent
    selector selects everything (Kubernetes rule for webhook namespaceSelector). Raises
    ``ValueError`` for an unknown operator, so a typo cannot pass as "no match"."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            raise ValueError(f"unknown label selector operator {op!r}")
        if not ok:
            return False
    return True


def namespace_labels(name: str, **extra: str) -> dict[str, str]:
    """A Namespace's labels as the API server sets them: ``kubernetes.io/metadata.name`` is always
    the name (Kubernetes >= 1.22, NamespaceDefaultLabelName), plus ``extra``."""
    return {"kubernetes.io/metadata.name": name, **extra}


# --- enums and ranges kubernetes-validate does not check ------------------------------------------

OPERATIONS = {"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}


def webhook_configuration_problems(obj: dict) -> list[str]:
    """Problems in a Mutating/ValidatingWebhookConfiguration that the API server would reject
    (admissionregistration.k8s.io/v1 validation) or that break taugate's safety rules; [] if none.

    API rules: failurePolicy Fail|Ignore; matchPolicy Exact|Equivalent; sideEffects
    None|NoneOnDryRun (v1); timeoutSeconds 1..30; reinvocationPolicy Never|IfNeeded (mutating
    only); admissionReviewVersions includes v1; webhook names unique and fully qualified (at least
    three DNS labels); rule operations from CREATE/UPDATE/DELETE/CONNECT/*; rule scope
    Cluster|Namespaced|*; at most 64 matchConditions with unique names. Safety rules: no
    subresource but ``x/scale`` (judged as an UPDATE of the replicas, ``webhook/scale.py``; never
    ``x/status``) and no wildcard resource in rules.
    """
    problems: list[str] = []
    kind = obj["kind"]
    names = [w.get("name", "") for w in obj.get("webhooks") or []]
    if len(names) != len(set(names)):
        problems.append(f"{kind}: duplicate webhook names {names}")
    for w in obj.get("webhooks") or []:
        where = f"{kind}/{obj['metadata']['name']} webhook {w.get('name')!r}"
        if len(w.get("name", "").split(".")) < 3:
            problems.append(f"{where}: name is not fully qualified")
        if w.get("failurePolicy", "Fail") not in ("Fail", "Ignore"):
            problems.append(f"{where}: failurePolicy {w.get('failurePolicy')!r} not Fail|Ignore")
        if w.get("matchPolicy", "Equivalent") not in ("Exact", "Equivalent"):
            problems.append(f"{where}: matchPolicy {w.get('matchPolicy')!r} not Exact|Equivalent")
        if w.get("sideEffects") not in ("None", "NoneOnDryRun"):
            problems.append(f"{where}: sideEffects {w.get('sideEffects')!r} not None|NoneOnDryRun")
        timeout = w.get("timeoutSeconds", 10)
        if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30:
            problems.append(f"{where}: timeoutSeconds {timeout!r} not an integer in 1..30")
        if kind == "MutatingWebhookConfiguration":
            if w.get("reinvocationPolicy", "Never") not in ("Never", "IfNeeded"):
                problems.append(f"{where}: reinvocationPolicy {w.get('reinvocationPolicy')!r} not Never|IfNeeded")
        elif "reinvocationPolicy" in w:
            problems.append(f"{where}: reinvocationPolicy is a mutating-webhook field")
        if "v1" not in (w.get("admissionReviewVersions") or []):
            problems.append(f"{where}: admissionReviewVersions lacks v1")
        problems += _rule_problems(w, where)
        conditions = w.get("matchConditions") or []
        cnames = [c.get("name") for c in conditions]
        if len(conditions) > 64 or len(cnames) != len(set(cnames)):
            problems.append(f"{where}: matchConditions must be at most 64 with unique names")
    return problems


JUDGED_SUBRESOURCES = frozenset({"pods/ephemeralcontainers"})
"""The subresources taugate judges (``kubectl debug``'s containers, for device access); no other."""


def _rule_problems(webhook: dict, where: str) -> list[str]:
    """A webhook's rules: operations, scope, and no subresource but ``scale``, no wildcard resource."""
    problems: list[str] = []
    for rule in webhook.get("rules") or []:
        if not set(rule.get("operations") or []) <= OPERATIONS or not rule.get("operations"):
            problems.append(f"{where}: operations {rule.get('operations')} not from {sorted(OPERATIONS)}")
        if rule.get("scope", "*") not in ("Cluster", "Namespaced", "*"):
            problems.append(f"{where}: scope {rule.get('scope')!r} not Cluster|Namespaced|*")
        for res in rule.get("resources") or []:
            if "*" in res or ("/" in res and res not in JUDGED_SUBRESOURCES
                                    and not (res.count("/") == 1 and res.endswith("/scale"))):
                problems.append(f"{where}: resource {res!r} is a subresource or wildcard")
    return problems


def pod_spec(obj: dict) -> dict | None:
    """The pod spec of a Deployment, Job or CronJob (None for other kinds)."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    if obj["kind"] in ("Deployment", "Job", "CronJob"):
        return spec["template"]["spec"]
    return None


def workload_problems(obj: dict) -> list[str]:
    """Enum/consistency problems in a Deployment/Job/CronJob's pod template that schema validation
    misses: restartPolicy (Never|OnFailure for Jobs, Kubernetes batch rule), imagePullPolicy,
    probe ports that name no container port, a Deployment selector that does not select its own
    pod template (the API server rejects it), and containers that may run as root."""
    spec = pod_spec(obj)
    if spec is None:
        return []
    where = f"{obj['kind']}/{obj['metadata']['name']}"
    problems = []
    if obj["kind"] in ("Job", "CronJob") and spec.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append(f"{where}: restartPolicy {spec.get('restartPolicy')!r} not Never|OnFailure")
    if obj["kind"] == "Deployment":
        template_labels = obj["spec"]["template"]["metadata"].get("labels") or {}
        if not selector_matches(obj["spec"]["selector"], template_labels) or not obj["spec"]["selector"]:
            problems.append(f"{where}: selector does not select the pod template")
    pod_sc = spec.get("securityContext") or {}
    for c in spec.get("containers") or []:
        if c.get("imagePullPolicy", "IfNotPresent") not in ("Always", "IfNotPresent", "Never"):
            problems.append(f"{where}/{c['name']}: imagePullPolicy {c.get('imagePullPolicy')!r}")
        port_names = {p.get("name") for p in c.get("ports") or []}
        port_numbers = {p.get("containerPort") for p in c.get("ports") or []}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            get = (c.get(probe) or {}).get("httpGet")
            if get and get["port"] not in port_names | port_numbers:
                problems.append(f"{where}/{c['name']}: {probe} port {get['port']!r} is not a container port")
            if get and get.get("scheme", "HTTP") not in ("HTTP", "HTTPS"):
                problems.append(f"{where}/{c['name']}: {probe} scheme {get.get('scheme')!r}")
        sc = {**pod_sc, **(c.get("securityContext") or {})}
        if not sc.get("runAsNonRoot") or sc.get("runAsUser", 1) == 0 or sc.get("allowPrivilegeEscalation", True):
            problems.append(f"{where}/{c['name']}: may run as root or escalate privileges")
    return problems


# --- RBAC (Kubernetes RBAC authorizer semantics, enough for the chart's rules) --------------------

def rules_of(objs: list[dict], service_account: str, namespace: str = NAMESPACE) -> list[tuple[str | None, dict]]:
    """``(namespace or None for cluster-wide, rule)`` for every rule granted to the ServiceAccount
    through the rendered (Cluster)RoleBindings. A roleRef to a role the chart does not render
    raises ``AssertionError`` (the binding would grant nothing, or something unreviewed)."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objs if o["kind"] in ("Role", "ClusterRole")}
    granted = []
    for binding in objs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == service_account and s.get("namespace") == namespace
                   for s in binding.get("subjects") or []):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        key = (ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])
        assert key in roles, f"{binding['kind']}/{binding['metadata']['name']} refers to {key}, not rendered"
        granted.extend((scope, rule) for rule in roles[key].get("rules") or [])
    return granted


def allowed(granted: list[tuple[str | None, dict]], verb: str, group: str, resource: str,
            name: str | None = None, namespace: str | None = None) -> bool:
    """Whether any granted rule allows ``verb`` on ``group``/``resource`` (``resource/sub`` for a
    subresource), object ``name``, in ``namespace`` (None: cluster-scoped or all namespaces).
    Kubernetes rules: ``*`` matches anything; resourceNames restrict to those names, and a request
    without a name (list, watch, create) never matches a rule that has resourceNames."""
    for scope, rule in granted:
        if scope is not None and scope != namespace:
            continue
        if not (set(rule.get("verbs") or []) & {verb, "*"}):
            continue
        if not (set(rule.get("apiGroups") or []) & {group, "*"}):
            continue
        if not (set(rule.get("resources") or []) & {resource, "*"}):
            continue
        names = rule.get("resourceNames") or []
        if names and (name is None or name not in names):
            continue
        return True
    return False

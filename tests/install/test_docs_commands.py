"""The kubectl commands in docs/ are commands kubectl accepts, and the chart's `up`-based alerts
exist only where their `up` series can (with the ServiceMonitor)."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.install.chart import REPO, objects, one

DOCS = {path.name: path.read_text() for path in sorted((REPO / "docs").glob("*.md"))}
# kubectl verbs that take resources as `TYPE[,TYPE...] [NAME...]` or `TYPE/NAME...` (kubectl's
# resource builder; mixing the two forms is an error, "there is no need to specify a resource
# type as a separate argument when passing arguments in resource/name form").
RESOURCE_VERBS = {"get", "delete", "describe", "edit", "label", "annotate"}
# Flags whose value is the next argument (`-n NS`); every other flag stands alone or uses `=`.
VALUE_FLAGS = {"-n", "--namespace", "-l", "--selector", "-o", "--output", "-f", "--filename", "-c", "--container",
               "--context", "--kubeconfig", "--field-selector", "--tail", "-L", "--label-columns", "--from",
               "--from-file", "--type", "--timeout"}
# Resource type names and short names; a NAME that is one of these means a type was meant.
TYPE_WORDS = {
    "pod", "pods", "po", "deploy", "deployment", "deployments", "svc", "service", "services", "secret", "secrets",
    "pvc", "persistentvolumeclaim", "persistentvolumeclaims", "pv", "configmap", "configmaps", "cm", "job", "jobs",
    "cronjob", "cronjobs", "cj", "ns", "namespace", "namespaces", "node", "nodes", "no", "sa", "serviceaccount",
    "serviceaccounts", "pdb", "poddisruptionbudget", "endpointslices", "ingress", "networkpolicy", "netpol",
    "crd", "crds", "customresourcedefinition", "customresourcedefinitions", "mutatingwebhookconfiguration",
    "validatingwebhookconfiguration", "certificate", "certificates", "rayjob", "rayjobs", "raycluster", "rayclusters",
    "taucluster", "tauclusters", "tauworkspace", "tauworkspaces", "taurun", "tauruns", "localqueue", "localqueues",
    "clusterqueue", "clusterqueues", "priorityclass", "role", "rolebinding", "clusterrole", "clusterrolebinding",
}


def kubectl_commands(markdown: str) -> list[str]:
    """Every `kubectl ...` command of a Markdown text: in code blocks (continuation lines joined,
    up to a pipe, `;`, `)` or a comment) and in inline code spans."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, re.M | re.S)
    inline = re.findall(r"`(kubectl [^`]+)`", re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S))
    found = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            found += [m.strip() for m in re.findall(r"\bkubectl (?:[^|;)#]|#(?!\s))+", line)]
    return found + [c.strip() for c in inline]


def resource_arguments(command: str) -> tuple[str, list[str]] | None:
    """(verb, resource arguments) of a kubectl command with a resource verb, else None."""
    words = shlex.split(command)[1:]
    positional, i = [], 0
    while i < len(words):
        w = words[i]
        if w.startswith("-"):
            i += 2 if w in VALUE_FLAGS else 1
            continue
        positional.append(w)
        i += 1
    if not positional or positional[0] not in RESOURCE_VERBS:
        return None
    if positional[0] in ("label", "annotate"):  # KEY=VALUE and KEY- are the changes, not resources
        positional = [w for w in positional if "=" not in w and not w.endswith("-")]
    return positional[0], positional[1:]


def shape_problem(command: str) -> str | None:
    """Why kubectl would refuse (or misread) the resource arguments of ``command``, or None."""
    parsed = resource_arguments(command)
    if parsed is None:
        return None
    verb, args = parsed
    if "-f" in shlex.split(command) or "--filename" in shlex.split(command):
        return "a file and resource arguments together" if args else None
    if not args:
        return f"`kubectl {verb}` without a resource"
    slashed = [a for a in args if "/" in a]
    if slashed and len(slashed) != len(args):
        return f"TYPE/NAME mixed with a separate type: {args}"
    if not slashed:
        names = args[1:]
        meant_types = [n for n in names if n.lower() in TYPE_WORDS]
        if meant_types:
            return f"{meant_types} would be read as names of {args[0]}, not as types (use TYPE/NAME)"
    return None


def test_the_docs_hold_kubectl_commands_to_check():
    commands = [c for text in DOCS.values() for c in kubectl_commands(text)]
    assert len(commands) >= 15
    assert any(resource_arguments(c) and resource_arguments(c)[0] == "delete" for c in commands)


@pytest.mark.parametrize("command, problem", [
    ("kubectl -n taugate-system get deploy/taugate-webhook pods -l app=x -o wide", "TYPE/NAME mixed"),
    ("kubectl -n taugate-system delete pvc taugate-evidence secret taugate-evidence-key", "would be read as names"),
    ("kubectl -n taugate-system delete pvc/taugate-evidence secret/taugate-evidence-key", None),
    ("kubectl get mutatingwebhookconfiguration,validatingwebhookconfiguration taugate", None),
    ("kubectl delete -f charts/taugate/crds/", None),
    ("kubectl annotate tauquotarequest q -n tau-platform tau.azure.com/approved=true", None),
    ("kubectl annotate tauquotarequest q -n tau-platform tau.azure.com/approved-", None),
    ("kubectl annotate tauquotarequest/q rayjob a=b", "TYPE/NAME mixed"),
])
def test_the_kubectl_shape_check_catches_the_mistakes_it_is_for(command, problem):
    found = shape_problem(command)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_every_kubectl_command_in_the_docs_has_a_shape_kubectl_accepts(doc):
    problems = [f"{c}: {p}" for c in kubectl_commands(DOCS[doc]) if (p := shape_problem(c))]
    assert problems == []


def _alerts(values: dict) -> set[str]:
    rule = one(objects(values), "PrometheusRule")
    return {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}


def test_the_up_based_alerts_are_rendered_only_with_the_service_monitor():
    up_alerts = {"TaugateWebhookDown", "TaugateWebhookDegraded"}
    with_monitor = _alerts({"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}})
    without = _alerts({"metrics": {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": True}}})
    assert up_alerts <= with_monitor and not (up_alerts & without)
    assert with_monitor - without == up_alerts  # every other alert stays
    webhook_down = DOCS["metrics.md"].split("TaugateWebhookDown", 1)[1].split("| alert |")[0]
    assert "metrics.serviceMonitor.enabled" in webhook_down

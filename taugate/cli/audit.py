"""``taugate policy audit`` and ``taugate policy what-if``: a policy set's effect on the workloads
that exist, before it is enforced (like ``gator`` and Kyverno's background scan, offline).

``taugate policy audit --cluster SNAPSHOT [-f OBJECTS ...] [-o yaml|json|table]`` judges every
governed workload (``taugate.kinds.KINDS``) in the ``-f`` files and in the snapshot itself, as it
is stored (``taugate.webhook.audit``), and prints the PolicyReports the operator would write: one
``wgpolicyk8s.io/v1alpha2`` PolicyReport per namespace and the ClusterPolicyReport. Exit 1 when
any result fails (a violation under ``deny`` or ``dryrun``, or a policy that fails at run time),
0 otherwise, 2 for bad input (one line on stderr naming the file and the problem).

``taugate policy what-if DIR [--current CURRENT] [--cluster SNAPSHOT | --kubeconfig FILE]
[-f OBJECTS ...] [-o text|json]`` audits the same workloads (the snapshot's and the files', or
with no ``--cluster`` every governed workload of the live cluster the kubeconfig reaches) with
the policy set in ``DIR`` and with the current one (``CURRENT``, default the bundled
``policies/``), and prints per namespace and policy what ``DIR`` would deny, warn or find under
``dryrun`` that the current set does not (a ``dryrun`` or ``warn`` result is what the policy would
deny once enforced as ``deny``), and what it would stop enforcing. Exit 1 when ``DIR`` would deny
a workload (or fail on one) that the current set does not, 0 when it denies nothing new (new
warnings or dry-run results only, or nothing), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import groupby
from pathlib import Path
from typing import Any

import yaml

from taugate.cli.admit import BadInput, read_inputs
from taugate.kubeaccess import KubeError
from taugate.policy_report import Change, Reports, WorkloadAudit, build_reports, what_if, workload_resources
from taugate.settings import Settings
from taugate.snapshot import ClusterState, SnapshotError, build_state, load_snapshot, read_objects
from taugate.state_objects import STATE_RESOURCES, trim, usable_objects
from taugate.webhook.audit import PolicyAuditor, governed, governed_kinds
from taugate.webhook.policy.engine import PolicyError
from taugate.webhook.policy_tests import default_policy_dir


def _auditor(policies: str | Path | None, enforcement: str | None, settings: Settings) -> PolicyAuditor:
    """The auditor of a policy folder; raises ``BadInput`` when the set does not load."""
    from taugate.webhook.engines import load_policy_engine

    folder = Path(policies) if policies else default_policy_dir()
    if not folder.is_dir():
        raise BadInput(f"{folder}: no such policy folder")
    try:
        return PolicyAuditor(load_policy_engine(folder, enforcement=enforcement), settings)
    except PolicyError as e:
        raise BadInput(str(e)) from None


def _file_workloads(paths: list[str] | None) -> list[dict]:
    """The governed workloads of the ``-f`` files; raises ``BadInput`` for a file that cannot be
    read or holds no workload of a governed kind."""
    out: list[dict] = []
    for path in paths or []:
        found = governed(o for _, o in read_inputs([path]))
        if not found:
            raise BadInput(f"{path}: no workload of a kind taugate governs ({governed_kinds()}) in the file")
        out += found
    return out


def _snapshot(path: str, settings: Settings) -> tuple[ClusterState, list[dict]]:
    """The cluster state of a snapshot file and the governed workloads it holds."""
    try:
        return load_snapshot(path, settings), governed(read_objects(path))
    except SnapshotError as e:
        raise BadInput(str(e)) from None


def read_live(reader: Any, settings: Settings) -> tuple[ClusterState, list[dict]]:
    """The cluster state and every governed workload of a live cluster, read through ``reader``
    (an ``ApiReader`` such as ``taugate.kube.Kube``). A resource the cluster does not
    serve (HTTP 404: KubeRay not installed) holds no workload. Raises ``KubeError``."""
    state_objects = []
    for res in STATE_RESOURCES:
        try:
            items, _ = reader.list_with_version(res)
        except KubeError as e:
            if e.status == 404:
                continue
            raise
        state_objects += [trim(res, o) for o in items]
    usable, _ = usable_objects(state_objects, settings.system_namespace)
    workloads: list[dict] = []
    for res in workload_resources():
        try:
            workloads += reader.list_with_version(res)[0]
        except KubeError as e:
            if e.status != 404:
                raise
    return build_state(usable, settings, source="the live cluster"), workloads


def _cluster(args: argparse.Namespace, settings: Settings) -> tuple[ClusterState, list[dict]]:
    if getattr(args, "cluster", None):
        return _snapshot(args.cluster, settings)
    from taugate.cli import clients  # the API client: only for a live cluster

    try:
        return read_live(clients.cluster_reader(kubeconfig=args.kubeconfig, context=args.context), settings)
    except (KubeError, ValueError) as e:
        raise BadInput(f"{args.kubeconfig or 'the kubeconfig'}: {str(e).splitlines()[0]}") from None


def render_table(reports: Reports) -> str:
    """One line per result (namespace, result, action, policy, workload, field, message), then
    the summary, as ``kubectl get policyreports`` would count it."""
    lines = []
    for ns, report in reports.namespaced.items():
        for r in report["results"]:
            ref = r["resources"][0]
            lines.append(f"{ns}\t{r['result']}\t{r['properties']['action']}\t{r['policy']}\t"
                         f"{ref['kind']}/{ref['name']}\t{r['properties']['field'] or '-'}\t{r['message']}")
    s = reports.cluster["summary"]
    head = "NAMESPACE\tRESULT\tACTION\tPOLICY\tWORKLOAD\tFIELD\tMESSAGE"
    return "\n".join([head, *lines, f"summary: {s['pass']} pass, {s['fail']} fail, {s['warn']} warn, "
                                    f"{s['error']} error in {len(reports.namespaced)} namespace(s)"])


def _cmd_audit(args: argparse.Namespace) -> int:
    settings = Settings()
    try:
        state, workloads = _snapshot(args.cluster, settings)
        workloads += _file_workloads(args.file)
        auditor = _auditor(args.policies, args.enforcement, settings)
    except BadInput as e:
        print(str(e), file=sys.stderr)
        return 2
    reports = build_reports(auditor.audit(workloads, state), digest=auditor.digest)
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": reports.all()}, indent=2))
    elif args.output == "table":
        print(render_table(reports))
    else:
        print(yaml.safe_dump_all(reports.all(), sort_keys=False), end="")
    return 1 if reports.failing else 0


_ONCE_ENFORCED = {"dryrun": "; would deny once enforced as deny", "warn": "; would deny once enforced as deny"}


def render_what_if(enforced: list[Change], relieved: list[Change], audited: list[WorkloadAudit]) -> str:
    """The what-if report: per namespace and policy, each workload the proposed set would deny,
    warn or fail on that the current set does not (and what a ``dryrun`` or ``warn`` policy would
    deny once enforced as ``deny``), then what it would stop enforcing."""
    namespaces = len({a.namespace for a in audited})
    lines = [f"audited {len(audited)} workload(s) in {namespaces} namespace(s)"]
    for ns, in_ns in groupby(enforced, key=lambda c: c.namespace):
        lines.append(f"namespace {ns}:")
        for policy, changes in groupby(in_ns, key=lambda c: c.policy):
            found = list(changes)
            lines.append(f"  {policy}: would {'/'.join(sorted({c.action for c in found}))} "
                         f"{len({c.workload for c in found})} workload(s) that it does not today")
            lines += [f"    {c.action} {c.workload} {c.field or '-'}: {c.message} (today: {c.before}"
                      f"{_ONCE_ENFORCED.get(c.action, '')})" for c in found]
    if relieved:
        lines.append("no longer enforced:")
        lines += [f"  {c.namespace} {c.policy} {c.workload} {c.field or '-'}: {c.action} today, {c.before} with the "
                  f"change" for c in relieved]
    denials = sum(c.action in ("deny", "error") for c in enforced)
    warnings = sum(c.action == "warn" for c in enforced)
    dryrun = len(enforced) - denials - warnings
    lines.append(f"summary: {denials} new denial(s), {warnings} new warning(s), {dryrun} new dry-run result(s); "
                 f"{dryrun + warnings} would deny once enforced as deny; {len(relieved)} result(s) no longer enforced")
    return "\n".join(lines)


def _cmd_what_if(args: argparse.Namespace) -> int:
    settings = Settings()
    try:
        proposed = _auditor(args.dir, args.enforcement, settings)
        current = _auditor(args.current, args.current_enforcement, settings)
        state, workloads = _cluster(args, settings)
        workloads += _file_workloads(args.file)
    except BadInput as e:
        print(str(e), file=sys.stderr)
        return 2
    after = proposed.audit(workloads, state)
    enforced, relieved = what_if(current.audit(workloads, state), after)
    if args.output == "json":
        print(json.dumps({"proposedDigest": proposed.digest, "currentDigest": current.digest,
                          "workloads": len(after), "enforced": [vars(c) for c in enforced],
                          "relieved": [vars(c) for c in relieved]}, indent=2))
    else:
        print(render_what_if(enforced, relieved, after))
    return 1 if any(c.action in ("deny", "error") for c in enforced) else 0


def add_audit_commands(sub: Any) -> None:
    """Register ``policy audit`` and ``policy what-if`` on the ``policy`` command's subparsers."""
    a = sub.add_parser("audit", help="judge existing workloads and print their PolicyReports (offline)",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    a.add_argument("--cluster", required=True, help="cluster snapshot; its own workloads are audited too")
    a.add_argument("-f", "--file", action="append", help="workloads to audit (YAML/JSON, a directory, -); repeatable")
    a.add_argument("-o", "--output", choices=("yaml", "json", "table"), default="yaml")
    a.add_argument("--policies", help="policy folder (default: the bundled policies/)")
    a.add_argument("--enforcement", help="enforcement file (default: POLICIES/enforcement.yaml)")
    a.set_defaults(func=_cmd_audit)

    w = sub.add_parser("what-if", help="what a changed policy folder would deny or warn that the current one does not",
                       description=__doc__.split("\n\n")[2] if __doc__ else None)
    w.add_argument("dir", help="the changed policy folder")
    w.add_argument("--current", help="the policy folder in force (default: the bundled policies/)")
    w.add_argument("--enforcement", help="enforcement file of DIR (default: DIR/enforcement.yaml)")
    w.add_argument("--current-enforcement", help="enforcement file of CURRENT (default: CURRENT/enforcement.yaml)")
    w.add_argument("--cluster", help="cluster snapshot (default: the live cluster of the kubeconfig)")
    w.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    w.add_argument("--context", help="kubeconfig context")
    w.add_argument("-f", "--file", action="append", help="more workloads to judge (YAML/JSON); repeatable")
    w.add_argument("-o", "--output", choices=("text", "json"), default="text")
    w.set_defaults(func=_cmd_what_if)

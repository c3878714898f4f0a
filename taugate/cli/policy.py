"""``taugate policy test`` (like ``opa test`` plus Gatekeeper's ``gator verify``: the ``test_``
rules, then every sample admitted through ``webhook.review.admit``, the webhook's own path) and
``taugate policy eval`` (one object: the input document and each policy's result). A disallowed
sample passes when its policy reports it under any enforcement, an allowed one when it reports
nothing. Exit 0 passed or allowed, 1 a failure or denied, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from taugate.access import metadata_of
from taugate.kinds import KINDS, kind_for
from taugate.settings import Settings
from taugate.snapshot import SnapshotError, load_snapshot, read_objects
from taugate.webhook.decision import Decision, Violation
from taugate.webhook.engines import load_policy_engine
from taugate.webhook.policy.engine import PolicyError, RecordingEngine, explain
from taugate.webhook.policy_tests import (
    default_cluster,
    default_cluster_candidates,
    default_policy_dir,
    render_report,
    run_policy_tests,
)


def _cmd_test(args: argparse.Namespace) -> int:
    root = Path(args.dir) if args.dir else default_policy_dir()
    if not root.is_dir():
        print(f"{root}: no such policy folder", file=sys.stderr)
        return 2
    if args.cluster and not Path(args.cluster).is_file():
        print(f"{args.cluster}: no such cluster snapshot", file=sys.stderr)
        return 2
    cluster = Path(args.cluster) if args.cluster else default_cluster(root)
    if cluster is None:
        looked = " or ".join(str(c) for c in default_cluster_candidates(root))
        print(f"{root}: no cluster snapshot to admit the samples against (looked for {looked}); "
              f"pass --cluster SNAPSHOT", file=sys.stderr)
        return 2
    report = run_policy_tests(root, cluster=cluster)
    print(render_report(report, verbose=args.verbose))
    return 0 if report.ok else 1


def evaluated_kinds() -> str:
    """The kinds taugate evaluates, for messages: ``RayJob (ray.io/v1), ... and Job (batch/v1)``."""
    names = [f"{k.kind} ({k.api_version})" for k in KINDS]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def _eval_problem(objects: list[dict]) -> str | None:
    """Why ``objects`` (a file's content) cannot be evaluated, or None: exactly one object, with
    ``apiVersion`` and ``kind``, of a registered workload kind (``taugate.kinds``)."""
    if not objects:
        return "no Kubernetes object in the file (policy eval needs exactly one)"
    if len(objects) != 1:
        return f"expected one object, found {len(objects)}"
    obj = objects[0]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
        return "the object has no apiVersion and kind, so it is not a Kubernetes object"
    if kind_for(api_version, kind) is None:
        return (f"{kind} ({api_version}) is not a kind taugate evaluates; it evaluates "
                f"{evaluated_kinds()}")
    return None


def _cmd_eval(args: argparse.Namespace) -> int:
    from taugate.webhook.review import admit

    settings = Settings()
    try:
        state = load_snapshot(args.cluster, settings)
        if Path(args.file).is_file() and Path(args.file).stat().st_size == 0:
            # read_objects fails on a 0-byte file (taugate.snapshot, lead's module): say it here.
            print(f"{args.file}: empty file, no Kubernetes object in it (policy eval needs exactly one)",
                  file=sys.stderr)
            return 2
        objects = read_objects(args.file)
    except SnapshotError as e:
        print(str(e), file=sys.stderr)
        return 2
    problem = _eval_problem(objects)
    if problem:
        print(f"{args.file}: {problem}", file=sys.stderr)
        return 2
    obj = objects[0]
    try:
        engine = load_policy_engine(args.policies or default_policy_dir(), enforcement=args.enforcement)
    except PolicyError as e:
        print(str(e), file=sys.stderr)
        return 2
    rec = RecordingEngine(engine)
    namespace = args.namespace or metadata_of(obj).get("namespace")
    decision = admit(obj, state=state, settings=settings, engine=rec, namespace=namespace)
    doc = rec.inputs[-1] if rec.inputs else None
    per_policy, failed = explain(engine, doc) if doc is not None else ({}, {})
    if args.output == "json":
        text = json.dumps({"allowed": decision.allowed, "input": doc, "digest": engine.digest,
                           "results": {p: [v.as_dict() for v in vs] for p, vs in per_policy.items() if p not in failed},
                           "failed": failed,
                           "violations": [v.as_dict() for v in decision.violations],
                           "warnings": decision.warnings}, indent=2)
    else:
        text = _render_eval(decision, doc, per_policy, failed, engine.digest)
    code = 0 if decision.allowed else 1
    print(text)
    return code


def _render_eval(decision: Decision, doc: dict | None, per_policy: dict[str, list[Violation]], failed: dict[str, str],
                 digest: str) -> str:
    lines = []
    if doc is None:
        lines.append("policies were not evaluated (the object is not in a workspace, or its workload profile or "
                     "queue could not be resolved)")
    else:
        lines.append("input document:")
        lines += ["  " + line for line in json.dumps(doc, indent=2).splitlines()]
        lines.append(f"policy results (policy set {digest[:12]}):")
        for name, found in per_policy.items():
            if name in failed:
                lines.append(f"  {name}: failed at run time: {failed[name]}")
            elif not found:
                lines.append(f"  {name}: pass")
            for v in found:
                lines.append(f"  {name}: {v.action}: {v.field}: {v.message}")
    lines.append(f"decision: {'allowed' if decision.allowed else 'denied'}")
    for v in decision.violations:
        lines.append(f"  - {v.render()}")
    for w in decision.warnings:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def _cmd_render_cel(args: argparse.Namespace) -> int:
    """``policy render-cel``: the policy and its binding as YAML documents (``kubectl apply -f -``)."""
    import yaml

    from taugate import admission_policy

    sys.stdout.write(yaml.safe_dump_all(admission_policy.documents(Settings()), sort_keys=False, width=120))
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``policy test``, ``policy eval``, and ``policy audit`` and ``policy what-if``
    (``taugate/cli/audit.py``) on the ``taugate`` parser's subparsers."""
    policy = subparsers.add_parser("policy", help="test and evaluate the Rego policy library")
    sub = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    policy.set_defaults(func=lambda args: (policy.print_help(sys.stderr), 2)[1])

    t = sub.add_parser("test", help="run every test_ rule and every sample (like opa test + gator verify)")
    t.add_argument("dir", nargs="?", help="policy folder (default: the bundled policies/)")
    t.add_argument("--cluster", help="cluster snapshot for samples (default: DIR/../examples/cluster.yaml)")
    t.add_argument("-v", "--verbose", action="store_true", help="list passing tests and samples too")
    t.set_defaults(func=_cmd_test)

    e = sub.add_parser("eval", help="admit one object and show the policy input and every policy's result")
    e.add_argument("-f", "--file", required=True, help="the object (YAML or JSON)")
    e.add_argument("--cluster", required=True, help="cluster snapshot (TauCluster, TauWorkspaces, Nodes, queues)")
    e.add_argument("-n", "--namespace", help="namespace (default: the object's metadata.namespace)")
    e.add_argument("--policies", help="policy folder (default: the bundled policies/)")
    e.add_argument("--enforcement", help="enforcement file (default: POLICIES/enforcement.yaml)")
    e.add_argument("-o", "--output", choices=("text", "json"), default="text")
    e.set_defaults(func=_cmd_eval)

    c = sub.add_parser("render-cel", help="print the ValidatingAdmissionPolicy and binding that keep taugate's core "
                                          "rule in the API server, from TAUGATE_* settings (the operator installs "
                                          "them)")
    c.set_defaults(func=_cmd_render_cel)

    from taugate.cli.audit import add_audit_commands

    add_audit_commands(sub)

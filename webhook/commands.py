"""``taugate admit`` and the registration of the webhook's other subcommands.

``taugate admit -f FILE|DIR|- [-f ...] --cluster SNAPSHOT [-n NAMESPACE] [-o yaml|json|patch]
[--old STORED] [--as USER]`` runs every RayJob, RayCluster and Job in the files through mutation then
validation, offline (an UPDATE of the stored objects in ``--old``, matched by kind and name, when given),
like ``kyverno apply`` or ``gator test``: it prints the admitted objects (``-o patch``: a JSON
array with one ``{file, kind, name, namespace, patch}`` per admitted workload), or the denial.
Exit 0 when everything is allowed, 1 when anything is denied, 2 on bad input
(one line on stderr naming the file and the problem). Other kinds are printed unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import orjson
import yaml

from taugate.files import InputError, expand_paths
from taugate.kinds import kind_for
from taugate.settings import Settings
from taugate.shape import json_problem
from taugate.snapshot import SnapshotError, load_snapshot, read_objects
from taugate.webhook.policy_set import PolicyError


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def load_engine(args: argparse.Namespace, settings: Settings):
    """The policy engine for ``--policies``/``--enforcement`` (None with ``--no-policies``).
    Raises the engine's ``PolicyError`` when the library does not load."""
    if getattr(args, "no_policies", False):
        return None
    from taugate.webhook.engines import load_policy_engine

    return load_policy_engine(args.policies or settings.policy_dir, enforcement=args.enforcement)


def cmd_admit(args: argparse.Namespace) -> int:
    """Handler of ``taugate admit``; returns the exit code."""
    from taugate.webhook.review import admit

    settings = Settings()
    try:
        state = load_snapshot(args.cluster, settings)
    except SnapshotError as e:
        _err(f"taugate: {e}")
        return 2
    inputs: list[tuple[str, dict]] = []
    try:
        files = expand_paths(args.file)
    except InputError as e:
        _err(f"taugate: {e}")
        return 2
    if files.count("-") > 1:
        _err("taugate: -f - (standard input) given more than once")
        return 2
    for f in files:
        label_f = "standard input" if f == "-" else f
        try:
            objs = read_objects(f)
        except SnapshotError as e:
            _err(f"taugate: {e}")
            return 2
        if not objs:
            _err(f"taugate: {label_f}: no Kubernetes object in the file")
            return 2
        for o in objs:
            problem = json_problem(o)
            if problem:
                _err(f"taugate: {label_f}: {problem}")
                return 2
            try:  # as the API server would hold it: timestamps as strings, keys as strings
                o = orjson.loads(orjson.dumps(o, default=str, option=orjson.OPT_NON_STR_KEYS))
            except TypeError as e:
                _err(f"taugate: {label_f}: not representable as JSON ({e})")
                return 2
            if not isinstance(o.get("kind"), str) or not isinstance(o.get("apiVersion"), str):
                _err(f"taugate: {f}: an object has no kind/apiVersion strings")
                return 2
            inputs.append((label_f, o))
    stored: dict[tuple[str, str], dict] = {}
    if args.old:
        try:
            olds = read_objects(args.old)
        except SnapshotError as e:
            _err(f"taugate: {e}")
            return 2
        for o in olds:
            meta = o.get("metadata") if isinstance(o.get("metadata"), dict) else {}
            stored[(str(o.get("kind")), str(meta.get("name")))] = orjson.loads(orjson.dumps(o, default=str))
    try:
        engine = load_engine(args, settings)
    except PolicyError as e:  # one line: file, line, reason
        _err(f"taugate: policies: {e}")
        return 2
    status = 0
    out_docs: list = []
    for f, obj in inputs:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = str(meta.get("name") or f"{meta.get('generateName') or ''}*")
        label = f"{obj['kind']} {name if len(name) <= 80 else name[:77] + '...'}"
        if kind_for(obj.get("apiVersion"), obj.get("kind")) is None:
            _err(f"{f}: {label}: not a kind taugate admits; unchanged")
            if args.output != "patch":
                out_docs.append(obj)
            continue
        own = meta.get("namespace")
        if args.namespace and own and own != args.namespace:
            _err(f"taugate: {f}: {label} is in namespace {own!r}, which does not match -n {args.namespace!r}")
            return 2
        ns = args.namespace or own
        if not isinstance(ns, str) or not ns:
            _err(f"taugate: {f}: {label} has no metadata.namespace; pass -n NAMESPACE")
            return 2
        if state.workspace_for(ns) is None:
            _err(f"{f}: {label}: namespace {ns!r} is not a workspace ({', '.join(sorted(state.workspaces)) or 'none'}); unchanged")
        old = None
        if args.old:
            old = stored.get((obj["kind"], str(meta.get("name"))))
            if old is None:
                _err(f"taugate: {f}: {label}: no {obj['kind']} named {meta.get('name')!r} in --old {args.old}; an UPDATE "
                     f"needs the stored object")
                return 2
        user = {"username": args.as_user, "groups": []} if args.as_user else None
        decision = admit(obj, state=state, settings=settings, engine=engine, namespace=ns,
                         operation="UPDATE" if old is not None else "CREATE", old=old, user_info=user)
        for w in decision.warnings:
            _err(f"Warning: {w}")
        if not decision.allowed:
            _err(f"{f}: {label} denied: {decision.message}")
            status = 1
            continue
        if args.output == "patch":
            out_docs.append({"file": f, "kind": obj["kind"], "name": name, "namespace": ns,
                             "patch": decision.patch or []})
        else:
            out_docs.append(decision.object)
    if args.output == "json":
        print(json.dumps(out_docs[0] if len(out_docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": out_docs}, indent=2))
    elif args.output == "patch":
        print(json.dumps(out_docs, indent=2))
    elif out_docs:
        sys.stdout.write(yaml.safe_dump_all(out_docs, sort_keys=False))
    return status


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``admit``, and ``serve`` and ``policy`` from their modules."""
    p = sub.add_parser("admit", help="run mutation and validation on objects offline",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("-f", "--file", action="append", required=True,
                   help="YAML/JSON file, - for standard input, or a directory (its *.yaml, *.yml and *.json "
                        "files, recursively); repeatable")
    p.add_argument("--cluster", required=True, help="cluster snapshot YAML (see examples/cluster.yaml)")
    p.add_argument("-n", "--namespace", help="namespace to admit into (default: the object's)")
    p.add_argument("-o", "--output", choices=("yaml", "json", "patch"), default="yaml")
    p.add_argument("--policies", type=Path, help="policy library directory (default: the bundled policies/)")
    p.add_argument("--enforcement", help="enforcement YAML: policy name -> deny|warn|dryrun")
    p.add_argument("--no-policies", action="store_true", help="built-in checks only")
    p.add_argument("--old", help="the stored objects (YAML/JSON): admit the files as an UPDATE of the object of the "
                                 "same kind and name, as a controller or kubectl sends it")
    p.add_argument("--as", dest="as_user", help="the requesting user (e.g. system:serviceaccount:kube-system:"
                                                "generic-garbage-collector); default taugate-cli")
    p.set_defaults(func=cmd_admit)
    for module in ("taugate.webhook.serve_commands", "taugate.webhook.policy_commands"):
        try:
            mod = __import__(module, fromlist=["add_commands"])
        except ModuleNotFoundError as e:
            if e.name == module:
                continue
            raise
        mod.add_commands(sub)

"""``taugate admit`` and the registration of the webhook's other subcommands.

``taugate admit -f FILE|DIR|- [-f ...] --cluster SNAPSHOT|live [-n NAMESPACE] [-o yaml|json|patch]
[--old STORED] [--as USER]`` runs every workload of a kind taugate governs (docs/kinds.md) and every
DRA claim in the files through mutation then validation, offline against a snapshot (an UPDATE of the
stored objects in ``--old``, matched by kind and name, when given), like ``kyverno apply`` or
``gator test``; with ``--cluster live``, through the live cluster the kubeconfig reaches as a
server-side dry run (every webhook, Kueue's included, RBAC and quota as the user's own request;
nothing stored). It prints the admitted objects (``-o patch``: a JSON array with one
``{file, kind, name, namespace, patch}`` per admitted object), or the denial. Exit 0 when
everything is allowed, 1 when anything is denied, 2 on bad input (one line on stderr naming the
file and the problem). Other kinds are printed unchanged.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import jsonpatch
import orjson
import yaml

from taugate.access import metadata_of
from taugate.files import InputError, expand_paths
from taugate.kinds import group_of, kind_for
from taugate.kubeaccess import KubeError, Resource
from taugate.settings import Settings
from taugate.snapshot import ClusterState, SnapshotError, load_snapshot, read_objects
from taugate.structure import json_problem
from taugate.unmanaged import unmanaged_kind_for
from taugate.webhook.policy.sets import PolicyError

if TYPE_CHECKING:  # annotations only: the CLI imports the decision code when it admits
    from taugate.webhook.decision import Decision


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def load_engine(args: argparse.Namespace, settings: Settings):
    """The policy engine for ``--policies``/``--enforcement`` (None with ``--no-policies``).
    Raises the engine's ``PolicyError`` when the library does not load."""
    if getattr(args, "no_policies", False):
        return None
    from taugate.webhook.engines import load_policy_engine

    return load_policy_engine(args.policies or settings.policy_dir, enforcement=args.enforcement)


class BadInput(Exception):
    """Input ``taugate admit`` cannot use: the message is the one stderr line, the exit code 2."""


def read_inputs(paths: list[str]) -> list[tuple[str, dict]]:
    """The objects in the ``-f`` files as ``(file label, object)``, each as the API server would
    hold it (timestamps and keys as strings). Raises ``BadInput`` for a file that cannot be read,
    holds no object, or an object that is not JSON or has no kind/apiVersion strings."""
    try:
        files = expand_paths(paths)
    except InputError as e:
        raise BadInput(f"taugate: {e}") from e
    if files.count("-") > 1:
        raise BadInput("taugate: -f - (standard input) given more than once")
    inputs: list[tuple[str, dict]] = []
    for f in files:
        label_f = "standard input" if f == "-" else f
        try:
            objs = read_objects(f)
        except SnapshotError as e:
            raise BadInput(f"taugate: {e}") from e
        if not objs:
            raise BadInput(f"taugate: {label_f}: no Kubernetes object in the file")
        for o in objs:
            problem = json_problem(o)
            if problem:
                raise BadInput(f"taugate: {label_f}: {problem}")
            try:  # as the API server would hold it: timestamps as strings, keys as strings
                o = orjson.loads(orjson.dumps(o, default=str, option=orjson.OPT_NON_STR_KEYS))
            except TypeError as e:
                raise BadInput(f"taugate: {label_f}: not representable as JSON ({e})") from e
            if not isinstance(o.get("kind"), str) or not isinstance(o.get("apiVersion"), str):
                raise BadInput(f"taugate: {f}: an object has no kind/apiVersion strings")
            inputs.append((label_f, o))
    return inputs


def _read_stored(path: str | None) -> dict[tuple[str, str], dict]:
    """The ``--old`` objects by ``(kind, name)`` (empty without ``--old``). Raises ``BadInput``
    when the file cannot be read."""
    if not path:
        return {}
    try:
        olds = read_objects(path)
    except SnapshotError as e:
        raise BadInput(f"taugate: {e}") from e
    return {(str(o.get("kind")), str(metadata_of(o).get("name"))): orjson.loads(orjson.dumps(o, default=str))
            for o in olds}


def _namespace(args: argparse.Namespace, f: str, label: str, meta: dict) -> str:
    """The namespace to admit into: ``-n``, else the object's. Raises ``BadInput`` when they
    differ or neither is given."""
    own = meta.get("namespace")
    if args.namespace and own and own != args.namespace:
        raise BadInput(f"taugate: {f}: {label} is in namespace {own!r}, which does not match -n {args.namespace!r}")
    ns = args.namespace or own
    if not isinstance(ns, str) or not ns:
        raise BadInput(f"taugate: {f}: {label} has no metadata.namespace; pass -n NAMESPACE")
    return ns


def _admit_one(args: argparse.Namespace, f: str, obj: dict, stored: dict[tuple[str, str], dict],
               state: ClusterState, decide: Callable[..., Decision]) -> tuple[bool, dict | None]:
    """Admit one object read from file ``f`` with ``decide`` (``review.admit`` bound to the state,
    settings and engine): ``(allowed, what to print)``, what to print being the admitted object,
    its patch entry, the object unchanged when it is not a kind taugate admits, or None (a denial,
    written to stderr, or a non-workload under ``-o patch``). Raises ``BadInput`` for a namespace
    or ``--old`` problem."""
    meta = metadata_of(obj)
    name = str(meta.get("name") or f"{meta.get('generateName') or ''}*")
    label = f"{obj['kind']} {name if len(name) <= 80 else name[:77] + '...'}"
    if kind_for(obj.get("apiVersion"), obj.get("kind")) is None and \
            unmanaged_kind_for(group_of(str(obj.get("apiVersion") or "")), obj.get("kind")) is None:
        _err(f"{f}: {label}: not a kind taugate admits; unchanged")
        return True, None if args.output == "patch" else obj
    ns = _namespace(args, f, label, meta)
    if state.workspace_for(ns) is None:
        _err(f"{f}: {label}: namespace {ns!r} is not a workspace "
             f"({', '.join(sorted(state.workspaces)) or 'none'}); unchanged")
    old = None
    if args.old:
        old = stored.get((obj["kind"], str(meta.get("name"))))
        if old is None:
            raise BadInput(f"taugate: {f}: {label}: no {obj['kind']} named {meta.get('name')!r} in --old "
                            f"{args.old}; an UPDATE needs the stored object")
    user = {"username": args.as_user, "groups": []} if args.as_user else None
    decision = decide(obj, namespace=ns, operation="UPDATE" if old is not None else "CREATE", old=old,
                      user_info=user)
    for w in decision.warnings:
        _err(f"Warning: {w}")
    if not decision.allowed:
        _err(f"{f}: {label} denied: {decision.message}")
        return False, None
    if args.output == "patch":
        return True, {"file": f, "kind": obj["kind"], "name": name, "namespace": ns, "patch": decision.patch or []}
    return True, decision.object


_DRA_KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass")
"""The DRA kinds ``taugate admit`` takes from its input (``_admit_dra``)."""


def _admit_dra(args: argparse.Namespace, f: str, obj: dict, state: ClusterState,
               settings: Settings) -> tuple[bool, dict | None, ClusterState]:
    """A DRA object of the input (a claim template, a claim, a DeviceClass): judged as the webhook
    judges it (``webhook.claims``) and, when allowed, added to the state for the documents after it,
    as the API server would store it before the workload that names it. ``(allowed, what to print,
    the state for the next document)``."""
    from taugate.webhook.review import request_for, validate

    meta = metadata_of(obj)
    label = f"{obj['kind']} {meta.get('name')}"
    ns = "" if obj["kind"] == "DeviceClass" else _namespace(args, f, label, meta)
    decision = validate(request_for(obj, namespace=ns or None), state, settings)
    if not decision.allowed:
        _err(f"{f}: {label} denied: {decision.message}")
        return False, None, state
    doc = None if args.output == "patch" else obj
    return True, doc, state.with_dra_object(obj, ns)


def _print(out_docs: list, output: str) -> None:
    """Print the admitted documents in ``-o`` format (one JSON object or a List, a JSON array of
    patch entries, or a YAML stream)."""
    if output == "json":
        doc = out_docs[0] if len(out_docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": out_docs}
        print(json.dumps(doc, indent=2))
    elif output == "patch":
        print(json.dumps(out_docs, indent=2))
    elif out_docs:
        sys.stdout.write(yaml.safe_dump_all(out_docs, sort_keys=False))


LIVE = "live"
"""``--cluster live``: admit through the live cluster (``_admit_live``)."""
_DRA_RESOURCES = {"ResourceClaimTemplate": Resource("resource.k8s.io", "v1", "resourceclaimtemplates",
                                                    "ResourceClaimTemplate", True),
                  "ResourceClaim": Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
                  "DeviceClass": Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)}


def _live_resource(obj: dict) -> Resource | None:
    """The REST resource of an input object of a kind ``taugate admit`` takes, else None."""
    group = group_of(str(obj.get("apiVersion") or ""))
    version = str(obj.get("apiVersion") or "").rpartition("/")[2]
    if group == "resource.k8s.io" and obj.get("kind") in _DRA_RESOURCES:
        return _DRA_RESOURCES[obj["kind"]]
    kind = kind_for(obj.get("apiVersion"), obj.get("kind")) or unmanaged_kind_for(group, obj.get("kind"))
    if kind is None or kind.version != version:
        return None
    return Resource(kind.group, kind.version, kind.resource, kind.kind, True)


def _admit_live(args: argparse.Namespace, inputs: list[tuple[str, dict]]) -> int:
    """``--cluster live``: each object as a server-side dry run through the cluster of
    ``--kubeconfig`` (``Kube.dry_run``), in file order, as the user's own request: what the API
    server would store (after every mutating webhook), its warnings, or its denial (a webhook's,
    RBAC's or a schema's message). Nothing is stored, so a workload naming a claim template of the
    same input needs the template to exist in the cluster."""
    if args.old or args.as_user:
        _err("taugate: --cluster live takes the stored objects and the user from the cluster; "
             "--old and --as are for snapshots")
        return 2
    from taugate.cli import clients  # the API client: only for a live cluster

    try:
        reader = clients.cluster_reader(kubeconfig=args.kubeconfig, context=args.context)
    except ValueError as e:
        _err(f"taugate: {args.kubeconfig or 'the kubeconfig'}: {str(e).splitlines()[0]}")
        return 2
    status, out_docs = 0, []
    try:
        for f, obj in inputs:
            meta = metadata_of(obj)
            name = str(meta.get("name") or f"{meta.get('generateName') or ''}*")
            label = f"{obj['kind']} {name}"
            res = _live_resource(obj)
            if res is None:
                _err(f"{f}: {label}: not a kind taugate admits; unchanged")
                out_docs += [] if args.output == "patch" else [obj]
                continue
            sent = dict(obj, metadata=dict(meta, namespace=_namespace(args, f, label, meta))) if res.namespaced \
                else obj
            try:
                admitted, warnings = reader.dry_run(res, sent)
                admitted = dict(admitted, metadata={k: v for k, v in metadata_of(admitted).items()
                                                    if k != "managedFields"})  # as kubectl hides them
            except KubeError as e:
                if e.status in (0, 401) or e.status >= 500:
                    raise
                for w in e.warnings:
                    _err(f"Warning: {w}")
                _err(f"{f}: {label} denied: {e}")
                status = 1
                continue
            for w in warnings:
                _err(f"Warning: {w}")
            if args.output == "patch":
                out_docs.append({"file": f, "kind": obj["kind"], "name": metadata_of(admitted).get("name") or name,
                                 "namespace": metadata_of(admitted).get("namespace"),
                                 "patch": jsonpatch.make_patch(sent, admitted).patch})
            else:
                out_docs.append(admitted)
    except BadInput as e:
        _err(str(e))
        return 2
    except KubeError as e:  # unreachable, unauthenticated, a server error: nothing was judged
        _err(f"taugate: --cluster live: {str(e).splitlines()[0]}")
        return 2
    finally:
        reader.close()
    _print(out_docs, args.output)
    return status


def cmd_admit(args: argparse.Namespace) -> int:
    """Handler of ``taugate admit``; returns the exit code (0 all allowed, 1 any denied, 2 bad
    input)."""
    from taugate.webhook.review import admit

    settings = Settings()
    if args.cluster == LIVE:
        try:
            inputs = read_inputs(args.file)
        except BadInput as e:
            _err(str(e))
            return 2
        return _admit_live(args, inputs)
    try:
        state = load_snapshot(args.cluster, settings)
        inputs = read_inputs(args.file)
        stored = _read_stored(args.old)
        engine = load_engine(args, settings)
    except SnapshotError as e:
        _err(f"taugate: {e}")
        return 2
    except PolicyError as e:  # one line: file, line, reason
        _err(f"taugate: policies: {e}")
        return 2
    except BadInput as e:
        _err(str(e))
        return 2

    status = 0
    out_docs: list = []
    for f, obj in inputs:
        decide = functools.partial(admit, state=state, settings=settings, engine=engine)
        try:
            if obj.get("kind") in _DRA_KINDS and group_of(str(obj.get("apiVersion") or "")) == "resource.k8s.io":
                allowed, doc, state = _admit_dra(args, f, obj, state, settings)
            else:
                allowed, doc = _admit_one(args, f, obj, stored, state, decide)
        except BadInput as e:
            _err(str(e))
            return 2
        if not allowed:
            status = 1
        if doc is not None:
            out_docs.append(doc)
    _print(out_docs, args.output)
    return status


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``admit``."""
    p = sub.add_parser("admit", help="run mutation and validation on objects, offline or as a live dry run",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("-f", "--file", action="append", required=True,
                   help="YAML/JSON file, - for standard input, or a directory (its *.yaml, *.yml and *.json "
                        "files, recursively); repeatable")
    p.add_argument("--cluster", required=True,
                   help="cluster snapshot YAML (see examples/cluster.yaml), or 'live': a server-side dry run "
                        "through the cluster of --kubeconfig, as your own request (nothing is stored)")
    p.add_argument("--kubeconfig", help="with --cluster live: kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="with --cluster live: kubeconfig context")
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

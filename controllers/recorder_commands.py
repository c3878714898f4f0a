"""CLI of the recorder: ``taugate status RUN`` and ``taugate evidence show|verify|keygen``.

``add_commands(subparsers)`` registers them (the composition root, ``taugate/cli.py``, calls it
through ``controllers.commands``). ``kubectl tau status RUN`` is the same command through the
``kubectl-tau`` plugin entry point.

- ``taugate status RUN [-n NAMESPACE] [--kubeconfig F] [--context C] [--evidence-root DIR]
  [-o text|json]``: the six states in order, the release lines, the stage a stuck run is in, the
  reason and what to check next. ``RUN`` is a run-id or the name of the run's RayJob/Job. Reads
  the TauRun from the cluster, or the evidence record when ``--evidence-root`` is given.
- ``taugate evidence show RUN [--evidence-root DIR] [--json]``: the evidence record.
- ``taugate evidence verify RUN [--evidence-root DIR] [--public-key PEM]``: the hash chain of
  ``events.jsonl`` and the Ed25519 signature of ``evidence.json``; exit 1 and the first bad
  line when anything was edited.
- ``taugate evidence keygen --out KEY.pem [--public-out PUB.pem]``: a new Ed25519 signing key.

Exit codes: 0 success, 1 a check failed (tampered record), 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from controllers import run_conditions as rc
from controllers.evidence import EvidenceError, EvidenceStore, Signer, check_run_id, load_public_key, verify_record

_LABELS = {rc.COMPLETED: "Completed", rc.FAILED: "Failed"}


def _err(msg: str) -> int:
    print(f"taugate: {msg}", file=sys.stderr)
    return 2


def _default_root() -> Path:
    from controllers.recorder_config import RecorderConfig
    try:
        return RecorderConfig().evidence_root
    except Exception:  # a bad environment value must not break `--evidence-root`
        return Path("/var/lib/taugate/evidence")


def add_commands(subparsers: Any) -> None:
    """Register ``status`` and ``evidence`` on the ``taugate`` argument parser."""
    p = subparsers.add_parser("status", help="where a run stands: its six states, stage and what to check next")
    p.add_argument("run", metavar="RUN", help="run-id (24 hex) or the name of the run's RayJob/Job")
    p.add_argument("-n", "--namespace", help="namespace of the run (default: search all namespaces)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--evidence-root", type=Path, help="read the evidence record under DIR instead of the cluster")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_status)

    ev = subparsers.add_parser("evidence", help="show or verify a run's evidence record")
    sub = ev.add_subparsers(dest="evidence_command", metavar="ACTION")
    show = sub.add_parser("show", help="print a run's evidence record")
    show.add_argument("run", metavar="RUN", help="run-id (24 lowercase hex)")
    show.add_argument("--evidence-root", type=Path, default=None, help="evidence root (default $TAUGATE_RECORDER_EVIDENCE_ROOT)")
    show.add_argument("--json", action="store_true", help="print evidence.json as is")
    show.set_defaults(func=cmd_evidence_show)
    ver = sub.add_parser("verify", help="check the hash chain and the signature; exit 1 on tampering")
    ver.add_argument("run", metavar="RUN", help="run-id (24 lowercase hex)")
    ver.add_argument("--evidence-root", type=Path, default=None, help="evidence root (default $TAUGATE_RECORDER_EVIDENCE_ROOT)")
    ver.add_argument("--public-key", type=Path, help="the recorder's Ed25519 public key (PEM) to pin the signer")
    ver.set_defaults(func=cmd_evidence_verify)
    key = sub.add_parser("keygen", help="write a new Ed25519 evidence signing key (PKCS#8 PEM)")
    key.add_argument("--out", type=Path, required=True, help="private key file to create (mode 0600)")
    key.add_argument("--public-out", type=Path, help="also write the public key (PEM) here")
    key.set_defaults(func=cmd_evidence_keygen)
    ev.set_defaults(func=lambda args: (ev.print_help(sys.stderr), 2)[1])


# --------------------------------------------------------------------------------------------
# status


def _load_kube(args: argparse.Namespace) -> Any:
    import kubernetes.client
    import kubernetes.config

    try:
        if args.kubeconfig or os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().exists():
            cfg = kubernetes.client.Configuration()
            kubernetes.config.load_kube_config(config_file=args.kubeconfig, context=args.context,
                                               client_configuration=cfg)
        else:
            kubernetes.config.load_incluster_config()
            cfg = kubernetes.client.Configuration.get_default_copy()
    except (kubernetes.config.ConfigException, OSError, ValueError, TypeError) as e:
        raise EvidenceError(f"{args.kubeconfig or 'kubeconfig'}: {e}") from None
    return kubernetes.client.ApiClient(cfg)


def _find_taurun(args: argparse.Namespace) -> dict:
    import kubernetes.client
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    from taugate import labels

    with _load_kube(args) as api_client:
        co = kubernetes.client.CustomObjectsApi(api_client)
        try:
            if args.namespace:
                items = co.list_namespaced_custom_object(labels.GROUP, labels.VERSION, args.namespace, "tauruns")
            else:
                items = co.list_cluster_custom_object(labels.GROUP, labels.VERSION, "tauruns")
        except ApiException as e:
            raise EvidenceError(f"cannot list TauRuns: {e.status} {e.reason}") from None
        except (HTTPError, OSError) as e:
            raise EvidenceError(f"cannot reach the Kubernetes API: {e}") from None
    runs = [r for r in (items or {}).get("items") or [] if isinstance(r, dict)]
    if args.namespace:
        runs = [r for r in runs if (r.get("metadata") or {}).get("namespace") in (args.namespace, None)]
    by_id = [r for r in runs if (r.get("metadata") or {}).get("name") == args.run]
    by_obj = [r for r in runs if ((r.get("spec") or {}).get("object") or {}).get("name") == args.run]
    found = by_id or by_obj
    if not found:
        where = f"namespace {args.namespace}" if args.namespace else "any namespace"
        raise EvidenceError(f"no TauRun for {args.run!r} in {where}")
    if len(found) > 1:
        names = ", ".join(f"{(r['metadata'] or {}).get('namespace')}/{r['metadata']['name']}" for r in found)
        raise EvidenceError(f"{args.run!r} matches several runs ({names}); pass the run-id or -n NAMESPACE")
    return found[0]


def _from_evidence(root: Path, run: str) -> dict:
    """A TauRun-shaped view of an evidence record (for ``status --evidence-root``)."""
    store = EvidenceStore(root)
    if not rc.RUN_ID_RE.match(run):
        matches = []
        for rid in store.run_ids():
            doc = store.read_document(rid)
            if (doc.get("object") or {}).get("name") == run:
                matches.append(rid)
        if len(matches) != 1:
            raise EvidenceError(f"{root}: {'no' if not matches else 'more than one'} evidence record for {run!r}")
        run = matches[0]
    doc = store.read_document(run)
    conds = [{k: v for k, v in c.items() if k != "recordedAt"} for c in doc.get("conditions") or []]
    return {"metadata": {"name": doc.get("runId") or run, "namespace": doc.get("namespace")},
            "spec": {"runId": doc.get("runId"), "object": doc.get("object") or {}, "workspace": doc.get("workspace"),
                     "queue": doc.get("queue"), "profile": doc.get("profile")},
            "status": {"phase": doc.get("phase"), "conditions": conds, "failures": doc.get("failures") or []}}


def _src(src: Any) -> str:
    if not isinstance(src, dict):
        return ""
    if src.get("path"):
        return f"{src.get('kind')} {src['path']}"
    ns = f"{src['namespace']}/" if src.get("namespace") else ""
    return f"{src.get('kind')} {ns}{src.get('name')}"


def render_status(run: dict) -> str:
    """A TauRun as the text ``taugate status`` prints (pure)."""
    meta, spec, status = run.get("metadata") or {}, run.get("spec") or {}, run.get("status") or {}
    conds = status.get("conditions") or []
    by = {c.get("type"): c for c in conds if isinstance(c, dict)}
    obj = spec.get("object") or {}
    lines = [f"Run {meta.get('name')}  {obj.get('kind', '?')} {meta.get('namespace')}/{obj.get('name', '?')}  "
             f"phase {status.get('phase') or rc.phase(conds)}"]
    extra = [f"{k} {spec[k]}" for k in ("workspace", "queue", "profile") if spec.get(k)]
    if extra:
        lines.append("  " + "  ".join(extra))
    lines.append("")
    rows = []
    for i, t in enumerate(rc.STATE_ORDER, 1):
        c = by.get(t) or (by.get(rc.FAILED) if t == rc.COMPLETED else None) or {"type": t, "status": "Unknown", "reason": "NotObserved"}
        rows.append((str(i), c))
    for t in rc.RELEASE_TYPES:
        if t in by:
            rows.append((" ", by[t]))
    for n, c in rows:
        lines.append(f" {n} {c.get('type', ''):<14}{c.get('status', ''):<8}{c.get('reason', ''):<22}"
                     f"{c.get('lastTransitionTime') or '':<21}{c.get('message') or ''}")
        s = _src(c.get("source"))
        if s:
            lines.append(f"   {'':<14}{'':<8}source: {s}")
    d = rc.diagnose(conds, namespace=meta.get("namespace"), run_id=meta.get("name"))
    lines.append("")
    if d.stage == "Done":
        lines.append("Stage: Done (finished; artifacts saved)")
    else:
        lines.append(f"Stage: {d.stage} ({d.summary})")
        lines.append(f"  {d.status} {d.reason}: {d.message}")
    for f in (status.get("failures") or [])[:5]:
        lines.append(f"  failure: {rc.describe_failure(f)}")
    if d.next_checks:
        lines.append("Next:")
        lines.extend(f"  - {h}" for h in d.next_checks)
    return "\n".join(lines) + "\n"


def cmd_status(args: argparse.Namespace) -> int:
    """``taugate status RUN``: 0 when shown, 2 when the run cannot be found or read."""
    try:
        if args.evidence_root is not None:
            run = _from_evidence(args.evidence_root, args.run)
        else:
            run = _find_taurun(args)
    except EvidenceError as e:
        return _err(str(e))
    if args.output == "json":
        d = rc.diagnose((run.get("status") or {}).get("conditions") or [],
                        namespace=(run.get("metadata") or {}).get("namespace"), run_id=(run.get("metadata") or {}).get("name"))
        out = dict(run)
        out["diagnosis"] = {"stage": d.stage, "summary": d.summary, "status": d.status, "reason": d.reason,
                            "message": d.message, "source": d.source, "nextChecks": list(d.next_checks)}
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_status(run))
    return 0


# --------------------------------------------------------------------------------------------
# evidence


def _root(args: argparse.Namespace) -> Path:
    return args.evidence_root if args.evidence_root is not None else _default_root()


def render_evidence(doc: dict) -> str:
    """An evidence document as readable text (pure)."""
    obj = doc.get("object") or {}
    adm = doc.get("admission") or {}
    out = [f"Run {doc.get('runId')}  {obj.get('kind')} {doc.get('namespace')}/{obj.get('name')} (uid {obj.get('uid', '?')})",
           f"  phase {doc.get('phase')}  final {'yes' if doc.get('final') else 'no'}"]
    for k in ("workspace", "queue", "profile", "profileSetHash"):
        if doc.get(k):
            out.append(f"  {k}: {doc[k]}")
    if adm.get("policyDigest"):
        out.append(f"  policyDigest: {adm['policyDigest']}")
    if adm.get("error"):
        out.append(f"  admission record: {adm['error']}")
    if adm.get("changes"):
        out.append("What taugate changed at admission:")
        out.extend(f"  - {c if isinstance(c, str) else json.dumps(c, sort_keys=True)}" for c in adm["changes"])
    if adm.get("decisions"):
        out.append("Policy decisions:")
        out.extend(f"  - {c if isinstance(c, str) else json.dumps(c, sort_keys=True)}" for c in adm["decisions"])
    out.append("Timeline:")
    for c in doc.get("timeline") or []:
        src = _src(c.get("source"))
        out.append(f"  {c.get('recordedAt', ''):<28}{c.get('type', ''):<14}{c.get('status', ''):<8}{c.get('reason', ''):<22}"
                   f"{c.get('message') or ''}" + (f"  [{src}]" if src else ""))
    if doc.get("failures"):
        out.append("Failures:")
        out.extend(f"  - {rc.describe_failure(f)}" for f in doc["failures"])
    art = doc.get("artifacts") or {}
    if art:
        out.append(f"Artifacts under {art.get('root')}:" + (" (index present)" if art.get("index") else ""))
        for f in art.get("files") or []:
            out.append(f"  - {f.get('path')}  {f.get('size')} bytes" + (f"  sha256 {f['sha256']}" if f.get("sha256") else ""))
    ev = doc.get("events") or {}
    sig = doc.get("signature") or {}
    out.append(f"Events: {ev.get('count')}  head {ev.get('head')}")
    out.append(f"Signed: {sig.get('algorithm')} key {sig.get('keyId')}")
    return "\n".join(out) + "\n"


def cmd_evidence_show(args: argparse.Namespace) -> int:
    """``taugate evidence show RUN``: 0 when shown, 2 when missing or unreadable."""
    try:
        check_run_id(args.run)
        store = EvidenceStore(_root(args))
        if args.json:
            path = store.run_dir(args.run) / "evidence.json"
            try:
                sys.stdout.write(path.read_text(encoding="utf-8"))
            except OSError as e:
                raise EvidenceError(f"{path}: {e.strerror}") from None
            return 0
        doc = store.read_document(args.run)
    except EvidenceError as e:
        return _err(str(e))
    sys.stdout.write(render_evidence(doc))
    return 0


def cmd_evidence_verify(args: argparse.Namespace) -> int:
    """``taugate evidence verify RUN``: 0 intact, 1 tampered (first bad line printed), 2 bad input."""
    try:
        check_run_id(args.run)
        key = load_public_key(args.public_key) if args.public_key else None
        result = verify_record(EvidenceStore(_root(args)).run_dir(args.run), key)
    except EvidenceError as e:
        return _err(str(e))
    if result.ok:
        pin = "pinned key" if result.pinned else "key recorded in the file (pass --public-key to pin it)"
        print(f"OK: run {args.run}: {result.events} events, hash chain intact, Ed25519 signature valid "
              f"(key {result.key_id}, {pin})")
        return 0
    print(f"TAMPERED: run {args.run}: {result.problems[0]}")
    return 1


def cmd_evidence_keygen(args: argparse.Namespace) -> int:
    """``taugate evidence keygen --out KEY``: 0 written, 2 when the file exists or cannot be written."""
    signer = Signer.generate()
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _err(f"{args.out}: already exists (not overwritten)")
    except OSError as e:
        return _err(f"{args.out}: {e.strerror}")
    with os.fdopen(fd, "wb") as f:
        f.write(signer.private_pem())
    if args.public_out:
        try:
            Path(args.public_out).write_bytes(signer.public_pem())
        except OSError as e:
            return _err(f"{args.public_out}: {e.strerror}")
    print(f"key {signer.key_id} written to {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run these commands alone (``python -m controllers.recorder_commands``)."""
    parser = argparse.ArgumentParser(prog="taugate")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

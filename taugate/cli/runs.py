"""The recorder's commands: ``taugate status RUN`` (``RUN`` a run-id or the name of its RayJob or
Job; also ``kubectl tau status``) and ``taugate evidence show|verify|keygen``. Exit codes: 0
success, 1 a check failed (a record that exists but is tampered, corrupt or incomplete), 2 bad
input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugate.cli.evidence_view import render_logs, render_repeat
from taugate.controllers.recorder.evidence.records import (
    EvidenceError,
    EvidenceStore,
    Signer,
    Verification,
    check_run_id,
    load_public_key,
    verify_stored,
)
from taugate.controllers.recorder.run.completion import describe_failure
from taugate.controllers.recorder.run.diagnosis import diagnose, phase
from taugate.controllers.recorder.run.values import COMPLETED, FAILED, RELEASE_TYPES, RUN_ID_RE, STATE_ORDER

_LABELS = {COMPLETED: "Completed", FAILED: "Failed"}


def _err(msg: str) -> int:
    print(f"taugate: {msg}", file=sys.stderr)
    return 2


def _default_root() -> str:
    from taugate.controllers.recorder.config import RecorderConfig
    try:
        return RecorderConfig().evidence_root
    except Exception:  # a bad environment value must not break `--evidence-root`
        return "/var/lib/taugate/evidence"


def add_commands(subparsers: Any) -> None:
    """Register ``status`` and ``evidence`` on the ``taugate`` argument parser."""
    p = subparsers.add_parser("status", help="where a run stands: its six states, stage and what to check next")
    p.add_argument("run", metavar="RUN", help="run-id (24 hex) or the name of the run's RayJob/Job")
    p.add_argument("-n", "--namespace", help="namespace of the run (default: search all namespaces)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--evidence-root", metavar="DIR|s3://BUCKET[/PREFIX]",
                   help="read the evidence record there instead of the cluster")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_status)

    ev = subparsers.add_parser("evidence", help="show or verify a run's evidence record")
    sub = ev.add_subparsers(dest="evidence_command", metavar="ACTION")
    show = sub.add_parser("show", help="print a run's evidence record")
    show.add_argument("run", metavar="RUN", help="run-id (24 lowercase hex)")
    show.add_argument("--evidence-root", default=None, metavar="DIR|s3://BUCKET[/PREFIX]",
                      help="evidence root (default $TAUGATE_RECORDER_EVIDENCE_ROOT)")
    show.add_argument("--json", action="store_true", help="print evidence.json as is")
    show.set_defaults(func=cmd_evidence_show)
    ver = sub.add_parser("verify", help="check the hash chain and the signature; exit 1 on tampering")
    ver.add_argument("run", metavar="RUN", help="run-id (24 lowercase hex)")
    ver.add_argument("--evidence-root", default=None, metavar="DIR|s3://BUCKET[/PREFIX]",
                     help="evidence root (default $TAUGATE_RECORDER_EVIDENCE_ROOT)")
    ver.add_argument("--public-key", type=Path, help="the recorder's Ed25519 public key (PEM) to pin the signer")
    ver.set_defaults(func=cmd_evidence_verify)
    key = sub.add_parser("keygen", help="write a new Ed25519 evidence signing key (PKCS#8 PEM)")
    key.add_argument("--out", type=Path, required=True, help="private key file to create (mode 0600)")
    key.add_argument("--public-out", type=Path, help="also write the public key (PEM) here")
    key.set_defaults(func=cmd_evidence_keygen)
    ev.set_defaults(func=lambda args: (ev.print_help(sys.stderr), 2)[1])



def _load_kube(args: argparse.Namespace) -> Any:
    from taugate.kube import Kube, KubeConfigError, load_configuration

    try:
        cfg = load_configuration(in_cluster=None, kubeconfig=args.kubeconfig, context=args.context)
    except KubeConfigError as e:
        outside = "" if args.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST") else \
            ", and not running in a cluster"
        raise EvidenceError(f"{e}{outside}; pass --kubeconfig FILE, or --evidence-root DIR to read an evidence "
                            "record") from None
    return Kube.from_configuration(cfg)


def _find_taurun(args: argparse.Namespace) -> dict:
    from taugate.controllers.recorder.writer import TAU_RUNS
    from taugate.kube import KubeError

    kube = _load_kube(args)
    try:
        runs = kube.list(TAU_RUNS, args.namespace or None)
    except KubeError as e:
        raise EvidenceError(str(e) if e.status == 0 else f"cannot list TauRuns: {e}") from None
    finally:
        kube.close()
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


@dataclass(frozen=True)
class OpenedRecord:
    """An evidence record as read for display: ``doc`` is its summary when it is a JSON object
    (else None), ``raw`` the summary's bytes (None when missing), ``verification`` the result of
    ``controllers.recorder.evidence.records.verify_stored`` (key recorded in the record),
    ``location`` where it is (a directory or an ``s3://`` URL) and ``summary_name`` the summary's
    name there."""

    run_id: str
    location: str
    summary_name: str
    raw: bytes | None
    doc: dict | None
    verification: Verification

    @property
    def warning(self) -> str | None:
        """``WARNING: this evidence record does not verify: <reason>``, or None when it verifies."""
        if self.verification.ok:
            return None
        return f"WARNING: this evidence record does not verify: {self.verification.problems[0]}"


def open_record(store: EvidenceStore, run_id: str, public_key: Any = None) -> OpenedRecord:
    """Verify and read one run's record. Raises EvidenceError (bad input, exit 2) when ``run_id``
    is not a run-id or has no record, or it cannot be read; a record that exists but is broken
    (missing part, not JSON, edited, rewritten in its bucket) is returned with a failed verification."""
    stored = store.read(run_id)
    if stored is None:
        where = store.location(run_id)
        missing = "no object under it" if where.startswith("s3://") else "directory missing"
        raise EvidenceError(f"{where}: no evidence record ({missing})")
    try:
        parsed = json.loads(stored.summary) if stored.summary is not None else None
    except ValueError:
        parsed = None  # the verification says why
    return OpenedRecord(run_id, stored.location, stored.summary_name, stored.summary,
                        parsed if isinstance(parsed, dict) else None, verify_stored(stored, public_key))


def _doc_field(doc: Any, key: str) -> Any:
    return doc.get(key) if isinstance(doc, dict) else None


def _from_evidence(root: str, run: str) -> tuple[dict | None, OpenedRecord]:
    """A TauRun-shaped view of an evidence record (for ``status --evidence-root``) and the record
    it was read from; the view is None when ``evidence.json`` is not a JSON object."""
    store = EvidenceStore(root)
    if not RUN_ID_RE.match(run):
        matches = []
        for rid in store.run_ids():
            try:
                stored = store.read_document(rid)
            except EvidenceError:
                continue  # a broken record names no object
            if _doc_field(stored.get("object"), "name") == run:
                matches.append(rid)
        if len(matches) != 1:
            raise EvidenceError(f"{root}: {'no' if not matches else 'more than one'} evidence record for {run!r}")
        run = matches[0]
    rec = open_record(store, run)
    doc = rec.doc
    if doc is None:
        return None, rec
    conds = [{k: v for k, v in c.items() if k != "recordedAt"}
             for c in _l(doc.get("conditions")) if isinstance(c, dict)]
    run_id = doc.get("runId") if isinstance(doc.get("runId"), str) else run
    return ({"metadata": {"name": run_id, "namespace": doc.get("namespace")},
             "spec": {"runId": doc.get("runId"), "object": _d(doc.get("object")), "workspace": doc.get("workspace"),
                      "queue": doc.get("queue"), "profile": doc.get("profile")},
             "status": {"phase": doc.get("phase"), "conditions": conds, "failures": _l(doc.get("failures"))}}, rec)


def _d(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list:
    return value if isinstance(value, list) else []


def _s(value: Any) -> str:
    """A field as text (None as empty): records may hold any JSON type."""
    return "" if value is None else str(value)


def _failure(f: Any) -> str:
    return describe_failure(f) if isinstance(f, dict) else json.dumps(f, sort_keys=True)


def _src(src: Any) -> str:
    if not isinstance(src, dict):
        return ""
    if src.get("path"):
        return f"{src.get('kind')} {src['path']}"
    ns = f"{src['namespace']}/" if src.get("namespace") else ""
    return f"{src.get('kind')} {ns}{src.get('name')}"


def render_status(run: dict) -> str:
    """A TauRun as ``taugate status`` prints it (pure)."""
    meta, spec, status = _d(run.get("metadata")), _d(run.get("spec")), _d(run.get("status"))
    conds = [c for c in _l(status.get("conditions")) if isinstance(c, dict)]
    by = {_s(c.get("type")): c for c in conds}
    obj = _d(spec.get("object"))
    lines = [f"Run {meta.get('name')}  {obj.get('kind', '?')} {meta.get('namespace')}/{obj.get('name', '?')}  "
             f"phase {status.get('phase') or phase(conds)}"]
    extra = [f"{k} {spec[k]}" for k in ("workspace", "queue", "profile") if spec.get(k)]
    if extra:
        lines.append("  " + "  ".join(extra))
    lines.append("")
    rows = []
    for i, t in enumerate(STATE_ORDER, 1):
        unobserved = {"type": t, "status": "Unknown", "reason": "NotObserved"}
        c = by.get(t) or (by.get(FAILED) if t == COMPLETED else None) or unobserved
        rows.append((str(i), c))
    for t in RELEASE_TYPES:
        if t in by:
            rows.append((" ", by[t]))
    for n, c in rows:
        lines.append(f" {n} {_s(c.get('type')):<14}{_s(c.get('status')):<8}{_s(c.get('reason')):<22}"
                     f"{_s(c.get('lastTransitionTime')):<21}{_s(c.get('message'))}")
        s = _src(c.get("source"))
        if s:
            lines.append(f"   {'':<14}{'':<8}source: {s}")
    d = diagnose(conds, namespace=_s(meta.get("namespace")) or None, run_id=_s(meta.get("name")) or None)
    lines.append("")
    if d.stage == "Done":
        lines.append("Stage: Done (finished; artifacts saved)")
    else:
        lines.append(f"Stage: {d.stage} ({d.summary})")
        lines.append(f"  {d.status} {d.reason}: {d.message}")
    for f in _l(status.get("failures"))[:5]:
        lines.append(f"  failure: {_failure(f)}")
    if d.next_checks:
        lines.append("Next:")
        lines.extend(f"  - {h}" for h in d.next_checks)
    return "\n".join(lines) + "\n"


def cmd_status(args: argparse.Namespace) -> int:
    """``taugate status RUN``: 0 when shown, 1 when the evidence record read with
    ``--evidence-root`` does not verify (shown under a WARNING line when it can be), 2 when the
    run cannot be found or read."""
    rec: OpenedRecord | None = None
    try:
        if args.evidence_root is not None:
            run, rec = _from_evidence(args.evidence_root, args.run)
        else:
            run = _find_taurun(args)
    except EvidenceError as e:
        return _err(str(e))
    warning = rec.warning if rec is not None else None
    if warning and (args.output == "json" or run is None):
        print(warning, file=sys.stderr if args.output == "json" else sys.stdout)
    if run is None:
        return 1
    if args.output == "json":
        meta = _d(run.get("metadata"))
        d = diagnose([c for c in _l(_d(run.get("status")).get("conditions")) if isinstance(c, dict)],
                        namespace=_s(meta.get("namespace")) or None, run_id=_s(meta.get("name")) or None)
        out = dict(run)
        out["diagnosis"] = {"stage": d.stage, "summary": d.summary, "status": d.status, "reason": d.reason,
                            "message": d.message, "source": d.source, "nextChecks": list(d.next_checks)}
        if rec is not None:
            out["evidence"] = {"verified": rec.verification.ok, "problem": warning and rec.verification.problems[0]}
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        sys.stdout.write((warning + "\n" if warning else "") + render_status(run))
    return 1 if warning else 0



def _root(args: argparse.Namespace) -> str:
    return args.evidence_root if args.evidence_root is not None else _default_root()


def render_evidence(doc: dict) -> str:
    """An evidence document as readable text (pure). Any JSON object is accepted: a field of the
    wrong type (an edited or corrupt record) is shown as it is or skipped, never an error."""
    obj = _d(doc.get("object"))
    adm = _d(doc.get("admission"))
    out = [f"Run {doc.get('runId')}  {obj.get('kind')} {doc.get('namespace')}/{obj.get('name')} "
           f"(uid {obj.get('uid', '?')})",
           f"  phase {doc.get('phase')}  final {'yes' if doc.get('final') else 'no'}"]
    for k in ("workspace", "queue", "profile", "profileSetHash"):
        if doc.get(k):
            out.append(f"  {k}: {doc[k]}")
    if adm.get("policyDigest"):
        out.append(f"  policyDigest: {adm['policyDigest']}")
    if adm.get("error"):
        out.append(f"  admission record: {adm['error']}")
    if _l(adm.get("changes")):
        out.append("What taugate changed at admission:")
        out.extend(f"  - {c if isinstance(c, str) else json.dumps(c, sort_keys=True)}" for c in adm["changes"])
    if _l(adm.get("decisions")):
        out.append("Policy decisions:")
        out.extend(f"  - {c if isinstance(c, str) else json.dumps(c, sort_keys=True)}" for c in adm["decisions"])
    out.append("Timeline:")
    for c in _l(doc.get("timeline")):
        c = _d(c)
        src = _src(c.get("source"))
        out.append(f"  {_s(c.get('recordedAt')):<28}{_s(c.get('type')):<14}{_s(c.get('status')):<8}"
                   f"{_s(c.get('reason')):<22}{_s(c.get('message'))}" + (f"  [{src}]" if src else ""))
    if _l(doc.get("failures")):
        out.append("Failures:")
        out.extend(f"  - {_failure(f)}" for f in doc["failures"])
    art = _d(doc.get("artifacts"))
    if art:
        out.append(f"Artifacts under {art.get('root')}:" + (" (index present)" if art.get("index") else ""))
        for f in _l(art.get("files")):
            f = _d(f)
            digest = f"  sha256 {f['sha256']}" if f.get("sha256") else ""
            out.append(f"  - {f.get('path')}  {f.get('size')} bytes{digest}")
    out.extend(render_logs(doc))
    out.extend(render_repeat(doc))
    ev = _d(doc.get("events"))
    sig = _d(doc.get("signature"))
    out.append(f"Events: {ev.get('count')}  head {ev.get('head')}")
    out.append(f"Signed: {sig.get('algorithm')} key {sig.get('keyId')}")
    return "\n".join(out) + "\n"


def cmd_evidence_show(args: argparse.Namespace) -> int:
    """``taugate evidence show RUN``: the record is verified first (key recorded in the file).
    0 when shown and it verifies; 1 when it does not verify (``WARNING: this evidence record
    does not verify: <reason>`` first, on stdout, or on stderr with ``--json``; the content
    still follows when ``evidence.json`` can be shown); 2 when there is no such record."""
    try:
        check_run_id(args.run)
        rec = open_record(EvidenceStore(_root(args)), args.run)
        raw = None
        if args.json:
            try:
                raw = rec.raw.decode("utf-8") if rec.raw is not None else None
            except UnicodeDecodeError as e:
                raise EvidenceError(f"{rec.location}{rec.summary_name}: unreadable ({e})") from None
    except EvidenceError as e:
        return _err(str(e))
    warning = rec.warning
    if args.json:
        if warning:
            print(warning, file=sys.stderr)
        if raw is not None:
            sys.stdout.write(raw)
        return 1 if warning else 0
    if warning:
        print(warning)
    if rec.doc is not None:
        sys.stdout.write(render_evidence(rec.doc))
    elif not rec.verification.problems[0].startswith(rec.summary_name):
        print(f"{os.path.join(rec.location, rec.summary_name)}: missing or not a JSON object; nothing to show")
    return 1 if warning else 0


def cmd_evidence_verify(args: argparse.Namespace) -> int:
    """``taugate evidence verify RUN``: 0 intact, 1 tampered (first bad line printed), 2 bad input."""
    try:
        check_run_id(args.run)
        key = load_public_key(args.public_key) if args.public_key else None
        result = open_record(EvidenceStore(_root(args)), args.run, key).verification
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
    """Run these commands alone (``python -m cli.runs``)."""
    parser = argparse.ArgumentParser(prog="taugate")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

"""``taugate operator``, ``taugate snapshot export``, ``taugate crds``. Exit codes: 0 success, 1 a
check or the API failed, 2 bad input. Commands that talk to the API first make one quick call
(``taugate.kube.check_reachable``), so an unreachable server is one line and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import urllib.parse
from pathlib import Path

from taugate import logs

DEFAULT_CRD_DIR = "charts/taugate/crds"


def _connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context")
    p.add_argument("--in-cluster", action="store_true", help="use the pod's service account")


def _configuration(args: argparse.Namespace):
    from taugate.kube import load_configuration

    return load_configuration(in_cluster=args.in_cluster, kubeconfig=args.kubeconfig, context=args.context)


def _err(msg: str) -> None:
    print(f"taugate: {msg}", file=sys.stderr)


def _reachable(cfg) -> bool:
    """The preflight (``check_reachable``): True, or False after one line on stderr."""
    from taugate.kube import KubeError, check_reachable

    try:
        check_reachable(cfg)
    except KubeError as e:
        _err(str(e))
        return False
    return True


def liveness_problem(url: str) -> str | None:
    """Why ``url`` cannot be kopf's liveness endpoint, or None. kopf serves it over plain HTTP
    only (``kopf._core.engines.probing`` refuses any other scheme), so it must be
    ``http://HOST:PORT/PATH`` with an explicit host, a port from 1 to 65535 and a path."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        why = "https is not supported (kopf serves the liveness endpoint over plain HTTP)" \
            if parts.scheme == "https" else "not an http:// URL"
        return f"--liveness {url!r}: {why}; expected http://HOST:PORT/PATH, e.g. http://0.0.0.0:8080/healthz"
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or not port or not parts.path.startswith("/"):
        missing = "host" if not parts.hostname else "port (1-65535)" if not port else "path"
        return f"--liveness {url!r}: no {missing}; expected http://HOST:PORT/PATH, e.g. http://0.0.0.0:8080/healthz"
    return None


def output_problem(output: str) -> str | None:
    """Why ``output`` cannot receive an exported file, or None: its directory must exist, and a
    path that exists (after following symbolic links) must be a regular file, since the file is
    written beside it and renamed over it (a device, FIFO or directory would be replaced)."""
    real = Path(os.path.realpath(output))
    if real.is_symlink():
        return f"{output}: the symbolic link cannot be resolved (a loop?)"
    if real.exists() and not real.is_file():
        shown = f" ({real})" if str(real) != os.path.abspath(output) else ""
        return f"{output}: exists and is not a regular file{shown}"
    if not real.parent.is_dir():
        return f"{output}: the directory does not exist"
    return None


def run_operator_command(args: argparse.Namespace) -> int:
    """``taugate operator``: run the kopf operator until interrupted."""
    from taugate.controllers.operator import OperatorOptions, run_operator
    from taugate.kube import KubeConfigError
    from taugate.settings import Settings

    try:
        log_level, log_format = logs.chosen(args)  # checked first, configured once the operator runs
    except ValueError as e:
        _err(str(e))
        return 2
    if args.resync_seconds <= 0 or args.debounce_seconds < 0:
        _err("--resync-seconds must be > 0 and --debounce-seconds >= 0")
        return 2
    if not 1 <= args.workers <= 64:
        _err(f"--workers must be between 1 and 64, not {args.workers}")
        return 2
    problem = liveness_problem(args.liveness) if args.liveness is not None else None
    if problem:
        _err(problem)
        return 2
    try:
        recorder = recorder_config(args)
    except ValueError as e:
        _err(str(e))
        return 2
    problem = _evidence_problem(recorder) if recorder is not None else None
    if problem:
        _err(problem)
        return 2
    settings = Settings()
    if args.system_namespace:
        settings = settings.model_copy(update={"system_namespace": args.system_namespace})
    problem = settings.admission_key_problem()
    if problem:  # the recorder would trust records anyone can forge
        _err(problem)
        return 2
    try:
        audit = _audit_options(args, settings)
    except ValueError as e:
        _err(str(e))
        return 2
    try:
        leader = leader_election(args)
    except ValueError as e:
        _err(str(e))
        return 2
    try:
        cfg = _configuration(args)
    except KubeConfigError as e:
        _err(str(e))
        return 2
    if not _reachable(cfg):
        return 1
    logs.configure(log_level, log_format)
    options = OperatorOptions(resync_seconds=args.resync_seconds, debounce_seconds=args.debounce_seconds,
                              workers=args.workers, liveness_endpoint=args.liveness, recorder=recorder, audit=audit,
                              leader=leader)
    try:
        asyncio.run(run_operator(cfg, settings, options))
    except Exception as e:
        from taugate.controllers.recorder.evidence.records import EvidenceError

        if isinstance(e, EvidenceError):
            _err(f"recorder: {e}")
            return 2
        raise
    return 0


def _evidence_problem(recorder) -> str | None:
    """Why evidence cannot be written where the recorder is configured to (a directory that
    cannot be created or written, a bucket that cannot be reached or lacks the Object Lock its
    retention needs), in one line; None when it can."""
    from taugate.controllers.recorder.evidence.records import EvidenceError

    try:
        return recorder.storage().problem()
    except EvidenceError as e:
        return str(e)


def _audit_options(args: argparse.Namespace, settings):
    """The background audit's options, or None without ``--audit-policies``. The auditor comes
    is the webhook's ``PolicyAuditor`` (``cli.clients.policy_auditor``). Raises ``ValueError`` (one line)
    for bad values or a policy folder that does not load."""
    if not getattr(args, "audit_policies", None):
        return None
    from taugate.controllers.audit import AuditOptions

    if args.audit_interval <= 0 or args.audit_page_size <= 0:
        raise ValueError("--audit-interval and --audit-page-size must be > 0")
    from taugate.cli import clients

    return AuditOptions(auditor=clients.policy_auditor(args.audit_policies, settings),
                        interval_seconds=args.audit_interval,
                        page_size=args.audit_page_size, metrics_port=args.audit_metrics_port)


def _settings(cls, what: str, flags):
    """``cls`` (pydantic settings: its environment variables) with the ``(field, value)`` flags that
    were given over them; ``ValueError`` naming ``what`` and the first problem (one line)."""
    from pydantic import ValidationError

    from taugate.structure import first_problem

    try:
        return cls(**{k: v for k, v in flags if v is not None})
    except ValidationError as e:
        raise ValueError(f"{what}: {first_problem(e)}") from None


def leader_election(args: argparse.Namespace):
    """The leader election's configuration with its namespace and identity resolved, or None when
    it is off (``--leader-elect`` or ``TAUGATE_LEADER_ELECTION_ENABLED``). Raises ``ValueError``
    (one line) for bad values or a namespace that cannot be found."""
    from taugate.controllers.leader import LeaderElection

    config = _settings(LeaderElection, "leader election", (
        ("enabled", args.leader_elect), ("lease_name", args.leader_elect_lease_name),
        ("namespace", args.leader_elect_namespace), ("identity", args.leader_elect_identity),
        ("lease_duration_seconds", args.leader_elect_lease_duration),
        ("renew_deadline_seconds", args.leader_elect_renew_deadline),
        ("retry_period_seconds", args.leader_elect_retry_period)))
    if not config.enabled:
        return None
    namespace = config.lease_namespace()
    if not namespace:
        raise ValueError("leader election: no namespace for the Lease: set --leader-elect-namespace "
                         "(or $POD_NAMESPACE)")
    return config.model_copy(update={"namespace": namespace, "identity": config.holder_identity()})


def recorder_config(args: argparse.Namespace):
    """The recorder's configuration, or None when it is off. It runs when a signing key is
    configured (flags or ``TAUGATE_RECORDER_SIGNING_KEY_*``) unless ``--no-record``; ``--record``
    without a key is an error, since evidence is never written unsigned."""
    from taugate.controllers.recorder.config import RecorderConfig

    config = _settings(RecorderConfig, "recorder configuration", (
        ("evidence_root", args.evidence_root), ("data_root", args.data_root),
        *_retention(getattr(args, "evidence_retention", None)),
        ("signing_key_file", args.signing_key_file), ("signing_key_secret", args.signing_key_secret)))
    has_key = config.signing_key_file is not None or config.signing_key_secret is not None
    if args.record is False or (args.record is None and not has_key):
        return None
    if not has_key:
        raise ValueError("--record needs an evidence signing key: --signing-key-file FILE or "
                         "--signing-key-secret NAMESPACE/NAME[/KEY] (create one with `taugate evidence keygen`)")
    return config


def _retention(value: str | None) -> list[tuple[str, object]]:
    """``--evidence-retention MODE:DAYS`` as RecorderConfig overrides; ValueError (one line) when
    it is not one."""
    if value is None:
        return []
    mode, _, days = value.partition(":")
    if mode.upper() not in ("COMPLIANCE", "GOVERNANCE") or not days.isdigit() or not 1 <= int(days) <= 36500:
        raise ValueError(f"--evidence-retention {value!r}: expected COMPLIANCE:DAYS or GOVERNANCE:DAYS, DAYS 1-36500 "
                         "(e.g. COMPLIANCE:365)")
    return [("evidence_retention_mode", mode.upper()), ("evidence_retention_days", int(days))]


def snapshot_export_command(args: argparse.Namespace) -> int:
    """``taugate snapshot export [-o FILE]``: write the live state as a snapshot file."""
    from taugate.controllers.export import export_snapshot, write_atomically
    from taugate.kube import Kube, KubeConfigError, KubeError, KubeUnreachable
    from taugate.snapshot import SnapshotError

    try:
        cfg = _configuration(args)
    except KubeConfigError as e:
        _err(str(e))
        return 2
    problem = output_problem(args.output) if args.output else None
    if problem:
        _err(problem)
        return 2
    if not _reachable(cfg):
        return 1
    kube = Kube.from_configuration(cfg)
    try:
        text, skipped = export_snapshot(kube, source=cfg.host)
    except KubeUnreachable as e:
        _err(str(e))
        return 1
    except KubeError as e:
        _err(f"{cfg.host}: {e}")
        return 1
    except SnapshotError as e:
        _err(str(e))
        return 1
    finally:
        kube.close()
    for line in skipped:
        _err(f"left out: {line}")
    if args.output:
        try:
            write_atomically(args.output, text)
        except OSError as e:
            _err(f"{args.output}: cannot write: {e.strerror or e}")
            return 2
    else:
        sys.stdout.write(text)
    return 0


def crds_command(args: argparse.Namespace) -> int:
    """``taugate crds``: print the CRDs, write them into a directory (``-o``), or check that a
    directory holds exactly what the models generate (``--check``, exit 1 when a CRD file is
    missing, differs, or an unexpected manifest is there: one line each)."""
    from taugate.controllers.crds import check_crds, render_crds, write_crds
    from taugate.files import InputError

    if args.check:
        d = Path(args.check)
        if not d.exists():
            _err(f"{args.check}: no such directory")
            return 2
        if not d.is_dir():
            _err(f"{args.check}: is not a directory")
            return 2
        try:
            problems = check_crds(d)
        except InputError as e:
            _err(str(e))
            return 2
        fix = {"missing": f"missing; run `taugate crds -o {args.check}`",
               "differs": f"differs from the CRD generated from taugate/models.py; run `taugate crds -o {args.check}`",
               "unexpected": "unexpected file: Helm installs every YAML/JSON file of a chart's crds/ directory; "
                             "remove it"}
        for name, what in problems:
            _err(f"{d / name}: {fix[what]}")
        return 1 if problems else 0
    if args.output:
        try:
            for path in write_crds(args.output):
                print(path)
        except OSError as e:
            _err(f"{args.output}: cannot write: {e.strerror or e}")
            return 2
        return 0
    sys.stdout.write("---\n".join(render_crds().values()))
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``operator``, ``snapshot export`` and ``crds``."""
    p = subparsers.add_parser("operator", help="run the controllers (kopf operator)",
                              description="Run the TauCluster, TauWorkspace and TauQuotaRequest controllers.")
    _connection_args(p)
    p.add_argument("--system-namespace", metavar="NS", help="namespace of TauWorkspaces and TauQuotaRequests "
                                                            "(default: $TAUGATE_SYSTEM_NAMESPACE or tau-platform)")
    p.add_argument("--resync-seconds", type=float, default=300.0, help="reconcile everything at least this often")
    p.add_argument("--debounce-seconds", type=float, default=0.5, help="gather events this long before reconciling")
    p.add_argument("--workers", type=int, default=4, metavar="N",
                   help="reconciles at once, each object by one at a time (default: %(default)s)")
    p.add_argument("--liveness", metavar="URL", help="kopf liveness endpoint, http://HOST:PORT/PATH, "
                                                     "e.g. http://0.0.0.0:8080/healthz")
    logs.add_arguments(p)
    rec = p.add_argument_group("run recorder (TauRuns and evidence)")
    onoff = rec.add_mutually_exclusive_group()
    onoff.add_argument("--record", dest="record", action="store_true", default=None,
                       help="run the recorder (default: on when a signing key is configured)")
    onoff.add_argument("--no-record", dest="record", action="store_false", help="do not run the recorder")
    rec.add_argument("--evidence-root", metavar="DIR|s3://BUCKET[/PREFIX]",
                     help="where per-run evidence is written: a directory, or an S3 bucket with the AWS_* "
                          "variables for credentials and endpoint (TAUGATE_RECORDER_EVIDENCE_ROOT)")
    rec.add_argument("--evidence-retention", metavar="MODE:DAYS",
                     help="Object Lock retention of each evidence object in an s3:// root, COMPLIANCE:DAYS or "
                          "GOVERNANCE:DAYS (TAUGATE_RECORDER_EVIDENCE_RETENTION_MODE, _DAYS)")
    rec.add_argument("--data-root", type=Path,
                     help="where workspace data volumes are mounted (TAUGATE_RECORDER_DATA_ROOT)")
    rec.add_argument("--signing-key-file", type=Path, help="Ed25519 PEM key that signs evidence")
    rec.add_argument("--signing-key-secret", metavar="NS/NAME[/KEY]", help="the same key from a Secret")
    aud = p.add_argument_group("background audit (PolicyReports)")
    aud.add_argument("--audit-policies", metavar="DIR", help="audit every governed workload against the policy "
                                                             "folder DIR and write PolicyReports (default: no audit)")
    aud.add_argument("--audit-interval", type=float, default=300.0, metavar="SECONDS",
                     help="seconds between audits (also when the policy set changes)")
    aud.add_argument("--audit-page-size", type=int, default=500, metavar="N", help="objects per list request")
    aud.add_argument("--audit-metrics-port", type=int, metavar="PORT", help="serve the audit's Prometheus metrics")
    le = p.add_argument_group("leader election (a coordination.k8s.io/v1 Lease; TAUGATE_LEADER_ELECTION_*)")
    le_onoff = le.add_mutually_exclusive_group()
    le_onoff.add_argument("--leader-elect", dest="leader_elect", action="store_true", default=None,
                          help="stand by until this replica holds the Lease; exit 1 at once when it is lost "
                               "(default: $TAUGATE_LEADER_ELECTION_ENABLED, else off)")
    le_onoff.add_argument("--no-leader-elect", dest="leader_elect", action="store_false",
                          help="act at once, alone (one replica)")
    le.add_argument("--leader-elect-lease-name", metavar="NAME", help="the Lease (default: taugate-operator)")
    le.add_argument("--leader-elect-namespace", metavar="NS",
                    help="the Lease's namespace (default: $POD_NAMESPACE, else the pod's service account namespace)")
    le.add_argument("--leader-elect-identity", metavar="ID",
                    help="this replica's holderIdentity (default: $POD_NAME or the host name, _ and a UUID)")
    le.add_argument("--leader-elect-lease-duration", type=int, metavar="SECONDS",
                    help="how long a Lease not renewed stays held (default: 15)")
    le.add_argument("--leader-elect-renew-deadline", type=float, metavar="SECONDS",
                    help="how long the leader keeps trying to renew before it stops (default: 10)")
    le.add_argument("--leader-elect-retry-period", type=float, metavar="SECONDS",
                    help="how often the leader renews and a standby tries (default: 2)")
    p.set_defaults(func=run_operator_command)

    snap = subparsers.add_parser("snapshot", help="cluster snapshots for offline admission")
    ssub = snap.add_subparsers(dest="snapshot_command", metavar="SUBCOMMAND")
    snap.set_defaults(func=lambda args: (snap.print_help(sys.stderr), 2)[1])  # `taugate snapshot` alone
    e = ssub.add_parser("export", help="write the live cluster state as a snapshot file",
                        description="List the TauCluster, TauWorkspaces, Nodes and Kueue queues and write them as "
                                    "the snapshot file `taugate admit --cluster` reads.")
    _connection_args(e)
    e.add_argument("-o", "--output", metavar="FILE", help="write here (default: standard output)")
    e.set_defaults(func=snapshot_export_command)

    c = subparsers.add_parser("crds", help="generate taugate's CustomResourceDefinitions from the models",
                              description="Print the CRDs, write them (-o DIR) or check a directory (--check DIR).")
    g = c.add_mutually_exclusive_group()
    g.add_argument("-o", "--output", metavar="DIR", help=f"write one file per CRD here (e.g. {DEFAULT_CRD_DIR})")
    g.add_argument("--check", metavar="DIR", help="exit 1 when the CRD files in DIR differ from the models")
    c.set_defaults(func=crds_command)

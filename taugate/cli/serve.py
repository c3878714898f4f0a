"""``taugate serve``: the admission webhooks over HTTPS.

``taugate serve --cluster SNAPSHOT [--cert-dir DIR] [--host 127.0.0.1] [--port 8443]
[--policies DIR] [--enforcement FILE] [--policy-backend embedded|opa --opa-url URL]`` serves
``/mutate``, ``/validate``, ``/mutate-tau``, ``/validate-tau``, ``/healthz``, ``/readyz`` and ``/metrics`` (see
``webhook.server``). TLS comes from
``--cert-dir`` (``tls.crt``, ``tls.key``; reloaded without restart when they change), or, without
it, from a CA and serving certificate generated at start (its CA path is printed). In a cluster
pass ``--host 0.0.0.0``. ``--policy-backend opa --opa-url http://127.0.0.1:8181`` evaluates the
policies on an OPA server (the chart's sidecar; ``TAUGATE_POLICY_BACKEND``, ``TAUGATE_OPA_URL`` and
``TAUGATE_OPA_TIMEOUT_SECONDS`` set the same; see ``webhook/policy/opa.py``).

Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 2 on bad input (one line on stderr
naming the file and the problem, e.g. a broken snapshot or certificate, a port in use).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from taugate import argtypes, logs
from taugate.settings import Settings
from taugate.snapshot import SnapshotError
from taugate.webhook.providers import StateProvider, TLSSource

if TYPE_CHECKING:  # annotations only: the serve command imports the policy engines when it runs
    from taugate.webhook.policy.engine import PolicyEngine


def _err(msg: str) -> int:
    print(f"taugate serve: {msg}", file=sys.stderr)
    return 2


class _ServingTLS(TLSSource, Protocol):
    """The serving TLS the CLI wires (``certs.serving.ServingTLS``): a ``TLSSource`` that also
    names the CA bundle that signed it (``ca_path``, printed at start)."""

    ca_path: Path


class _Unusable(Exception):
    """A flag, file or setting ``taugate serve`` cannot start with: the message is the one stderr
    line, the exit code 2."""


def _settings(args: argparse.Namespace) -> Settings:
    """The environment's settings under the flags. Raises ``_Unusable`` naming the invalid flag or
    setting, an OPA backend without a URL, or an admission key too short to sign with."""
    try:
        settings = Settings()
        overrides = {k: v for k, v in (("admission_deadline_seconds", args.deadline),
                                       ("policy_backend", args.policy_backend), ("opa_url", args.opa_url))
                     if v is not None}
        if overrides:
            settings = Settings(**{**settings.model_dump(), **overrides})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"]))
        flag = {"admission_deadline_seconds": f"--deadline {args.deadline}", "policy_backend": "--policy-backend",
                "opa_url": "--opa-url", "": "settings"}.get(where, f"settings.{where} (TAUGATE_{where.upper()})")
        raise _Unusable(f"{flag}: {first['msg'].removeprefix('Value error, ')}") from e
    if settings.policy_backend == "opa" and not settings.opa_url:
        raise _Unusable("--policy-backend opa needs --opa-url (for example http://127.0.0.1:8181)")
    problem = settings.admission_key_problem()
    if problem:
        raise _Unusable(problem)
    return settings


def _state_provider(args: argparse.Namespace, settings: Settings) -> StateProvider:
    """Cluster state: the ``--cluster`` snapshot file, or with ``--in-cluster`` the watch-based
    provider the CLI wired (``args.state_provider_factory``). Raises ``_Unusable`` when the
    snapshot is broken, nothing is wired, or the API configuration is unusable."""
    from taugate.webhook.providers import SnapshotStateProvider

    if args.cluster is not None:
        try:
            return SnapshotStateProvider(args.cluster, settings)
        except SnapshotError as e:
            raise _Unusable(str(e)) from e
    if not args.in_cluster:
        raise _Unusable("give --cluster SNAPSHOT (or --in-cluster inside a cluster)")
    from taugate.cli import clients  # the API client: only in a cluster

    try:
        return clients.watch_state_provider(settings, kubeconfig=args.kubeconfig)
    except ValueError as e:  # no usable API configuration
        raise _Unusable(str(e)) from e


def _policy_engine(args: argparse.Namespace, settings: Settings) -> PolicyEngine | None:
    """The policy engine (None with ``--no-policies``). Raises ``_Unusable`` with the engine's
    one-line ``PolicyError`` (file, line, reason) when the library does not load."""
    if args.no_policies:
        return None
    from taugate.webhook.engines import load_policy_engine
    from taugate.webhook.policy.engine import PolicyError

    try:
        return load_policy_engine(args.policies or settings.policy_dir, enforcement=args.enforcement,
                                  backend=settings.policy_backend, opa_url=settings.opa_url,
                                  opa_timeout_s=settings.opa_timeout_seconds)
    except PolicyError as e:  # one line: file, line, reason
        raise _Unusable(f"policies: {e}") from e


def _tls(args: argparse.Namespace) -> _ServingTLS:
    """The serving TLS from the factory the CLI wired (``args.tls_factory``). Raises ``_Unusable``
    when none is wired or the certificate is unusable."""
    from taugate.certs.serving import serving_tls

    try:
        return serving_tls(args.cert_dir, service=args.service, namespace=args.namespace)
    except ValueError as e:  # certs.pki.CertError
        raise _Unusable(str(e)) from e


def _event_sender(provider: StateProvider) -> Any:
    """With ``--in-cluster``, the Event sender (``webhook.events``) over the provider's API client;
    None for a snapshot (no cluster to write to)."""
    writer = getattr(provider, "kube", None)
    if writer is None or not callable(getattr(writer, "create", None)):
        return None
    from taugate.webhook.events import EventSender

    return EventSender(writer)


def _run(main: Coroutine[Any, Any, None], loop: str) -> None:
    """Run ``main`` to its end on asyncio's default event loop, or uvloop's with ``--loop uvloop``.
    Raises ``_Unusable`` when uvloop is asked for and not installed."""
    if loop != "uvloop":
        asyncio.run(main)
        return
    try:
        import uvloop
    except ModuleNotFoundError as e:
        main.close()
        raise _Unusable("--loop uvloop: uvloop is not installed (pip install uvloop)") from e
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def cmd_serve(args: argparse.Namespace) -> int:
    """Handler of ``taugate serve``; returns the exit code (0 after a clean shutdown, 2 when it
    cannot start)."""
    from taugate.webhook import lifecycle
    from taugate.webhook import server as srv

    opened: dict[str, object] = {}  # closed when serving ends (or fails to start): the TLS, then the engine
    try:
        try:
            logs.configure(*logs.chosen(args))
        except ValueError as e:
            raise _Unusable(str(e)) from e
        settings = _settings(args)
        provider = _state_provider(args, settings)
        engine = opened["engine"] = _policy_engine(args, settings)
        # A changed policy set is activated only if it passes its tests.
        store = getattr(engine, "store", None)
        checks = tuple(fn for fn in (getattr(store, "check_for_changes", None),) if callable(fn))
        tls = opened["tls"] = _tls(args)
        events = opened["events"] = _event_sender(provider)
        server = srv.AdmissionServer(provider, settings, engine, policies_required=not args.no_policies,
                                     checks=checks, events=events)

        def started(running: lifecycle.RunningServer) -> None:
            paths = ", ".join(r.path for r in srv.ROUTES)
            print(f"taugate: serving {paths} on {running.url}", flush=True)
            ca = Path(tls.ca_path)
            print(f"taugate: CA certificate: {ca}" if ca.is_file() else
                  f"taugate: CA certificate: none next to the serving certificate ({ca} is absent)", flush=True)

        _run(lifecycle.serve_forever(server, tls, host=args.host, port=args.port,
                                     shutdown_delay=args.shutdown_delay, on_started=started), args.loop)
    except _Unusable as e:
        return _err(str(e))
    except OSError as e:
        return _err(e.strerror or str(e))
    finally:
        for part in (opened.get("events"), opened.get("tls"), opened.get("engine")):
            close = getattr(part, "close", None)
            if callable(close):
                close()
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``taugate serve``."""
    p = sub.add_parser("serve", help="serve the admission webhooks over HTTPS",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--cluster", type=Path, help="cluster snapshot YAML (see examples/cluster.yaml)")
    src.add_argument("--in-cluster", action="store_true", help="read cluster state from the API server (watches)")
    p.add_argument("--kubeconfig", help="with --in-cluster: a kubeconfig file instead of the pod's service account")
    p.add_argument("--cert-dir", type=Path, help="directory with tls.crt and tls.key (default: generate a "
                                                 "self-signed CA and certificate at start)")
    p.add_argument("--service", default="taugate-webhook",
                   help="Service name for a generated certificate's SANs (default: %(default)s)")
    p.add_argument("--namespace", default="taugate-system", help="its namespace (default: %(default)s)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s; "
                                                      "0.0.0.0 in a cluster)")
    p.add_argument("--port", type=argtypes.port, default=8443, help="port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--policies", type=Path, help="policy library directory (default: the bundled policies/)")
    p.add_argument("--enforcement", help="enforcement YAML: policy name -> deny|warn|dryrun")
    p.add_argument("--no-policies", action="store_true", help="built-in checks only")
    p.add_argument("--policy-backend", choices=("embedded", "opa"),
                   help="where the policies are evaluated: embedded (regorus, in process; the default) or opa "
                        "(an OPA server at --opa-url; settings.policy_backend, TAUGATE_POLICY_BACKEND)")
    p.add_argument("--opa-url", help="the OPA server for --policy-backend opa, e.g. http://127.0.0.1:8181 "
                                     "(TAUGATE_OPA_URL); one evaluation may take TAUGATE_OPA_TIMEOUT_SECONDS "
                                     "(1 s, below the 2 s deadline)")
    p.add_argument("--deadline", type=argtypes.seconds, help="admission deadline in seconds (default: "
                                                     "settings.admission_deadline_seconds, 2)")
    p.add_argument("--shutdown-delay", type=argtypes.seconds, default=0.0,
                   help="seconds to stay up, not ready, after SIGTERM (in a cluster ~5)")
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="event loop implementation")
    logs.add_arguments(p)
    p.set_defaults(func=cmd_serve)

"""``taugate certs generate|rotate|show|sync``: the webhook's CA and serving certificate in a
directory (``certs.store``), or in a Secret and the configurations' ``caBundle`` (``certs.kube``).
Periods and names are checked before anything is written. Exit codes: 0 done (or nothing due), 1 an
API call failed or the server was not reached, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys

from taugate import argtypes
from taugate.certs import store
from taugate.certs.pki import (
    DEFAULT_CA_DAYS,
    DEFAULT_SERVING_DAYS,
    LOCAL_HOSTS,
    CertError,
    check_days,
    check_validity,
    name_problem,
)


def _days(text: str) -> int:
    """A whole number (its range is checked by the handler, which names the option)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of days: {text!r}") from None


def _fail(action: str, message: str, code: int = 2) -> int:
    """Print ``taugate certs ACTION: MESSAGE`` on stderr and return ``code`` (2: bad input)."""
    print(f"taugate certs {action}: {message}", file=sys.stderr)
    return code


def _check_options(args: argparse.Namespace, *, days: tuple[str, ...] = (), pair: bool = False,
                   names: bool = False) -> None:
    """Raise ``CertError`` naming the first bad option: each of ``days`` (option names) in
    1..36500; with ``pair``, ``--days`` <= ``--ca-days``; with ``names``, ``--service`` a
    Service name (DNS-1035 label) and ``--namespace`` a Namespace name (DNS-1123 label)."""
    if names:
        for option, kind in (("--service", "Service"), ("--namespace", "Namespace")):
            problem = name_problem(getattr(args, option[2:]), kind)
            if problem:
                raise CertError(f"{option}: {problem}")
    for option in days:
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None:
            check_days(value, option)
    if pair:
        check_validity(ca_days=args.ca_days, days=args.days, ca_what="--ca-days", what="--days")


def cmd_generate(args: argparse.Namespace) -> int:
    """``certs generate``: exit 0 with the files listed, 2 on bad input or existing files."""
    extra = () if args.no_local else LOCAL_HOSTS
    try:
        _check_options(args, days=("--ca-days", "--days"), pair=True, names=True)
        st = store.generate(args.dir, service=args.service, namespace=args.namespace, extra_hosts=extra,
                            ca_days=args.ca_days, days=args.days, force=args.force)
    except CertError as e:
        return _fail("generate", str(e))
    print("\n".join(store.describe(st)))
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    """``certs rotate``: exit 0 after the requested step(s) or when nothing is due, 2 on bad input."""
    try:
        _check_options(args, days=("--ca-days", "--days", "--if-expiring-within"), pair=args.step == "all")
        st = store.inspect(args.dir)
        if args.if_expiring_within is not None and args.step in ("all", "publish") and st.pending is None:
            left = st.expires - _dt.datetime.now(_dt.UTC)
            if left > _dt.timedelta(days=args.if_expiring_within):
                print(f"{args.dir}: nothing to do, certificates are valid for {left.days} more days")
                return 0

        def report(step: str, status: store.CertDirStatus) -> None:
            print(f"{step}: done", flush=True)

        if args.step == "all":
            st = store.rotate(args.dir, wait_seconds=args.wait, ca_days=args.ca_days, days=args.days,
                              on_step=report)
        elif args.step == "publish":
            st = store.publish_new_ca(args.dir, ca_days=args.ca_days)
        elif args.step == "switch":
            st = store.switch_serving(args.dir, days=args.days)
        else:
            st = store.trim_bundle(args.dir)
    except CertError as e:
        return _fail("rotate", str(e))
    print("\n".join(store.describe(st)))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """``certs show``: exit 0 and describe the directory, 2 when it is unusable."""
    try:
        st = store.inspect(args.dir)
    except CertError as e:
        return _fail("show", str(e))
    print("\n".join(store.describe(st)))
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    """``certs sync``: exit 0 after the step (or nothing due), 1 on an API error, 2 on bad input."""
    import datetime as dt

    from taugate.certs.kube import sync
    from taugate.kube import Kube, KubeConfigError, KubeError, check_reachable, load_configuration

    try:
        _check_options(args, days=("--days", "--renew-before-days"), names=True)
        cfg = load_configuration(in_cluster=None, kubeconfig=args.kubeconfig)
    except (CertError, KubeConfigError) as e:
        return _fail("sync", str(e))
    kube = Kube.from_configuration(cfg)
    try:
        check_reachable(cfg)
        result = sync(kube, secret=args.secret, namespace=args.namespace, service=args.service,
                      days=args.days, renew_before=dt.timedelta(days=args.renew_before_days),
                      switch_after=dt.timedelta(seconds=args.switch_after),
                      mutating=args.mutating_webhook_configuration,
                      validating=args.validating_webhook_configuration)
    except CertError as e:
        return _fail("sync", str(e))
    except KubeError as e:
        return _fail("sync", str(e) if e.status == 0 else f"API error {e.status}: {e}", 1)
    finally:
        kube.close()
    for line in result.actions:
        print(line)
    return 0


def add_commands(subparsers) -> None:
    """Register ``taugate certs {generate,rotate,show,sync}``."""
    certs = subparsers.add_parser("certs", help="create and rotate the webhook's TLS certificates")
    sub = certs.add_subparsers(dest="certs_command", metavar="ACTION", required=True)

    g = sub.add_parser("generate", help="create a CA and a serving certificate in a directory")
    g.add_argument("--dir", required=True, help="directory to write ca.crt, ca.key, tls.crt, tls.key into")
    g.add_argument("--service", default="taugate-webhook", help="webhook Service name (default: %(default)s)")
    g.add_argument("--namespace", default="taugate-system", help="its namespace (default: %(default)s)")
    g.add_argument("--days", type=_days, default=DEFAULT_SERVING_DAYS, help="serving certificate validity")
    g.add_argument("--ca-days", type=_days, default=DEFAULT_CA_DAYS, help="CA validity")
    g.add_argument("--no-local", action="store_true", help="leave localhost/127.0.0.1 out of the SANs")
    g.add_argument("--force", action="store_true", help="overwrite existing certificates (breaks clients)")
    g.set_defaults(func=cmd_generate)

    r = sub.add_parser("rotate", help="rotate CA and serving certificate without breaking clients")
    r.add_argument("--dir", required=True)
    r.add_argument("--step", choices=("all", "publish", "switch", "trim"), default="all",
                   help="publish: new CA next to the old one; switch: serve a certificate of the new CA; "
                        "trim: drop old CAs from ca.crt; all (default): publish, wait, switch")
    r.add_argument("--wait", type=argtypes.seconds, default=2.0,
                   help="seconds between publish and switch (default %(default)s: the server reloads every "
                        "second; in a cluster cover the caBundle update and kubelet's Secret sync)")
    r.add_argument("--if-expiring-within", type=_days, metavar="DAYS",
                   help="rotate only when a certificate expires within DAYS days")
    r.add_argument("--days", type=_days, default=DEFAULT_SERVING_DAYS)
    r.add_argument("--ca-days", type=_days, default=DEFAULT_CA_DAYS)
    r.set_defaults(func=cmd_rotate)

    s = sub.add_parser("show", help="describe a certificate directory")
    s.add_argument("--dir", required=True)
    s.set_defaults(func=cmd_show)

    y = sub.add_parser("sync", help="keep the certificates in a Secret and the CA in the webhook configurations")
    y.add_argument("--secret", required=True, help="TLS Secret name")
    y.add_argument("--namespace", required=True, help="namespace of the Secret and of the webhook Service")
    y.add_argument("--service", required=True, help="webhook Service name (the certificate's SANs)")
    y.add_argument("--days", type=_days, default=DEFAULT_SERVING_DAYS, help="validity of new certificates")
    y.add_argument("--renew-before-days", type=_days, default=30, help="renew this long before expiry")
    y.add_argument("--switch-after", type=argtypes.seconds, default=600.0,
                   help="seconds between publishing a new CA and serving a certificate of it (default "
                        "%(default)s: kubelet's Secret sync and the caBundle update need that long)")
    y.add_argument("--mutating-webhook-configuration", help="MutatingWebhookConfiguration to set caBundle on")
    y.add_argument("--validating-webhook-configuration", help="ValidatingWebhookConfiguration to set caBundle on")
    y.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    y.set_defaults(func=cmd_sync)

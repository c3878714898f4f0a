"""The ``taugate`` command: the composition root that wires core, webhook, controllers and certs.

Subcommands are contributed by each part through an ``add_commands(subparsers)`` function in
``webhook.commands``, ``controllers.commands`` and ``certs.commands``; each registers its
parsers with ``set_defaults(func=...)`` where ``func(args) -> int`` is the exit code.

Exit codes everywhere: 0 success / allowed, 1 denied or a check failed, 2 bad input (one line on
stderr naming the file and the problem).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taugate.controllers.kube import Kube
    from taugate.settings import Settings
    from taugate.webhook.audit import PolicyAuditor
    from taugate.webhook.state_watch import WatchStateProvider

PARTS = ("taugate.webhook.commands", "taugate.controllers.commands", "taugate.certs.commands")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every part's subcommands registered."""
    parser = argparse.ArgumentParser(prog="taugate",
                                     description="Server-side admission for GPU workloads on Kubernetes.")
    parser.add_argument("--version", action="version", version=f"taugate {installed_version()}",
                        help="print the installed taugate version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in PARTS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        module.add_commands(sub)
    _wire(parser)
    return parser


def installed_version() -> str:
    """The version of the installed ``taugate`` distribution (its package metadata, as pip
    shows it), or a sentence saying there is none (the source tree run without installing)."""
    try:
        return importlib.metadata.version("taugate")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed as a package: no version metadata)"


def _wire(parser: argparse.ArgumentParser) -> None:
    """Cross-part wiring, here because the parts never import each other: ``taugate serve``
    (webhook) gets its TLS from ``certs.serving.serving_tls`` (``args.tls_factory``) and, with
    ``--in-cluster``, its cluster state from ``webhook.state_watch.WatchStateProvider`` reading
    through the controllers' API client ``controllers.kube.Kube`` (``args.state_provider_factory``);
    ``taugate policy what-if`` reads a live cluster through that client too
    (``args.cluster_reader_factory``), and ``taugate operator --audit-policies`` judges workloads
    with the webhook's ``PolicyAuditor`` (``args.auditor_factory``)."""
    try:
        from taugate.certs.serving import serving_tls
    except ModuleNotFoundError as e:
        if e.name not in ("taugate.certs", "taugate.certs.serving"):
            raise
    else:
        parser.set_defaults(tls_factory=serving_tls)
    if importlib.util.find_spec("taugate.controllers") is not None:
        parser.set_defaults(state_provider_factory=_watch_state_provider, cluster_reader_factory=_cluster_reader,
                            auditor_factory=_policy_auditor)


def _watch_state_provider(settings: Settings, kubeconfig: str | None = None) -> WatchStateProvider:
    """A watch-based ``StateProvider``: the pod's service account, or ``kubeconfig`` when given.
    Raises ``taugate.kubeaccess.KubeConfigError`` (a ``ValueError``) without a usable configuration."""
    from taugate.controllers.kube import Kube, load_configuration
    from taugate.webhook.state_watch import WatchStateProvider

    cfg = load_configuration(in_cluster=kubeconfig is None, kubeconfig=kubeconfig)
    return WatchStateProvider(Kube.from_configuration(cfg), settings)


def _cluster_reader(kubeconfig: str | None = None, context: str | None = None) -> Kube:
    """The API client a command reads a live cluster with (``kubeconfig`` or ``$KUBECONFIG`` or
    ``~/.kube/config``). Raises ``taugate.kubeaccess.KubeConfigError`` (a ``ValueError``)."""
    from taugate.controllers.kube import Kube, load_configuration

    return Kube.from_configuration(load_configuration(kubeconfig=kubeconfig, context=context))


def _policy_auditor(policy_dir: str, settings: Settings) -> PolicyAuditor:
    """The webhook's ``PolicyAuditor`` over the policy folder ``policy_dir``, reloading when its
    files change (as the webhook does). Raises ``ValueError`` (one line) when the set does not load."""
    from taugate.webhook.audit import PolicyAuditor
    from taugate.webhook.policy import PolicyError

    try:
        return PolicyAuditor.load(policy_dir, settings, reload_seconds=1.0)
    except PolicyError as e:
        raise ValueError(f"--audit-policies: {e}") from None


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the chosen subcommand: its exit code; 2 and the help without one; 130 on Ctrl-C; 141
    (killed by SIGPIPE, as a Unix tool would be) when the reader of standard output went away,
    since the command's real outcome is then unknown and 0 could hide a denial."""
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    _configure_devices()
    from pydantic import ValidationError

    try:
        return int(args.func(args) or 0)
    except ValidationError as e:
        if e.title != "Settings":
            raise
        print(f"taugate: {settings_problem(e)}", file=sys.stderr)  # one line, as for a bad file
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        return 141


def settings_problem(e: Any) -> str:
    """One line for settings that do not load (a pydantic ``ValidationError`` of ``Settings``):
    the environment variable and what is wrong with its value."""
    first = e.errors()[0]
    where = ".".join(map(str, first["loc"]))
    name = f"TAUGATE_{where.upper()}" if where else "the TAUGATE_* settings"
    return f"{name}: {first['msg'].removeprefix('Value error, ')} (got {first.get('input')!r})"


def _configure_devices() -> None:
    """What counts as a GPU device resource in this process (``TAUGATE_GPU_DEVICE_RESOURCES``, set
    once before any decision, ``taugate.devices.configure``); settings that do not load are left
    for the command to report."""
    from pydantic import ValidationError

    from taugate import devices
    from taugate.settings import Settings

    try:
        extra = Settings().gpu_device_resources
    except ValidationError:
        return
    devices.configure(extra)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``taugate`` console script; returns the process exit code."""
    parser = build_parser()
    return _run(parser, parser.parse_args(argv))


def kubectl_plugin(argv: list[str] | None = None) -> int:
    """Entry point of ``kubectl-tau``: ``kubectl tau status RUN`` runs ``taugate status RUN``.

    Only the run commands (``status``, ``evidence``, from ``controllers.recorder_commands``) are
    offered, under the name kubectl shows (``kubectl tau``); ``argv`` defaults to ``sys.argv[1:]``.
    Returns the process exit code (0 success, 1 a check failed, 2 bad input)."""
    from taugate.controllers.recorder_commands import add_commands

    parser = argparse.ArgumentParser(prog="kubectl tau", description="Where a GPU run stands, and its evidence record.")
    parser.add_argument("--version", action="version", version=f"kubectl-tau (taugate {installed_version()})",
                        help="print the installed taugate version and exit")
    add_commands(parser.add_subparsers(dest="command", metavar="COMMAND"))
    return _run(parser, parser.parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())

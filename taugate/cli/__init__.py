"""The ``taugate`` command: the composition root over core, webhook, controllers and certs.

Every subcommand lives in this package, one module per command family; each module's
``add_commands(subparsers)`` registers its parsers with ``set_defaults(func=...)`` where
``func(args) -> int`` is the exit code.

Exit codes everywhere: 0 success / allowed, 1 denied or a check failed, 2 bad input (one line on
stderr naming the file and the problem).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every part's subcommands registered."""
    parser = argparse.ArgumentParser(prog="taugate",
                                     description="Server-side admission for GPU workloads on Kubernetes.")
    parser.add_argument("--version", action="version", version=f"taugate {installed_version()}",
                        help="print the installed taugate version and exit")
    from taugate.cli import admit, certs, operator, policy, runs, serve  # the order `taugate --help` lists

    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for commands in (admit, serve, policy, operator, runs, certs):
        commands.add_commands(sub)
    return parser


def installed_version() -> str:
    """The version of the installed ``taugate`` distribution (its package metadata, as pip
    shows it), or a sentence saying there is none (the source tree run without installing)."""
    try:
        return importlib.metadata.version("taugate")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed as a package: no version metadata)"


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

    Only the run commands (``status``, ``evidence``, from ``cli.runs``) are
    offered, under the name kubectl shows (``kubectl tau``); ``argv`` defaults to ``sys.argv[1:]``.
    Returns the process exit code (0 success, 1 a check failed, 2 bad input)."""
    from taugate.cli.runs import add_commands

    parser = argparse.ArgumentParser(prog="kubectl tau", description="Where a GPU run stands, and its evidence record.")
    parser.add_argument("--version", action="version", version=f"kubectl-tau (taugate {installed_version()})",
                        help="print the installed taugate version and exit")
    add_commands(parser.add_subparsers(dest="command", metavar="COMMAND"))
    return _run(parser, parser.parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())

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
import sys

PARTS = ("webhook.commands", "controllers.commands", "certs.commands")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every part's subcommands registered."""
    parser = argparse.ArgumentParser(prog="taugate", description="Server-side admission for GPU workloads on Kubernetes.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in PARTS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``taugate`` console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def kubectl_plugin() -> int:
    """Entry point of ``kubectl-tau``: ``kubectl tau status RUN`` runs ``taugate status RUN``."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

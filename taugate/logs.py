"""How ``taugate serve`` and ``taugate operator`` log: one standard-error handler on the root logger,
``--log-level``/``--log-format`` over ``TAUGATE_LOG_LEVEL``/``TAUGATE_LOG_FORMAT`` (the chart's
``logging.*`` values); a ``json`` line carries every ``extra=`` field, through python-json-logger
(a dependency of kopf already).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("json", "text")
LEVEL_VARIABLE = "TAUGATE_LOG_LEVEL"
FORMAT_VARIABLE = "TAUGATE_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

DROPPED_FIELDS = ("settings", "k8s_skip", "taskName", "color_message")
"""Record attributes never written: kopf's ``settings`` (its whole configuration object, on every line
of an object's logger) and ``k8s_skip`` (whether kopf posts the line as an Event), asyncio's task name
and uvicorn-style duplicates."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-level`` and ``--log-format`` to a long-running command's parser."""
    parser.add_argument("--log-level", choices=LEVELS, default=None,
                        help=f"the lowest level logged (default: ${LEVEL_VARIABLE}, else info)")
    parser.add_argument("--log-format", choices=FORMATS, default=None,
                        help=f"json: one JSON object a line; text: for a terminal (default: ${FORMAT_VARIABLE}, "
                             f"else json)")


def _choice(flag: str | None, variable: str, allowed: tuple[str, ...], default: str,
            environ: Mapping[str, str]) -> str:
    if flag is not None:
        return flag
    value = environ.get(variable, "").strip().lower() or default
    if value not in allowed:
        raise ValueError(f"{variable}={environ.get(variable)!r}: expected one of {', '.join(allowed)}")
    return value


def chosen(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The level and format: the flags, else the variables, else ``info`` and ``json``. Raises
    ``ValueError`` (one line naming the variable, the value and what is allowed) for a variable the
    flags do not override and that names no level or format."""
    env = os.environ if environ is None else environ
    return (_choice(getattr(args, "log_level", None), LEVEL_VARIABLE, LEVELS, "info", env),
            _choice(getattr(args, "log_format", None), FORMAT_VARIABLE, FORMATS, "json", env))


def formatter(fmt: str) -> logging.Formatter:
    """The formatter of ``fmt`` (``json`` or ``text``)."""
    if fmt == "text":
        return logging.Formatter(TEXT_FORMAT)
    return JsonFormatter("%(levelname)s %(name)s %(message)s", timestamp="time",
                         rename_fields={"levelname": "level", "name": "logger"},
                         reserved_attrs=[*JsonFormatter().reserved_attrs, *DROPPED_FIELDS])


@contextlib.contextmanager
def timed(logger: logging.Logger, what: str) -> Iterator[None]:
    """Log ``<what> in N s`` at info when the block ends, however it ends (each part of a stop)."""
    start = time.monotonic()
    try:
        yield
    finally:
        logger.info("%s in %.1f s", what, time.monotonic() - start)


_configured: list[tuple[str, str]] = []


def configured() -> tuple[str, str] | None:
    """The level and format ``configure`` last set, or None: what a child process of the command
    (the recorder's) logs with."""
    return _configured[-1] if _configured else None


def configure(level: str, fmt: str, stream: TextIO | None = None) -> logging.Handler:
    """Make one handler on ``stream`` (standard error) the root logger's only one, at ``level`` in
    ``fmt``; returns it."""
    _configured[:] = [(level, fmt)]
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler

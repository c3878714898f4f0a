"""argparse value types shared by the subcommands of every part (each raises
``argparse.ArgumentTypeError``, which argparse turns into one line naming the option)."""

from __future__ import annotations

import argparse


def seconds(text: str) -> float:
    """A duration in seconds, >= 0 (``--deadline 1.5``)."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not s >= 0 or s == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text}")
    return s


def port(text: str) -> int:
    """A TCP port, 0 (pick a free one) to 65535."""
    try:
        p = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= p <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {p}")
    return p

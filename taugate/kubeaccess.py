"""Kubernetes client access problems, explained in one line: shared by every part that talks to
the API server (controllers, certs), so every command names a missing kubeconfig and an
unreachable API server the same way."""

from __future__ import annotations

import os
import socket
import ssl

import urllib3


def connection_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words (``Connection refused``, ``connection timed out``,
    ``cannot resolve the host name``, ``TLS certificate verification failed: ...``), found by
    walking urllib3's ``MaxRetryError.reason`` and the exception chain down to the socket error."""
    seen: set[int] = set()
    x: BaseException | None = exc
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        if isinstance(x, ssl.SSLCertVerificationError):
            return f"TLS certificate verification failed: {x.verify_message or x.reason}"
        if isinstance(x, ssl.SSLError):
            return f"TLS error: {x.reason or x.__class__.__name__}"
        if isinstance(x, socket.gaierror):
            return f"cannot resolve the host name ({x.strerror})"
        if isinstance(x, urllib3.exceptions.ConnectTimeoutError) and not isinstance(
                x, urllib3.exceptions.NewConnectionError):  # urllib3 2 derives one from the other
            return "connection timed out"
        if isinstance(x, (urllib3.exceptions.ReadTimeoutError, socket.timeout)):
            return "no answer (read timed out)"
        if isinstance(x, OSError) and x.strerror:
            return x.strerror
        nested = getattr(x, "reason", None)
        x = nested if isinstance(nested, BaseException) else (x.__cause__ or x.__context__)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def kubeconfig_problem(spec: str, origin: str | None = None) -> str | None:
    """Why the kubeconfig ``spec`` (one path, or several joined by ``os.pathsep`` as in
    ``$KUBECONFIG``) cannot be used, as one line naming the file(s), or None. ``origin`` (e.g.
    ``$KUBECONFIG``) is added after the name. Like kubectl, a list is usable when at least one
    of its files exists; an existing file must be a readable regular file."""
    paths = [os.path.expanduser(p) for p in spec.split(os.pathsep) if p]
    named = ", ".join(paths) or repr(spec)
    where = f"{named} (from {origin})" if origin else named
    existing = [p for p in paths if os.path.exists(p)]
    if not existing:
        if len(paths) > 1:
            return f"{where}: none of these kubeconfig files exists"
        return f"{where}: the kubeconfig file does not exist"
    for p in existing:
        label = f"{p} (from {origin})" if origin else p
        if os.path.isdir(p):
            return f"{label}: is a directory, not a kubeconfig file"
        try:
            with open(p, "rb"):
                pass
        except OSError as e:
            return f"{label}: the kubeconfig file cannot be read: {e.strerror or e.__class__.__name__}"
    return None

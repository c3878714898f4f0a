"""Kubernetes API access shared by every part: ``Resource``, metadata accessors, the API errors
(``KubeError`` and its kinds), and connection problems in one line, so every command names a
missing kubeconfig and an unreachable API server the same way. The client is ``taugate.kube.Kube``.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass

import urllib3

from taugate.files import MAX_KUBECONFIG_BYTES, InputError, read_limited


@dataclass(frozen=True)
class Resource:
    """A REST resource: ``group`` ('' for core), ``version``, ``plural``, ``kind``, ``namespaced``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` alone for the core group (``v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path (Kubernetes API conventions): ``/api/v1/...`` for core, ``/apis/G/V/...``
        otherwise; a namespaced resource without ``namespace`` addresses all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}"


SECRETS = Resource("", "v1", "secrets", "Secret", True)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                                           "MutatingWebhookConfiguration", False)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                                             "ValidatingWebhookConfiguration", False)


class KubeError(RuntimeError):
    """An API error: ``status`` is the HTTP status (0 when the server was not reached);
    ``warnings`` the API server's warnings on the refused request (a webhook's, as kubectl prints
    them above the error)."""

    def __init__(self, status: int, message: str, warnings: tuple[str, ...] = ()):
        super().__init__(message)
        self.status = status
        self.warnings = warnings


class WatchExpired(KubeError):
    """The watch's resourceVersion is too old (HTTP 410 Gone): list again, then watch."""


class KubeUnreachable(KubeError):
    """The API server at ``host`` was not reached (refused, timed out, name not resolved, TLS
    failed); ``reason`` says which. Its message is ``cannot reach the Kubernetes API at HOST: REASON``."""

    def __init__(self, host: str, reason: str):
        super().__init__(0, f"cannot reach the Kubernetes API at {host}: {reason}")
        self.host = host
        self.reason = reason


class KubeConfigError(ValueError):
    """No usable client configuration (one line: which file or source, and why)."""


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
    of its files exists; an existing file must be a readable file of at most
    ``MAX_KUBECONFIG_BYTES``."""
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
            read_limited(p, MAX_KUBECONFIG_BYTES, "kubeconfig files")  # what the client library then reads whole
        except InputError as e:
            return f"{label}: the kubeconfig file cannot be read: {str(e).removeprefix(p + ': ')}"
    return None
VALIDATING_ADMISSION_POLICIES = Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
                                         "ValidatingAdmissionPolicy", False)
VALIDATING_ADMISSION_POLICY_BINDINGS = Resource("admissionregistration.k8s.io", "v1",
                                                "validatingadmissionpolicybindings",
                                                "ValidatingAdmissionPolicyBinding", False)

"""Leader election of the operator on a ``coordination.k8s.io/v1`` Lease, with client-go's
semantics (``k8s.io/client-go/tools/leaderelection``, as controller-runtime's managers use it).

Every replica is a candidate with its own identity (``holderIdentity``: the pod's name and a
UUID). A candidate takes the Lease when it does not exist (create), names no holder, or has
not changed for ``leaseDurationSeconds`` as measured on the candidate's own monotonic clock
from the moment it last saw the record change (client-go's ``observedTime``: the holders' wall
clocks are never compared). The holder renews every ``retry_period`` seconds; every write
carries the ``resourceVersion`` it was decided on, so of two candidates racing for an expired
Lease one wins and the other gets HTTP 409. A holder that sees another holder, or that has not
renewed for ``renew_deadline`` seconds (its watchdog does not wait on a hanging request), calls
``on_lost``, which in the operator logs one line and exits the process with status 1 at once,
as controller-runtime does (``leader election lost``): Kubernetes restarts the pod, which comes
back as a standby. ``renew_deadline < lease_duration``, so a deposed holder has stopped before
anyone else may take over. A holder that stops cleanly releases the Lease (holder cleared,
duration 1 s; client-go's ``ReleaseOnCancel``), so a rolling update hands over in seconds.

The decisions are one pure function over plain data (``decide``: the Lease as served, what the
candidate saw last, the time, its identity → create, update or wait); ``LeaderElector`` is the
thin I/O around it, through the operator's one client, ``taugate.kube.Kube``. Writes are JSON
merge patches carrying ``metadata.resourceVersion``: the API server refuses one whose version is
not current with 409 (optimistic concurrency exactly as client-go's PUT), and the RBAC verb is
``patch`` like every other write of the operator. ``StandbyHealth`` answers the liveness probe
while a replica stands by (kopf, which serves it for a leader, is not running yet).

Why not the ``kubernetes`` package's ``kubernetes.leaderelection``: its acquire loop sleeps with
``time.sleep`` and cannot be stopped while standing by; its renew loop checks the deadline only
between attempts, on the wall clock, with API calls that carry no timeout, so a request that
hangs keeps a deposed leader acting past the deadline; it calls ``onstopped_leading`` only after
that loop returns, runs the leader's work in a thread of its own, keeps no ``leaseTransitions``,
never releases the Lease, and goes through its own ``CoordinationV1Api`` models beside the
operator's ``Kube``. What it decides is a few dozen lines, here one pure function with tests.
"""

from __future__ import annotations

import http.server
import logging
import os
import random
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from taugate.kube import Kube, KubeError
from taugate.kubeaccess import Resource

log = logging.getLogger("taugate.leader")

LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
JITTER_FACTOR = 1.2
"""client-go's ``JitterFactor``: a standby retries every ``retry_period`` to ``retry_period *
(1 + JITTER_FACTOR)`` seconds, and ``renew_deadline`` must exceed ``JITTER_FACTOR * retry_period``."""
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class LeaderElection(BaseSettings):
    """``taugate operator --leader-elect`` (``TAUGATE_LEADER_ELECTION_*``): the Lease
    ``lease_name`` in ``namespace`` (default: ``$POD_NAMESPACE``, else the pod's service account
    namespace), ``identity`` (default: ``$POD_NAME`` or the host name, ``_`` and a UUID), and
    client-go's timing: ``lease_duration_seconds`` (15), ``renew_deadline_seconds`` (10),
    ``retry_period_seconds`` (2)."""

    model_config = SettingsConfigDict(env_prefix="TAUGATE_LEADER_ELECTION_")

    enabled: bool = False
    lease_name: str = Field(default="taugate-operator", min_length=1, max_length=253)
    namespace: str | None = None
    identity: str | None = None
    lease_duration_seconds: int = Field(default=15, ge=1)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_period_seconds: float = Field(default=2.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElection:
        problem = timing_problem(self.lease_duration_seconds, self.renew_deadline_seconds, self.retry_period_seconds)
        if problem:
            field, text = problem
            raise PydanticCustomError("lease_timing", text, {"at": field})
        return self

    def lease_namespace(self) -> str | None:
        """``namespace``, ``$POD_NAMESPACE`` or the pod's service account namespace; None when
        none is known (the command then asks for ``--leader-elect-namespace``)."""
        if self.namespace:
            return self.namespace
        if os.environ.get("POD_NAMESPACE"):
            return os.environ["POD_NAMESPACE"]
        try:
            with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
                return f.read(254).strip() or None
        except OSError:
            return None

    def holder_identity(self) -> str:
        """``identity``, else ``<pod name or host name>_<uuid4>`` (client-go's convention): unique
        per process, so a restarted pod never mistakes its predecessor's Lease for its own."""
        return self.identity or f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


def timing_problem(lease_duration: float, renew_deadline: float,
                   retry_period: float) -> tuple[str, str] | None:
    """client-go's checks (``NewLeaderElector``): the lease outlasts the renew deadline, which
    outlasts ``JITTER_FACTOR`` retry periods. ``(field, what is wrong)``, or None when they hold."""
    if lease_duration <= renew_deadline:
        return "renew_deadline_seconds", (
            f"is {renew_deadline:g}; it must be below the lease duration ({lease_duration:g} s): a leader that "
            f"cannot renew must stop before a standby may take over")
    if renew_deadline <= JITTER_FACTOR * retry_period:
        return "retry_period_seconds", (
            f"is {retry_period:g}; the renew deadline ({renew_deadline:g} s) must be greater than "
            f"{JITTER_FACTOR:g} x the retry period")
    return None


# ---- the decisions (pure) --------------------------------------------------------------------------

@dataclass(frozen=True)
class Record:
    """The election record of a Lease's ``spec`` (client-go's ``LeaderElectionRecord``)."""

    holder: str
    lease_duration_seconds: int
    acquire_time: str
    renew_time: str
    transitions: int


@dataclass(frozen=True)
class Seen:
    """What a candidate saw last: the record and its own monotonic time when the record last changed."""

    record: Record
    at: float


@dataclass(frozen=True)
class Write:
    """Create the Lease (``resource_version`` None) or merge-patch it at ``resource_version``;
    ``acquiring``: the write makes this candidate the holder (it was not)."""

    body: dict[str, Any]
    resource_version: str | None
    acquiring: bool


@dataclass(frozen=True)
class Wait:
    """Another candidate holds the Lease; it expires for this one ``expires_in`` seconds from now
    unless renewed."""

    holder: str
    expires_in: float


Step = Write | Wait


def record_of(lease: dict[str, Any]) -> Record:
    spec = lease.get("spec") or {}
    return Record(holder=str(spec.get("holderIdentity") or ""),
                  lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
                  acquire_time=str(spec.get("acquireTime") or ""), renew_time=str(spec.get("renewTime") or ""),
                  transitions=int(spec.get("leaseTransitions") or 0))


def micro_time(at: datetime) -> str:
    """A ``metav1.MicroTime`` (RFC 3339, microseconds, UTC)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def decide(lease: dict[str, Any] | None, seen: Seen | None, now: float, wall: datetime, identity: str,
           lease_duration_seconds: int) -> tuple[Step, Seen | None]:
    """client-go's ``tryAcquireOrRenew`` as a decision. ``lease``: the Lease as served (None: it
    does not exist); ``seen``: what this candidate saw before; ``now``: its monotonic clock;
    ``wall``: the time written into the record. Returns the step and what is now seen.

    - no Lease: create it, holding it;
    - held by ``identity``: renew (``renewTime`` now; ``acquireTime`` and ``leaseTransitions`` kept);
    - held by another whose record this candidate has seen unchanged for its
      ``leaseDurationSeconds`` (counted from when it changed, on ``now``'s clock), or held by
      nobody: take it (``acquireTime`` now, ``leaseTransitions`` + 1);
    - else wait."""
    stamp = micro_time(wall)
    if lease is None:
        body = {"metadata": {}, "spec": {"holderIdentity": identity, "leaseDurationSeconds": lease_duration_seconds,
                                         "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}}
        return Write(body, None, acquiring=True), None
    record = record_of(lease)
    if seen is None or seen.record != record:
        seen = Seen(record, now)
    if record.holder and record.holder != identity:
        duration = record.lease_duration_seconds or lease_duration_seconds
        expires_in = seen.at + duration - now
        if expires_in > 0:
            return Wait(record.holder, expires_in), seen
    holding = record.holder == identity
    spec = {"holderIdentity": identity, "leaseDurationSeconds": lease_duration_seconds,
            "acquireTime": record.acquire_time if holding and record.acquire_time else stamp, "renewTime": stamp,
            "leaseTransitions": record.transitions if holding else record.transitions + 1}
    rv = str((lease.get("metadata") or {}).get("resourceVersion") or "")
    return Write({"metadata": {"resourceVersion": rv}, "spec": spec}, rv, acquiring=not holding), seen


def release_body(lease: dict[str, Any], identity: str, wall: datetime) -> dict[str, Any] | None:
    """The patch that gives up the Lease (client-go's ``release``: no holder, a duration of 1 s,
    the transitions kept), or None when ``identity`` no longer holds it."""
    record = record_of(lease)
    if record.holder != identity:
        return None
    stamp = micro_time(wall)
    return {"metadata": {"resourceVersion": str((lease.get("metadata") or {}).get("resourceVersion") or "")},
            "spec": {"holderIdentity": None, "leaseDurationSeconds": 1, "acquireTime": stamp, "renewTime": stamp,
                     "leaseTransitions": record.transitions}}


def acquire_delay(retry_period: float, draw: float) -> float:
    """The pause between a standby's attempts for ``draw`` in [0, 1): client-go's
    ``wait.JitterUntil(retryPeriod, JitterFactor)``."""
    return retry_period * (1.0 + JITTER_FACTOR * draw)


# ---- the I/O -----------------------------------------------------------------------------------------

def exit_at_once(reason: str) -> None:
    """The operator's ``on_lost``: one line, then the process ends with status 1 at once (no
    cleanup runs that could write): Kubernetes restarts the container as a standby."""
    log.error("lost the leader lease (%s): stopping at once; the restarted process stands by", reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(1)


class LeaderElector:
    """One candidate for the Lease ``name`` in ``namespace`` as ``identity``, through ``kube``
    (give it ``request_timeout`` shorter than the renew deadline). ``acquire`` stands by until it
    holds the Lease; ``keep`` renews it from two threads (the renewer and its watchdog) and calls
    ``on_lost`` once when it is lost; ``release`` gives it up. ``clock`` is monotonic seconds,
    ``wall`` the time written into the record."""

    def __init__(self, kube: Kube, config: LeaderElection, namespace: str, identity: str, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.kube = kube
        self.config = config
        self.namespace = namespace
        self.identity = identity
        self.clock = clock
        self.wall = wall
        self.seen: Seen | None = None
        self.renewed_at: float | None = None  # clock() of the last successful write
        self.stopping = threading.Event()
        self.lost = threading.Event()
        self.threads: list[threading.Thread] = []
        self.waiting_for: str | None = None

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.config.lease_name}"

    def try_acquire_or_renew(self) -> Step:
        """One round: read the Lease, decide, write. Returns the step taken; a ``Write`` means
        this candidate holds the Lease now. Raises ``KubeError`` (a 409: another write won)."""
        lease = self.kube.get(LEASES, self.config.lease_name, self.namespace)
        step, self.seen = decide(lease, self.seen, self.clock(), self.wall(), self.identity,
                                 self.config.lease_duration_seconds)
        if isinstance(step, Wait):
            return step
        if step.resource_version is None:
            body = dict(step.body, metadata={"name": self.config.lease_name, "namespace": self.namespace})
            stored = self.kube.create(LEASES, body, exist_ok=False)
        else:
            stored = self.kube.patch(LEASES, self.config.lease_name, step.body, self.namespace)
        self.seen = Seen(record_of(stored or step.body), self.clock())
        self.renewed_at = self.clock()
        return step

    def acquire(self, stop: Callable[[], bool] = lambda: False) -> bool:
        """Stand by until this candidate holds the Lease (True) or ``stop()`` is true (False);
        logs one line when it becomes the leader."""
        while not stop() and not self.stopping.is_set():
            try:
                step = self.try_acquire_or_renew()
            except KubeError as e:
                log.info("leader lease %s: %s; retrying", self.where, e)
                step = None
            if isinstance(step, Write):
                log.info("became the leader: lease %s held by %s", self.where, self.identity)
                return True
            if isinstance(step, Wait) and step.holder != self.waiting_for:
                self.waiting_for = step.holder
                log.info("standing by: lease %s held by %s", self.where, step.holder)
            self.stopping.wait(acquire_delay(self.config.retry_period_seconds, random.random()))
        return False

    def keep(self, on_lost: Callable[[str], None]) -> None:
        """Renew every ``retry_period`` from a thread; a second thread watches the renew deadline.
        ``on_lost(reason)`` is called once, from either thread, when another holder is seen or no
        renewal succeeded within ``renew_deadline`` seconds."""
        def lose(reason: str) -> None:
            if not self.stopping.is_set() and not self.lost.is_set():
                self.lost.set()
                on_lost(reason)

        def renew() -> None:
            while not self.stopping.wait(self.config.retry_period_seconds) and not self.lost.is_set():
                try:
                    step = self.try_acquire_or_renew()
                except KubeError as e:
                    log.warning("leader lease %s: renewal failed: %s", self.where, e)
                    continue
                if isinstance(step, Wait):
                    lose(f"lease {self.where} now held by {step.holder}")
                    return

        def watch() -> None:
            deadline = self.config.renew_deadline_seconds
            while not self.stopping.is_set() and not self.lost.is_set():
                late = self.clock() - (self.renewed_at or self.clock())
                if late >= deadline:
                    lose(f"lease {self.where} not renewed for {late:.1f} s (renew deadline {deadline:g} s)")
                    return
                self.stopping.wait(min(deadline - late, self.config.retry_period_seconds / 2))

        self.threads = [threading.Thread(target=renew, name="taugate-lease-renew", daemon=True),
                        threading.Thread(target=watch, name="taugate-lease-watchdog", daemon=True)]
        for t in self.threads:
            t.start()

    def release(self) -> None:
        """Stop renewing and give up the Lease when still held (best effort: a failure is logged,
        and the Lease then expires on its own)."""
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=self.config.renew_deadline_seconds)
        if self.lost.is_set():
            return
        try:
            lease = self.kube.get(LEASES, self.config.lease_name, self.namespace)
            body = release_body(lease, self.identity, self.wall()) if lease else None
            if body is not None:
                self.kube.patch(LEASES, self.config.lease_name, body, self.namespace)
                log.info("released the leader lease %s", self.where)
        except KubeError as e:
            log.warning("leader lease %s: release failed (%s); it expires on its own", self.where, e)


class StandbyHealth:
    """The liveness endpoint while a replica stands by (the same ``http://HOST:PORT/PATH`` kopf
    serves once it leads): ``GET PATH`` answers 200 ``standby``. ``close`` frees the port."""

    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        path = parts.path

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the name http.server calls
                ok = self.path.split("?", 1)[0] == path
                body = b"standby\n" if ok else b"not found\n"
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: not logged
                pass

        self.server = http.server.ThreadingHTTPServer((parts.hostname or "", parts.port or 80), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="taugate-standby-health", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

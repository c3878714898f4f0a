"""The admission server's Prometheus metrics (``AdmissionMetrics``)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from taugate.webhook.connections import ByteBudget, ConnectionGuard
from taugate.webhook.routes import ROUTES

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01,
                   0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
"""Seconds; sub-millisecond resolution where admission normally answers (~0.3-2 ms)."""


class AdmissionMetrics:
    """The server's Prometheus metrics (docs/metrics.md), in their own registry (``registry``); the
    connection and bytes-in-flight gauges are set with ``watch()``.
    """

    def __init__(self, age: Callable[[], float], registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("taugate_admission_requests", "AdmissionReviews answered",
                                ("webhook", "kind", "operation", "decision"), registry=r)
        self.duration = Histogram("taugate_admission_duration_seconds", "Time to answer an AdmissionReview",
                                  ("webhook",), buckets=LATENCY_BUCKETS, registry=r)
        self.deadline = Counter("taugate_admission_deadline_exceeded", "Reviews answered by the deadline",
                                ("webhook",), registry=r)
        self.violations = Counter("taugate_admission_violations", "Policy violations found",
                                  ("webhook", "policy", "action"), registry=r)
        self.policy_failures = Counter("taugate_policy_runtime_failures", "Policies that failed at run time on "
                                       "a request (each judged by its own enforcement action)",
                                       ("webhook", "policy"), registry=r)
        self.state_age = Gauge("taugate_state_age_seconds", "Age of the cluster state in use", registry=r)
        self.state_age.set_function(age)
        self.cert_reloads = Counter("taugate_certificate_reloads", "Serving certificates reloaded", registry=r)
        for route in ROUTES:  # every series exists from the start, at 0
            self.deadline.labels(route.path)
            self.duration.labels(route.path)
        self.connections_open = Gauge("taugate_connections_open", "Open HTTPS connections", registry=r)
        self.bytes_in_flight = Gauge("taugate_bytes_in_flight", "Bytes of large request bodies being handled",
                                     registry=r)
        self.connections_closed = Counter("taugate_connections_closed", "Connections closed by a limit",
                                          ("reason",), registry=r)

    def watch(self, guard: ConnectionGuard, budget: ByteBudget) -> None:
        """Read the open connections and the bytes in flight from ``guard`` and ``budget`` at
        scrape time, and count the guard's closes."""
        self.connections_open.set_function(lambda: max(guard.sockets, len(guard.open)))
        self.bytes_in_flight.set_function(lambda: budget.used)
        children = {reason: self.connections_closed.labels(reason) for reason in guard.closed}
        guard.on_close = lambda reason: children[reason].inc()

    def answered(self, path: str, kind: str, operation: str, decision: str, seconds: float) -> None:
        """Count one answered review and observe its duration (seconds)."""
        self.requests.labels(path, kind, operation, decision).inc()
        self.duration.labels(path).observe(seconds)

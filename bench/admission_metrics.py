"""The API server's own view of admission webhooks, from its ``/metrics`` text (pure functions).

kube-apiserver records every call to an admission webhook in the histogram
``apiserver_admission_webhook_admission_duration_seconds`` with the labels ``name`` (the webhook's
name in its configuration, e.g. ``mutate.workloads.tau.azure.com``), ``type`` (``admit`` for a
mutating webhook, ``validating`` for a validating one), ``operation`` (``CREATE``, ...) and
``rejected`` (k8s.io/apiserver ``pkg/admission/metrics/metrics.go``, ``ObserveWebhook``; the
buckets there are 0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 25 seconds). The time includes the TLS
round trip and the webhook's answer, as the API server waits for it.

``parse`` reads one scrape, ``difference`` subtracts an earlier scrape (the calls made between
the two), ``summarize`` gives per (webhook name, type): calls, mean (exact: sum / count) and p50 /
p99 interpolated in the buckets as Prometheus' ``histogram_quantile`` does
(``promql/quantile.go``, ``bucketQuantile``: linear within the bucket, the lowest bucket starting
at 0, a quantile in the ``+Inf`` bucket reported as the highest finite bound).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

METRIC = "apiserver_admission_webhook_admission_duration_seconds"
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class Histogram:
    """One histogram series: cumulative bucket counts by upper bound (seconds, ``inf`` last),
    the sum of observations (seconds) and their count."""

    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made after ``earlier`` (a scrape of the same series); a series the
        earlier scrape lacks counts from zero. Raises ``ValueError`` when a count went down (the
        API server restarted between the scrapes)."""
        out = Histogram({le: c - earlier.buckets.get(le, 0.0) for le, c in self.buckets.items()},
                        self.sum - earlier.sum, self.count - earlier.count)
        if out.count < 0 or any(c < 0 for c in out.buckets.values()):
            raise ValueError("a histogram count went down between the scrapes (was the API server restarted?)")
        return out

    def plus(self, other: Histogram) -> Histogram:
        """Both histograms' observations together (same bucket bounds)."""
        les = set(self.buckets) | set(other.buckets)
        return Histogram({le: self.buckets.get(le, 0.0) + other.buckets.get(le, 0.0) for le in les},
                         self.sum + other.sum, self.count + other.count)

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0 < q < 1) in seconds, interpolated in the buckets as Prometheus'
        ``histogram_quantile``; None with no observations."""
        if self.count <= 0:
            return None
        bounds = sorted(self.buckets)
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le in bounds:
            cum = self.buckets[le]
            if cum >= rank:
                if math.isinf(le):  # in the +Inf bucket: the highest finite bound, as Prometheus says
                    return lower
                in_bucket = cum - below
                return lower + (le - lower) * ((rank - below) / in_bucket if in_bucket else 0.0)
            lower, below = le, cum
        return lower

    @property
    def mean(self) -> float | None:
        """Mean seconds per observation (exact), None with none."""
        return self.sum / self.count if self.count > 0 else None


Key = tuple[str, ...]
"""(webhook name, type, operation, rejected) as the API server labels a series (or the values of
``parse``'s ``labels``)."""
LABELS = ("name", "type", "operation", "rejected")


def parse(text: str, metric: str = METRIC, labels: tuple[str, ...] = LABELS) -> dict[Key, Histogram]:
    """Every series of the histogram ``metric`` in a Prometheus text exposition, keyed by the
    values of ``labels`` (the API server's by default; taugate's own
    ``taugate_admission_duration_seconds`` is labelled ``webhook``)."""
    out: dict[Key, Histogram] = {}
    for line in text.splitlines():
        if not line.startswith(metric):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, value = m.group("name"), float(m.group("value"))
        found = dict(_LABEL.findall(m.group("labels") or ""))
        key = tuple(found.get(label, "") for label in labels)
        h = out.setdefault(key, Histogram())
        if name == metric + "_bucket":
            h.buckets[float(found["le"])] = value  # float("+Inf") is inf
        elif name == metric + "_sum":
            h.sum = value
        elif name == metric + "_count":
            h.count = value
    return out


def difference(after: dict[Key, Histogram], before: dict[Key, Histogram]) -> dict[Key, Histogram]:
    """The calls made between two scrapes, series by series (series with no new call left out)."""
    out = {}
    for key, h in after.items():
        d = h.minus(before.get(key, Histogram()))
        if d.count > 0:
            out[key] = d
    return out


def add(total: dict[Key, Histogram], more: dict[Key, Histogram]) -> dict[Key, Histogram]:
    """Two differences together (e.g. the rounds of one configuration)."""
    out = dict(total)
    for key, h in more.items():
        out[key] = out[key].plus(h) if key in out else h
    return out


def handler_summary(series: dict[Key, Histogram]) -> dict[str, dict]:
    """taugate's own time per review (``taugate_admission_duration_seconds{webhook}`` differenced,
    keyed by the one label): per webhook ``calls``, ``mean_ms``, ``p50_ms``, ``p99_ms``."""
    return {key[0]: {"calls": int(h.count), "mean_ms": _ms(h.mean), "p50_ms": _ms(h.quantile(0.5)),
                     "p99_ms": _ms(h.quantile(0.99))} for key, h in sorted(series.items())}


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)


def summarize(series: dict[Key, Histogram], operation: str = "CREATE") -> list[dict]:
    """Per (webhook name, type) of ``operation``'s calls, rejected or not: ``webhook``, ``type``
    (admit | validating), ``calls``, ``rejected`` (calls the webhook refused), ``mean_ms``,
    ``p50_ms`` and ``p99_ms`` (bucket-interpolated, so coarse: the API server's buckets are 5, 25,
    100 ms wide at the low end), sorted by webhook name then type."""
    by: dict[tuple[str, str], Histogram] = {}
    rejected: dict[tuple[str, str], float] = {}
    for key, h in series.items():
        name, typ, op, rej = key
        if op != operation:
            continue
        by[(name, typ)] = by[(name, typ)].plus(h) if (name, typ) in by else h
        if rej == "true":
            rejected[(name, typ)] = rejected.get((name, typ), 0.0) + h.count

    return [{"webhook": name, "type": typ, "calls": int(h.count), "rejected": int(rejected.get((name, typ), 0)),
             "mean_ms": _ms(h.mean), "p50_ms": _ms(h.quantile(0.5)), "p99_ms": _ms(h.quantile(0.99))}
            for (name, typ), h in sorted(by.items())]

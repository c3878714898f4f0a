"""The end-to-end benchmark's reading of the API server's webhook histograms
(``bench/admission_metrics.py``), on two real scrapes of kube-apiserver's ``/metrics`` taken before
and after 10 creates of the Kueue sample Job with taugate's webhooks in force (``tests/data/bench``, the
``apiserver_admission_*`` lines of a ``python bench/e2e.py --n 10 --rounds 1`` run)."""

from __future__ import annotations

import math

import pytest

from bench import admission_metrics as am
from tests.paths import REPO

DATA = REPO / "tests" / "data" / "bench"
MUTATE = ("mutate.workloads.tau.azure.com", "admit", "CREATE", "false")


@pytest.fixture(scope="module")
def scrapes() -> tuple[dict, dict]:
    return (am.parse((DATA / "apiserver-metrics-taugate-before.txt").read_text()),
            am.parse((DATA / "apiserver-metrics-taugate-after.txt").read_text()))


def test_a_scrape_gives_every_webhook_series_with_its_buckets_sum_and_count(scrapes):
    _, after = scrapes
    h = after[MUTATE]
    assert h.count == 64 and h.sum == pytest.approx(3.6921433830000003)
    assert sorted(h.buckets) == [0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 25, math.inf]
    assert h.buckets[0.025] == 12 and h.buckets[math.inf] == 64
    names = {k[0] for k in after}
    assert {"mutate.workloads.tau.azure.com", "validate.workloads.tau.azure.com", "mrayjob.kb.io",
            "vrayjob.kb.io"} <= names
    assert {k[1] for k in after} == {"admit", "validating"}
    # Other apiserver_admission_* metrics on the same page (request totals, steps) are not read as it.
    assert all(set(v.buckets) for v in after.values())


def test_the_difference_of_two_scrapes_is_the_calls_between_them(scrapes):
    before, after = scrapes
    d = am.difference(after, before)
    h = d[MUTATE]
    assert h.count == 10 and h.sum == pytest.approx(3.6921433830000003 - 3.368538972)
    assert h.buckets[0.005] == 0 and h.buckets[0.025] == 2 and h.buckets[0.1] == 10 and h.buckets[math.inf] == 10
    assert all(v.count > 0 for v in d.values())  # series with no new call are left out
    assert am.difference(before, before) == {}
    with pytest.raises(ValueError, match="went down"):
        am.difference(before, after)


def test_quantiles_are_interpolated_in_the_buckets_as_prometheus_histogram_quantile_does(scrapes):
    before, after = scrapes
    h = am.difference(after, before)[MUTATE]
    # rank 5 of 10 falls in (25 ms, 100 ms], which holds calls 3..10: 25 + 75 * 3/8
    assert h.quantile(0.5) == pytest.approx(0.053125)
    assert h.quantile(0.99) == pytest.approx(0.025 + 0.075 * 7.9 / 8)
    assert h.mean == pytest.approx((3.6921433830000003 - 3.368538972) / 10)
    assert am.Histogram({0.1: 0, math.inf: 4}, 9.0, 4).quantile(0.5) == 0.1  # in +Inf: the highest finite bound
    assert am.Histogram({0.1: 4, math.inf: 4}, 0.2, 4).quantile(0.5) == pytest.approx(0.05)  # lowest bucket from 0
    assert am.Histogram().quantile(0.5) is None and am.Histogram().mean is None


def test_the_summary_gives_each_webhook_and_type_of_the_creates_in_milliseconds(scrapes):
    before, after = scrapes
    rows = {(r["webhook"], r["type"]): r for r in am.summarize(am.difference(after, before))}
    m = rows[("mutate.workloads.tau.azure.com", "admit")]
    assert m == {"webhook": "mutate.workloads.tau.azure.com", "type": "admit", "calls": 10, "rejected": 0,
                 "mean_ms": pytest.approx(32.36, abs=0.01), "p50_ms": 53.125, "p99_ms": 99.063}
    assert rows[("validate.workloads.tau.azure.com", "validating")]["calls"] == 10
    # Kueue's Job webhooks, called on each create too; the RayJob ones were not called in between.
    assert rows[("mjob.kb.io", "admit")]["calls"] == 10 and rows[("vjob.kb.io", "validating")]["calls"] == 10
    assert ("mrayjob.kb.io", "admit") not in rows
    assert am.summarize(am.difference(after, before), operation="DELETE") == []


def test_rounds_add_up_and_rejected_calls_are_counted_apart():
    ok = am.Histogram({0.025: 1, math.inf: 1}, 0.01, 1)
    series = {("w", "validating", "CREATE", "false"): ok,
              ("w", "validating", "CREATE", "true"): am.Histogram({0.025: 0, 0.1: 1, math.inf: 1}, 0.05, 1)}
    total = am.add(series, series)
    [row] = am.summarize(total)
    assert row["calls"] == 4 and row["rejected"] == 2 and row["mean_ms"] == pytest.approx(30.0)

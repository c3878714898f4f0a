"""An UPDATE that taugate answers with a Warning or a denial gets a Kubernetes Event on the workload
(``webhook/events.py``), built within the API server's rules for events.k8s.io/v1 and written off
the request path: a bounded queue that drops (counted) rather than waits. The Event through a real
API server and kubectl is proven in ``tests/e2e/test_events_and_logs_on_the_real_control_plane.py``."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from taugate.violation import Violation
from taugate.webhook import events
from taugate.webhook.decision import Decision
from tests.waiting import until_sync

NOW = datetime(2026, 12, 4, 20, 0, 0, 123456, tzinfo=UTC)
STORED = {"apiVersion": "ray.io/v1", "kind": "RayJob",
          "metadata": {"name": "resnet-x7k2p", "namespace": "vision", "uid": "0d5c9f5e-0000-4000-8000-000000000001"}}


def _update(**over) -> dict:
    req = {"uid": "r1", "operation": "UPDATE", "namespace": "vision", "name": "resnet-x7k2p",
           "kind": {"group": "ray.io", "version": "v1", "kind": "RayJob"},
           "userInfo": {"username": "bob@example.com"}, "object": STORED, "oldObject": STORED, "dryRun": False}
    return {**req, **over}


RESTORED = Decision.allow(STORED, ['taugate restored metadata.labels["tau.azure.com/run-id"]="abc" (this update '
                                   'removed it)'])


def test_a_restoring_update_gets_a_warning_event_regarding_the_stored_workload():
    e = events.event_for("/mutate", _update(), RESTORED, instance="taugate-webhook-0", now=NOW)
    assert e["apiVersion"] == "events.k8s.io/v1" and e["kind"] == "Event"
    assert e["metadata"] == {"name": f"resnet-x7k2p.{int(NOW.timestamp() * 1e9):x}", "namespace": "vision"}
    assert (e["type"], e["reason"], e["action"], e["reportingController"]) == ("Warning", "Restored", "Update",
                                                                              "taugate")
    assert e["regarding"] == {"apiVersion": "ray.io/v1", "kind": "RayJob", "namespace": "vision",
                              "name": "resnet-x7k2p", "uid": STORED["metadata"]["uid"]}
    assert e["eventTime"] == "2026-12-04T20:00:00.123456Z"
    assert e["note"].startswith("update by bob@example.com: taugate restored metadata.labels")


def test_a_denied_update_is_a_policy_violation_event_and_a_policy_warning_a_policy_warning_event():
    denied = Decision.deny([Violation("gpu-total-fits-queue", "spec.x", "too many GPUs")])
    assert events.event_for("/validate", _update(), denied, instance="i", now=NOW)["reason"] == "PolicyViolation"
    warned = Decision.allow(STORED, ["[head-without-gpu] spec.y: the head holds a GPU"])
    assert events.event_for("/validate", _update(), warned, instance="i", now=NOW)["reason"] == "PolicyWarning"


def test_no_event_for_a_create_a_dry_run_an_allowed_update_or_an_object_without_a_uid():
    assert events.event_for("/mutate", _update(operation="CREATE", oldObject=None), RESTORED, instance="i",
                            now=NOW) is None
    assert events.event_for("/mutate", _update(dryRun=True), RESTORED, instance="i", now=NOW) is None
    assert events.event_for("/mutate", _update(), Decision.allow(STORED), instance="i", now=NOW) is None
    no_uid = {**STORED, "metadata": {"name": "x", "namespace": "vision"}}
    assert events.event_for("/mutate", _update(oldObject=no_uid), RESTORED, instance="i", now=NOW) is None


def test_a_huge_warning_and_name_stay_within_the_api_servers_limits():
    long_name = {**STORED, "metadata": {**STORED["metadata"], "name": "n" * 253}}
    huge = Decision.allow(STORED, ["x" * 100_000])
    e = events.event_for("/mutate", _update(oldObject=long_name), huge, instance="i" * 500, now=NOW)
    assert len(e["note"]) == events.NOTE_LIMIT and len(e["reportingInstance"]) == events.INSTANCE_LIMIT
    assert len(e["metadata"]["name"]) <= events.NAME_LIMIT


class _BlockedWriter:
    """An API client whose first write waits until released: the queue behind it fills."""

    def __init__(self):
        self.release, self.started = threading.Event(), threading.Event()
        self.written: list[dict] = []

    def create(self, res, obj):
        self.started.set()
        self.release.wait(10)
        self.written.append(obj)
        return obj


def test_a_full_queue_drops_and_counts_and_the_offer_never_waits():
    writer = _BlockedWriter()
    sender = events.EventSender(writer, queue_size=2, per_second=1000)
    try:
        before = events.DROPPED._value.get()
        assert sender.offer("/mutate", _update(), RESTORED)
        assert writer.started.wait(10)  # the sender took the first and is stuck writing it
        offered = [sender.offer("/mutate", _update(), RESTORED) for _ in range(5)]
        assert offered == [True, True, False, False, False]
        assert events.DROPPED._value.get() - before == 3
        writer.release.set()
        until_sync(lambda: len(writer.written) == 3, timeout=10)
    finally:
        writer.release.set()
        sender.close()


def test_a_failed_write_is_counted_and_logged_never_raised(caplog):
    class Refusing:
        def create(self, res, obj):
            raise RuntimeError("403 forbidden")

    sender = events.EventSender(Refusing(), per_second=1000)
    try:
        before = events.SENT.labels("failed")._value.get()
        assert sender.offer("/mutate", _update(), RESTORED)
        until_sync(lambda: events.SENT.labels("failed")._value.get() - before == 1, timeout=10)
    finally:
        sender.close()
    assert any("could not write the Restored Event on RayJob vision/resnet-x7k2p" in r.getMessage()
               for r in caplog.records)

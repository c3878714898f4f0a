"""The leader election's I/O (``controllers/leader.py`` ``LeaderElector``) against the real
kube-apiserver: of two candidates one holds the Lease; a write at a stale resourceVersion is
refused (the merge patch is an optimistic-concurrency update); a released Lease is taken at once
and an abandoned one after its duration; a holder stops at once when it sees another holder, and
within the renew deadline when it cannot reach the API server. Short timings (4/3/0.5 s) keep it
quick; the operator's own defaults are exercised in ``test_the_operator_survives_losing_its_leader``."""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest

from taugate.controllers.leader import LEASES, LeaderElection, LeaderElector, Wait, Write
from taugate.kube import Kube, KubeError, load_configuration
from tests.e2e.controlplane import LOOPBACK, free_port

NS = "default"
TIMING = {"lease_duration_seconds": 4, "renew_deadline_seconds": 3.0, "retry_period_seconds": 0.5}


@pytest.fixture
def candidates(control_plane, request):
    """``make(identity)``: a candidate for this test's own Lease, as the admin; all closed at the end."""
    cfg = load_configuration(kubeconfig=str(control_plane.kubeconfig))
    lease = request.node.name.replace("_", "-")[:60].strip("-").lower()
    made: list[LeaderElector] = []

    def make(identity: str, cfg=cfg) -> LeaderElector:
        config = LeaderElection(enabled=True, lease_name=lease, namespace=NS, identity=identity, **TIMING)
        elector = LeaderElector(Kube.from_configuration(cfg, request_timeout=(1.5, 1.5)), config, NS, identity)
        made.append(elector)
        return elector

    yield make
    for e in made:
        e.stopping.set()
        e.kube.close()


def _lost(elector: LeaderElector) -> tuple[threading.Event, list[str]]:
    happened, reasons = threading.Event(), []

    def on_lost(reason: str) -> None:
        reasons.append(reason)
        happened.set()
    elector.keep(on_lost)
    return happened, reasons


def test_of_two_candidates_one_holds_the_lease_and_a_write_at_a_stale_version_is_refused(candidates):
    a, b = candidates("a"), candidates("b")
    assert isinstance(a.try_acquire_or_renew(), Write)
    assert b.try_acquire_or_renew() == Wait("a", 4.0)
    stored = a.kube.get(LEASES, a.config.lease_name, NS)
    assert stored["spec"]["holderIdentity"] == "a" and stored["spec"]["leaseTransitions"] == 0
    stale = stored["metadata"]["resourceVersion"]
    assert isinstance(a.try_acquire_or_renew(), Write)  # a renewal moves the version on
    with pytest.raises(KubeError) as refused:
        b.kube.patch(LEASES, b.config.lease_name, {"metadata": {"resourceVersion": stale},
                                                   "spec": {"holderIdentity": "b"}}, NS)
    assert refused.value.status == 409
    assert a.kube.get(LEASES, a.config.lease_name, NS)["spec"]["holderIdentity"] == "a"


def test_a_released_lease_is_taken_at_once_and_an_abandoned_one_after_its_duration(candidates):
    a, b, c = candidates("a"), candidates("b"), candidates("c")
    assert a.acquire()
    _lost(a)
    a.release()
    started = time.monotonic()
    assert b.acquire()
    assert time.monotonic() - started < 2.0
    lease = b.kube.get(LEASES, b.config.lease_name, NS)["spec"]
    assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1
    # b never renews: c takes the Lease once it has seen it unchanged for 4 s on its own clock.
    started = time.monotonic()
    assert c.acquire()
    waited = time.monotonic() - started
    print(f"an abandoned 4 s lease was taken after {waited:.2f} s")
    assert 4.0 <= waited <= 4.0 + 2 * 0.5 * 2.2 + 1.0
    assert c.kube.get(LEASES, c.config.lease_name, NS)["spec"]["leaseTransitions"] == 2


def test_a_holder_that_sees_another_holder_stops_at_once(candidates):
    a = candidates("a")
    assert a.acquire()
    happened, reasons = _lost(a)
    lease = a.kube.get(LEASES, a.config.lease_name, NS)
    taken = copy.deepcopy(lease)
    taken["spec"]["holderIdentity"] = "intruder"
    a.kube.patch(LEASES, a.config.lease_name, {"spec": taken["spec"]}, NS)  # as the admin, unconditionally
    started = time.monotonic()
    assert happened.wait(5), "the holder did not notice"
    assert time.monotonic() - started < 2 * 0.5 + 1.5
    assert reasons == [f"lease {NS}/{a.config.lease_name} now held by intruder"]


def test_a_holder_that_cannot_reach_the_api_server_stops_within_the_renew_deadline(candidates, control_plane):
    a = candidates("a")
    assert a.acquire()
    renewed = a.renewed_at
    cut = load_configuration(kubeconfig=str(control_plane.kubeconfig))
    cut.host = f"https://{LOOPBACK}:{free_port()}"  # nothing listens: every renewal is refused
    a.kube.close()
    a.kube = Kube.from_configuration(cut, request_timeout=(1.5, 1.5))
    happened, reasons = _lost(a)
    assert happened.wait(10), "the holder kept acting"
    late = time.monotonic() - renewed
    print(f"stopped {late:.2f} s after its last renewal (renew deadline 3 s):", json.dumps(reasons))
    assert 3.0 <= late <= 3.0 + 1.0
    assert "not renewed" in reasons[0]

"""The leader election's decisions (``controllers/leader.py`` ``decide``), as client-go's
``tryAcquireOrRenew`` makes them: a candidate creates a missing Lease, renews its own, waits on
another's until it has seen it unchanged for the lease duration on its own clock, takes an
expired or released one, and always writes at the resourceVersion it decided on."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from taugate.cli import main
from taugate.controllers.leader import (
    JITTER_FACTOR,
    LeaderElection,
    Record,
    Seen,
    StandbyHealth,
    Wait,
    Write,
    acquire_delay,
    decide,
    micro_time,
    record_of,
    release_body,
    timing_problem,
)

ME, OTHER = "taugate-operator-7d9f-abcde_1111", "taugate-operator-7d9f-fghij_2222"
T0 = datetime(2026, 12, 6, 10, 0, 0, tzinfo=UTC)
STAMP = "2026-12-06T10:00:00.000000Z"


def _lease(holder: str | None, rv: str = "100", *, renew: str = "2026-12-06T09:59:58.000000Z",
           acquire: str = "2026-12-06T09:00:00.000000Z", transitions: int = 3, duration: int = 15) -> dict:
    spec = {"leaseDurationSeconds": duration, "acquireTime": acquire, "renewTime": renew,
            "leaseTransitions": transitions}
    if holder is not None:
        spec["holderIdentity"] = holder
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "taugate-operator", "namespace": "taugate-system", "resourceVersion": rv},
            "spec": spec}


def test_a_missing_lease_is_created_held_by_the_candidate_with_no_transitions():
    step, seen = decide(None, None, 50.0, T0, ME, 15)
    assert isinstance(step, Write) and step.acquiring and step.resource_version is None
    assert step.body["spec"] == {"holderIdentity": ME, "leaseDurationSeconds": 15, "acquireTime": STAMP,
                                 "renewTime": STAMP, "leaseTransitions": 0}
    assert seen is None


def test_another_holders_lease_is_waited_on_for_the_whole_duration_from_first_sight_whatever_its_renew_time_says():
    # Its renewTime is an hour old by this candidate's wall clock: clocks are never compared, so
    # the candidate still waits a whole lease duration from the moment it first saw the record.
    old = _lease(OTHER, renew="2026-12-06T09:00:00.000000Z")
    step, seen = decide(old, None, 1000.0, T0, ME, 15)
    assert step == Wait(OTHER, 15.0) and seen == Seen(record_of(old), 1000.0)
    step, seen2 = decide(old, seen, 1014.5, T0, ME, 15)
    assert step == Wait(OTHER, 0.5) and seen2 == seen


def test_a_renewal_by_the_holder_restarts_the_standbys_clock():
    seen = Seen(record_of(_lease(OTHER)), 1000.0)
    renewed = _lease(OTHER, rv="101", renew="2026-12-06T10:00:02.000000Z")
    step, seen = decide(renewed, seen, 1012.0, T0, ME, 15)
    assert step == Wait(OTHER, 15.0) and seen.at == 1012.0


def test_an_expired_lease_is_taken_at_the_version_it_was_read_with_one_more_transition():
    lease = _lease(OTHER, rv="100", transitions=3)
    seen = Seen(record_of(lease), 1000.0)
    step, _ = decide(lease, seen, 1015.0, T0, ME, 15)
    assert isinstance(step, Write) and step.acquiring
    assert step.resource_version == "100" and step.body["metadata"] == {"resourceVersion": "100"}
    assert step.body["spec"] == {"holderIdentity": ME, "leaseDurationSeconds": 15, "acquireTime": STAMP,
                                 "renewTime": STAMP, "leaseTransitions": 4}


def test_the_lease_duration_is_the_one_the_holder_wrote():
    lease = _lease(OTHER, duration=40)
    seen = Seen(record_of(lease), 1000.0)
    assert decide(lease, seen, 1020.0, T0, ME, 15)[0] == Wait(OTHER, 20.0)


def test_the_holder_renews_keeping_its_acquire_time_and_the_transitions():
    lease = _lease(ME, rv="205", acquire="2026-12-06T09:00:00.000000Z", transitions=7)
    step, _ = decide(lease, None, 3.0, T0, ME, 15)
    assert isinstance(step, Write) and not step.acquiring and step.resource_version == "205"
    assert step.body["spec"] == {"holderIdentity": ME, "leaseDurationSeconds": 15,
                                 "acquireTime": "2026-12-06T09:00:00.000000Z", "renewTime": STAMP,
                                 "leaseTransitions": 7}


@pytest.mark.parametrize("holder", [None, ""])
def test_a_released_lease_is_taken_at_once(holder):
    step, _ = decide(_lease(holder, duration=1), None, 7.0, T0, ME, 15)
    assert isinstance(step, Write) and step.acquiring and step.body["spec"]["leaseTransitions"] == 4


def test_a_leader_that_sees_another_holder_is_told_to_wait_which_means_it_lost():
    mine = _lease(ME)
    seen = Seen(record_of(mine), 100.0)
    step, _ = decide(_lease(OTHER, rv="300"), seen, 102.0, T0, ME, 15)
    assert isinstance(step, Wait) and step.holder == OTHER


def test_only_the_holder_releases_and_it_keeps_the_transitions():
    body = release_body(_lease(ME, rv="9", transitions=2), ME, T0)
    assert body == {"metadata": {"resourceVersion": "9"},
                    "spec": {"holderIdentity": None, "leaseDurationSeconds": 1, "acquireTime": STAMP,
                             "renewTime": STAMP, "leaseTransitions": 2}}
    assert release_body(_lease(OTHER), ME, T0) is None


def test_times_are_written_as_microtime_in_utc():
    assert micro_time(datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)) == "2026-01-02T03:04:05.000678Z"


def test_a_standby_retries_between_one_and_two_point_two_retry_periods():
    assert acquire_delay(2.0, 0.0) == 2.0
    assert acquire_delay(2.0, 0.999) < 2.0 * (1 + JITTER_FACTOR)


@pytest.mark.parametrize("timing, field, fragment", [
    ((10, 10, 2), "renew_deadline_seconds", "is 10; it must be below the lease duration (10 s)"),
    ((15, 2.4, 2), "retry_period_seconds", "the renew deadline (2.4 s) must be greater than 1.2 x the retry period"),
])
def test_a_timing_a_deposed_leader_could_outlive_is_refused(timing, field, fragment):
    at, text = timing_problem(*timing) or ("", "")
    assert at == field and fragment in text
    assert timing_problem(15, 10, 2) is None


def test_the_defaults_are_client_gos_and_the_environment_can_set_them(monkeypatch):
    default = LeaderElection()
    assert (default.enabled, default.lease_name, default.lease_duration_seconds, default.renew_deadline_seconds,
            default.retry_period_seconds) == (False, "taugate-operator", 15, 10.0, 2.0)
    monkeypatch.setenv("TAUGATE_LEADER_ELECTION_ENABLED", "true")
    monkeypatch.setenv("TAUGATE_LEADER_ELECTION_LEASE_DURATION_SECONDS", "30")
    assert LeaderElection().enabled and LeaderElection().lease_duration_seconds == 30
    monkeypatch.setenv("TAUGATE_LEADER_ELECTION_RENEW_DEADLINE_SECONDS", "40")
    with pytest.raises(ValidationError, match="must be below the lease duration"):
        LeaderElection()


def test_the_identity_is_the_pod_name_and_a_uuid_unique_per_process(monkeypatch):
    monkeypatch.setenv("POD_NAME", "taugate-operator-7d9f-abcde")
    a, b = LeaderElection().holder_identity(), LeaderElection().holder_identity()
    assert a.startswith("taugate-operator-7d9f-abcde_") and b.startswith("taugate-operator-7d9f-abcde_") and a != b
    assert LeaderElection(identity="fixed").holder_identity() == "fixed"


def test_the_namespace_is_the_pods_unless_named(monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "taugate-system")
    assert LeaderElection().lease_namespace() == "taugate-system"
    assert LeaderElection(namespace="ops").lease_namespace() == "ops"


def test_a_lease_with_an_empty_spec_reads_as_free():
    assert record_of({"metadata": {}}) == Record("", 0, "", "", 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_standby_answers_the_liveness_probe_on_kopfs_address_and_frees_it_for_kopf():
    port = _free_port()
    health = StandbyHealth(f"http://127.0.0.1:{port}/healthz")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert (r.status, r.read()) == (200, b"standby\n")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert e.value.code == 404
    finally:
        health.close()
    with socket.socket() as s:  # the leader's kopf binds the same port next
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


@pytest.mark.parametrize("args, message", [
    (["--leader-elect", "--leader-elect-renew-deadline=20"],
     "taugate: leader election: renew_deadline_seconds: is 20; it must be below the lease duration (15 s): a "
     "leader that cannot renew must stop before a standby may take over\n"),
    (["--leader-elect", "--leader-elect-retry-period=0"], "retry_period_seconds"),
    (["--leader-elect"], "taugate: leader election: no namespace for the Lease: set --leader-elect-namespace "
                         "(or $POD_NAMESPACE)\n"),
])
def test_the_operator_refuses_a_bad_lease_setting_in_one_line_with_exit_2_before_calling_the_api(
        tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    kubeconfig = tmp_path / "kubeconfig"  # nothing is asked of the (unreachable) server
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
current-context: c
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{_free_port()}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
""")
    assert main(["operator", f"--kubeconfig={kubeconfig}", "--no-record", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err

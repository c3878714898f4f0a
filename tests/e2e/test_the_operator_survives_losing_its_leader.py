"""Operator high availability on the real control plane (issue 32, item 3): two ``taugate
operator --record`` processes with the chart's args (``--leader-elect`` on the Lease
``taugate-operator`` in the release namespace, client-go's 15/10/2 s timing), as two pods of the
chart's Deployment would run them, sharing one evidence store (the stack's). The leader is
killed (SIGKILL: no release, no cleanup) in the middle of a GPU run, after Kueue admitted it and
before it completed; the standby takes the Lease within the lease time, the run's TauRun reaches
the same states as a run nobody disturbed, its evidence verifies, and no event is written twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime

import pytest

from tests.e2e.platform import NAMESPACE, OPERATOR_POD
from tests.e2e.stack import LONG_RUNNING_CONTAINER
from tests.e2e.workloads import RUN_ID, WORKSPACE
from tests.paths import REPO

LEASE = "taugate-operator"
STANDBY_POD = "taugate-operator-b"
RETRY = 2.0  # the chart's leader retry period: a standby tries every 2 to 4.4 s (client-go's jitter)
FINAL = ("Completed", "QuotaReleased", "GPUsReleased")


def _cond(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _lease(cp) -> dict:
    return cp.get_json("lease", LEASE, "-n", NAMESPACE)


def _pod_of(holder: str | None) -> str:
    """The pod name in a holderIdentity (``<pod>_<uuid>``)."""
    return (holder or "").rsplit("_", 1)[0]


def _seconds(micro_time: str) -> float:
    return datetime.fromisoformat(micro_time.replace("Z", "+00:00")).timestamp()


def _liveness(process) -> str:
    return next(a.split("=", 1)[1] for a in process.popen.args if str(a).startswith("--liveness="))


def _gpu_job(name: str) -> dict:
    """A one-GPU Job whose pod kwok keeps Running until it is completed here (``_complete``)."""
    res = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": WORKSPACE},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": LONG_RUNNING_CONTAINER, "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                "command": ["python", "train.py"], "resources": {"requests": res, "limits": res}}]}}}}


def _start_run(stack, name: str) -> str:
    cp = stack.cp
    cp.kubectl("apply", "-f", "-", input=json.dumps(_gpu_job(name)))
    run_id = cp.get_json("job", name, "-n", WORKSPACE)["metadata"]["labels"][RUN_ID]
    stack.wait_for(f"{name}'s TauRun to show Admitted and Scheduled True (the run under way)", lambda: (
        r := cp.get_json("taurun", run_id, "-n", WORKSPACE)) and all(
        _cond(r, t).get("status") == "True" for t in ("Admitted", "Scheduled"))
        and _cond(r, "Completed").get("status") != "True", 180)
    return run_id


def _complete(stack, run_id: str) -> None:
    """End the run's pod as its kubelet reports a container that exited 0 (kwok's ``pod-complete``
    status), then wait for the Job controller to complete the Job."""
    cp = stack.cp
    (pod,) = cp.get_json("pods", "-n", WORKSPACE, "-l", f"{RUN_ID}={run_id}")["items"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    container = pod["spec"]["containers"][0]
    status = {"phase": "Succeeded", "containerStatuses": [{
        "name": container["name"], "image": container["image"], "ready": False, "restartCount": 0, "started": False,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}}]}
    cp.kubectl("patch", "pod", pod["metadata"]["name"], "-n", WORKSPACE, "--subresource=status", "--type=merge",
               "-p", json.dumps({"status": status}))


def _finished(stack, run_id: str) -> dict:
    cp = stack.cp
    return stack.wait_for(f"TauRun {run_id} to be Completed with quota and GPUs released", lambda: (
        r := cp.get_json("taurun", run_id, "-n", WORKSPACE)) and all(
        _cond(r, t).get("status") == "True" for t in FINAL) and r, 180)


def _states(run: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in run["status"]["conditions"]}


def _evidence(plat, *args: str) -> subprocess.CompletedProcess:
    """``taugate evidence ARGS`` on the stack's evidence store (a directory or the object store)."""
    return subprocess.run([sys.executable, "-m", "taugate.cli", "evidence", *args,
                           f"--evidence-root={plat.evidence_root}"], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, **plat.evidence_env()})


def _verify(plat, run_id: str) -> subprocess.CompletedProcess:
    return _evidence(plat, "verify", run_id, f"--public-key={plat.signing_key.with_suffix('.pub.pem')}")


def _events(plat, run_id: str, monkeypatch) -> list[dict]:
    """The run's event chain as its store holds it (``events.jsonl``, or the object store's
    segments joined in order), read as ``taugate evidence verify`` reads it."""
    from taugate.controllers.recorder.evidence.stores import open_storage

    for k, v in plat.evidence_env().items():
        monkeypatch.setenv(k, v)
    stored = open_storage(plat.evidence_root).read(run_id)
    assert stored is not None and stored.events, run_id
    return [json.loads(line) for line in stored.events.decode().splitlines() if line.strip()]


def written_twice(events: list[dict]) -> list[str]:
    """The events a second writer would have repeated: a ``run`` or ``final`` event after the
    first, any other event with the same kind and data as an earlier one, a condition event that
    repeats its type's previous status and reason (no transition)."""
    out, last, seen = [], {}, set()
    for ev in events:
        kind, data = ev["kind"], ev.get("data") or {}
        if kind == "condition":
            now = (data.get("status"), data.get("reason"))
            if last.get(data.get("type")) == now:
                out.append(f"seq {ev['seq']}: condition {data.get('type')} {now} again")
            last[data.get("type")] = now
            continue
        key = kind if kind in ("run", "final") else f"{kind}:{json.dumps(data, sort_keys=True)}"
        if key in seen:
            out.append(f"seq {ev['seq']}: {kind} again")
        seen.add(key)
    return out


@pytest.fixture(scope="module")
def two_operators(whole_stack):
    """The platform's operator (pod ``taugate-operator``, the leader) and a second one (pod
    ``taugate-operator-b``) standing by, with the same args, account and evidence root."""
    plat = whole_stack.platform
    first = plat.operator
    whole_stack.wait_for("the first operator to hold the Lease",
                         lambda: _pod_of(_lease(whole_stack.cp)["spec"].get("holderIdentity")) == OPERATOR_POD, 60)
    second = plat.start_operator(record=True, pod_name=STANDBY_POD)
    yield first, second
    first.stop()  # killed by the test; the second stays the platform's operator for later tests


def test_the_second_replica_stands_by_answering_its_liveness_probe_and_writing_nothing(whole_stack, two_operators):
    first, second = two_operators
    whole_stack.wait_for("the second operator to stand by",
                         lambda: f"standing by: lease {NAMESPACE}/{LEASE} held by {OPERATOR_POD}_" in second.tail(), 60)
    with urllib.request.urlopen(_liveness(second), timeout=5) as r:
        assert (r.status, r.read()) == (200, b"standby\n")
    assert _pod_of(_lease(whole_stack.cp)["spec"]["holderIdentity"]) == OPERATOR_POD
    assert "kopf" not in second.tail(200) and "taugate.recorder" not in second.tail(200), second.tail(200)


def test_killing_the_leader_mid_run_hands_the_run_to_the_standby_within_the_lease_time(whole_stack, two_operators,
                                                                                      monkeypatch):
    cp, plat = whole_stack.cp, whole_stack.platform
    first, second = two_operators
    run_id = _start_run(whole_stack, "handover")
    before = _lease(cp)["spec"]
    assert _pod_of(before["holderIdentity"]) == OPERATOR_POD
    os.killpg(first.popen.pid, signal.SIGKILL)
    killed_at = time.time()
    first.popen.wait(10)
    after = whole_stack.wait_for("the standby to take the Lease", lambda: (
        s := _lease(cp)["spec"]) and _pod_of(s.get("holderIdentity")) == STANDBY_POD and s, 60)
    duration, retry = before["leaseDurationSeconds"], 2.0
    since_renewal = _seconds(after["acquireTime"]) - _seconds(before["renewTime"])
    since_kill = _seconds(after["acquireTime"]) - killed_at
    print(f"takeover: {since_kill:.1f} s after the kill, {since_renewal:.1f} s after the leader's last renewal "
          f"it was seen by the test (lease {duration} s, retry {retry:g} s)")
    assert after["leaseTransitions"] == before["leaseTransitions"] + 1
    # client-go's bound: the lease duration from when the standby saw the last renewal (within
    # one standby retry: at most retry x 2.2 s after it), and the retry that finds it expired
    # (at most as long again), plus a request's latency.
    assert 0 < since_kill <= duration + 2 * retry * 2.2 + 1.0, (since_kill, before, after)
    whole_stack.wait_for("the new leader to log it leads", lambda: "became the leader" in second.tail(400), 30)

    _complete(whole_stack, run_id)
    handed_over = _finished(whole_stack, run_id)
    # The same run again, nobody disturbed: the same states with the same reasons.
    control_id = _start_run(whole_stack, "no-handover")
    _complete(whole_stack, control_id)
    control = _finished(whole_stack, control_id)
    print("states after the handover:", _states(handed_over), "undisturbed:", _states(control), sep="\n")
    assert _states(handed_over) == _states(control)

    for rid in (run_id, control_id):  # verify: the chain is whole (seq from 0, each line's prev) and signed
        whole_stack.wait_for(f"the evidence of {rid} to verify", lambda rid=rid: _verify(plat, rid).returncode == 0, 60)
    events = _events(plat, run_id, monkeypatch)
    print("events of the handed-over run:", [(e["kind"], (e.get("data") or {}).get("type"),
                                              (e.get("data") or {}).get("status")) for e in events])
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert written_twice(events) == []
    assert written_twice(_events(plat, control_id, monkeypatch)) == []
    cp.kubectl("delete", "job", "handover", "no-handover", "-n", WORKSPACE, "--wait=true", timeout=120)


def _sigterm(process) -> float:
    """SIGTERM to the process alone, as the kubelet stops a container's first process: the
    seconds until it exited (within the kubelet's default 30 s grace)."""
    started = time.monotonic()
    os.kill(process.popen.pid, signal.SIGTERM)
    process.popen.wait(30)
    return time.monotonic() - started


def test_a_replica_stopped_with_sigterm_exits_0_and_a_leader_hands_the_lease_over_at_once(whole_stack, two_operators):
    """A rollout or a drain stops replicas with SIGTERM: a standby ends at once, and a leader
    releases the Lease, so the standby takes it at its next try, not a lease duration later."""
    cp, plat = whole_stack.cp, whole_stack.platform
    _, leader = two_operators  # the leader since the kill above
    whole_stack.wait_for("the second operator to lead", lambda: _pod_of(
        _lease(cp)["spec"].get("holderIdentity")) == STANDBY_POD, 60)

    standby = plat.start_operator(record=True, pod_name="taugate-operator-c")
    whole_stack.wait_for("a third operator to stand by", lambda: "standing by:" in standby.tail(), 60)
    took = _sigterm(standby)
    print(f"a standby stopped with SIGTERM exited {standby.popen.returncode} after {took:.1f} s")
    assert standby.popen.returncode == 0, standby.tail()
    assert took <= 2 * RETRY * 1.1 + 1.0  # at its next try at the latest
    assert "Traceback" not in standby.tail(200), standby.tail(200)

    standby = plat.start_operator(record=True, pod_name="taugate-operator-d")  # the platform's from here on
    whole_stack.wait_for("a fourth operator to stand by", lambda: "standing by:" in standby.tail(), 60)
    stopped_at = time.time()
    took = _sigterm(leader)
    after = whole_stack.wait_for("the standby to take the released Lease", lambda: (
        s := _lease(cp)["spec"]) and _pod_of(s.get("holderIdentity")) == "taugate-operator-d" and s, 30)
    since_stop = _seconds(after["acquireTime"]) - stopped_at
    print(f"the leader stopped with SIGTERM exited {leader.popen.returncode} after {took:.1f} s; the standby "
          f"took the Lease {since_stop:.1f} s after the SIGTERM")
    assert leader.popen.returncode == 0, leader.tail(200)
    assert "released the leader lease" in leader.tail(50), leader.tail(50)
    assert since_stop <= took + 2 * RETRY * 1.1 + 1.0  # its next try after the release, no lease to wait out
    whole_stack.wait_for("the new leader to log it leads", lambda: "became the leader" in standby.tail(400), 30)


def test_the_written_twice_check_finds_a_repeated_transition_and_a_repeated_event():
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted"}
    ev = [{"seq": 0, "kind": "run", "data": {}}, {"seq": 1, "kind": "condition", "data": admitted},
          {"seq": 2, "kind": "condition", "data": dict(admitted)}, {"seq": 3, "kind": "log", "data": {"pod": "p"}},
          {"seq": 4, "kind": "log", "data": {"pod": "q"}}, {"seq": 5, "kind": "log", "data": {"pod": "p"}},
          {"seq": 6, "kind": "run", "data": {}}]
    assert written_twice(ev) == ["seq 2: condition Admitted ('True', 'Admitted') again", "seq 5: log again",
                                 "seq 6: run again"]

"""The recorder's kopf operator runs beside the controllers', not inside it: kopf calls no handler of
an operator until each of its indices has listed its whole resource, and the recorder indexes every
run's objects and every Node (145 s at 5,000 Nodes and 10,000 Jobs, docs/performance.md). Here the
recorder's Node index is held inside its indexer, a gate the test opens: the workspaces and the
TauCluster are reconciled to Ready meanwhile, and the recorder goes on once it is opened."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.error
import urllib.request

import kopf
import kubernetes.client
import pytest

from taugate.controllers.operator import Beside, Controller, OperatorOptions, build_registry, run_beside
from taugate.controllers.recorder import watch
from taugate.controllers.recorder.config import RecorderConfig
from taugate.controllers.recorder.evidence.records import Signer
from taugate.kube import Kube

TAU = "tau.azure.com/v1alpha1"
SYS = "tau-platform"


@pytest.fixture
def config(tmp_path) -> RecorderConfig:
    """The recorder's configuration, with a signing key, under the test's directory."""
    (tmp_path / "ed25519.pem").write_bytes(Signer.generate().private_pem())
    return RecorderConfig(evidence_root=tmp_path / "evidence", data_root=tmp_path / "data",
                          signing_key_file=tmp_path / "ed25519.pem", poll_seconds=0.1)


def _phase(kd, kind: str, name: str, namespace: str | None = None) -> str | None:
    return ((kd.get(TAU, kind, name, namespace) or {}).get("status") or {}).get("phase")


def test_the_workspaces_are_ready_while_the_recorder_is_still_listing_the_nodes(
        kube_double, small_cluster, settings, config, monkeypatch):
    kd = kube_double
    held, gate = threading.Event(), threading.Event()
    indexed: list[str] = []
    trim_node = watch.trim_node

    def held_trim_node(node: dict) -> dict:
        held.set()
        assert gate.wait(60), "the test never opened the gate"
        indexed.append(node["metadata"]["name"])
        return trim_node(node)

    monkeypatch.setattr(watch, "trim_node", held_trim_node)
    kd.apply(small_cluster)
    try:
        with kd.operator(settings, recorder=config, resync_seconds=60):
            kd.wait_for(held.is_set, message="the recorder indexing its first Node")
            kd.wait_for(lambda: _phase(kd, "TauWorkspace", "vision", SYS) == "Ready"
                        and _phase(kd, "TauWorkspace", "nlp", SYS) == "Ready"
                        and _phase(kd, "TauCluster", "cluster") == "Ready",
                        timeout=20, message="both workspaces and the TauCluster Ready, the recorder still held")
            assert indexed == []  # still held: nothing of the Node index was done
            gate.set()
            kd.wait_for(lambda: len(indexed) >= 3, message="the recorder indexing the three Nodes once let go")
    finally:
        gate.set()


def test_the_recorders_operator_failing_stops_the_controllers_and_is_raised():
    # a replica without its recorder would follow no run: the process exits and the pod restarts
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def _broken(**_):
        raise kopf.PermanentError("no evidence store")

    cancelled = asyncio.Event()

    async def controllers():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main():
        with pytest.raises(RuntimeError, match="the recorder.s operator failed: ActivityError"):
            await run_beside(controllers(), registry, Beside())

    asyncio.run(main())
    assert cancelled.is_set()


def test_a_wedged_recorder_fails_the_operators_liveness_probe_until_its_loop_answers_again(
        kube_double, small_cluster, settings, config, monkeypatch):
    # the recorder's loop blocked inside its start: the pod must not look healthy while it records nothing
    kd = kube_double
    held, gate = threading.Event(), threading.Event()
    start = watch.Recorder.start

    def wedged_start(self):
        held.set()
        assert gate.wait(60), "the test never opened the gate"
        start(self)

    monkeypatch.setattr(watch.Recorder, "start", wedged_start)
    monkeypatch.setattr(Beside, "limit", 1.0)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    kd.apply(small_cluster)
    with kd.operator(settings, recorder=config, resync_seconds=60, liveness_endpoint=url):
        try:
            kd.wait_for(held.is_set, message="the recorder's start, wedged")
            status, body = kd.wait_for(lambda: _get(url), message="the liveness endpoint to answer")
            assert status == 500, (status, body)
            gate.set()
            status, body = kd.wait_for(lambda: (r := _get(url)) and r[0] == 200 and r, message="liveness 200 again")
            assert "recorderLoopSeconds" in json.loads(body)["recorder"], body
        finally:
            gate.set()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str] | None:
    """The endpoint's status and body, or None while it does not listen yet."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError:
        return None


def test_every_watch_handler_of_the_operator_and_the_recorder_runs_on_its_event_loop(config, settings):
    # kopf runs a plain function in a thread pool: the handlers share dicts and a WorkQueue with the loop
    controllers = build_registry(Controller(kube=None, settings=settings, options=OperatorOptions()),
                                 kubernetes.client.Configuration())
    recorder = kopf.OperatorRegistry()
    watch.Recorder(config, settings, Kube.from_configuration(kubernetes.client.Configuration()),
                   Signer.generate()).register(recorder)
    handlers = {h.id: h.fn for registry in (controllers, recorder) for h in registry._watching.get_all_handlers()}
    assert len(handlers) >= 20
    assert [name for name, fn in handlers.items() if not asyncio.iscoroutinefunction(fn)] == []

"""The recorder runs in a process of its own beside the controllers (``controllers/beside.py``): kopf
calls no handler of an operator until each of its indices has listed its whole resource, and the
recorder indexes every run's objects and every Node (145 s at 5,000 Nodes and 10,000 Jobs,
docs/performance.md). Here its process is stopped (SIGSTOP): the workspaces and the TauCluster are
reconciled to Ready meanwhile, the operator's liveness endpoint says the recorder does not answer,
and both go on once it is continued. Its failure ends the operator; the operator's end (a lost
Lease exits it at once) ends it at once."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.error
import urllib.request
from pathlib import Path

import kopf
import kubernetes.client
import pytest
import yaml

from taugate.controllers.beside import Beside, run_beside, run_kopf
from taugate.controllers.operator import Controller, OperatorOptions, build_registry
from taugate.controllers.recorder import watch
from taugate.controllers.recorder.config import RecorderConfig
from taugate.controllers.recorder.evidence.records import EvidenceError, Signer
from taugate.kube import CredentialsRefresh, Kube, load_configuration
from tests.paths import REPO
from tests.waiting import until, until_sync

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


def _recorder_pid() -> int | None:
    """The recorder's process, a child of this one (the operator runs in a thread of the test):
    the one only (None while there is none, or another test's is still ending)."""
    found = [p.pid for p in multiprocessing.active_children() if p.name == "taugate-recorder"]
    return found[0] if len(found) == 1 else None


def _state(pid: int) -> str:
    """The process's state letter (``T`` stopped, ``Z`` exited and not reaped), ``gone`` if none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


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


def test_the_workspaces_are_ready_while_the_recorders_process_is_stopped(
        kube_double, small_cluster, settings, config):
    kd = kube_double
    kd.apply(small_cluster)
    with kd.operator(settings, recorder=config, resync_seconds=60):
        pid = kd.wait_for(_recorder_pid, message="the recorder's process")
        os.kill(pid, signal.SIGSTOP)
        try:
            kd.wait_for(lambda: _phase(kd, "TauWorkspace", "vision", SYS) == "Ready"
                        and _phase(kd, "TauWorkspace", "nlp", SYS) == "Ready"
                        and _phase(kd, "TauCluster", "cluster") == "Ready",
                        timeout=20, message="both workspaces and the TauCluster Ready, the recorder stopped")
            assert _state(pid) == "T"  # still stopped: none of it came from the recorder
        finally:
            os.kill(pid, signal.SIGCONT)


def test_a_wedged_recorder_fails_the_operators_liveness_probe_until_it_answers_again(
        kube_double, small_cluster, settings, config, monkeypatch):
    # the pod must not look healthy while its recorder records nothing
    kd = kube_double
    monkeypatch.setattr(Beside, "limit", 1.0)
    url = f"http://127.0.0.1:{_free_port()}/healthz"
    kd.apply(small_cluster)
    with kd.operator(settings, recorder=config, resync_seconds=60, liveness_endpoint=url):
        kd.wait_for(lambda: (r := _get(url)) and r[0] == 200 and "recorderLoopSeconds" in r[1],
                    timeout=30, message="the recorder's loop answering the liveness probe (kopf keeps an answer 10 s)")
        pid = kd.wait_for(_recorder_pid, message="the recorder's process")
        os.kill(pid, signal.SIGSTOP)
        try:
            kd.wait_for(lambda: (r := _get(url)) and r[0] == 500, timeout=30,
                        message="the liveness probe failing (kopf keeps an answer 10 s)")
        finally:
            os.kill(pid, signal.SIGCONT)
        status, body = kd.wait_for(lambda: (r := _get(url)) and r[0] == 200 and r, message="liveness 200 again")
        assert "recorderLoopSeconds" in json.loads(body)["recorder"], body


def test_the_recorders_failure_stops_the_controllers_and_is_raised_with_its_message(tmp_path, settings):
    # a replica without its recorder would follow no run: the process exits and the pod restarts
    no_key = RecorderConfig(evidence_root=tmp_path / "evidence", data_root=tmp_path / "data")
    cancelled = asyncio.Event()

    async def controllers():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main():
        with pytest.raises(EvidenceError, match="no evidence signing key"):  # `taugate operator`: "recorder: ..."
            await run_beside(controllers(), Beside(kubernetes.client.Configuration(), settings, no_key, True))

    asyncio.run(main())
    assert cancelled.is_set()


def _stopped_by_the_controllers(kube_double, settings, config, wedge: bool) -> int:
    """The recorder's exit code after the controllers end, its process stopped first if ``wedge``."""

    async def main():
        beside = Beside(kube_double.configuration, settings, config, True)
        stopped = asyncio.Event()
        task = asyncio.ensure_future(run_beside(stopped.wait(), beside))
        await until(beside.responds, check=lambda r: "recorderLoopSeconds" in r, timeout=30,
                    what="the recorder's loop to answer")
        if wedge:
            os.kill(beside.pid, signal.SIGSTOP)  # it cannot hear "stop" now
        stopped.set()  # the controllers end: the recorder is asked to stop
        async with asyncio.timeout(40):
            await task
        return beside.process.exitcode

    return asyncio.run(main())


def test_a_recorder_asked_to_stop_exits_0_within_the_stop_time(kube_double, settings, config, monkeypatch):
    monkeypatch.setattr(Beside, "stop_seconds", 20.0)
    monkeypatch.setattr(Beside, "limit", 10.0)
    assert _stopped_by_the_controllers(kube_double, settings, config, wedge=False) == 0


def test_a_recorder_that_does_not_stop_when_asked_is_killed(kube_double, settings, config, monkeypatch):
    monkeypatch.setattr(Beside, "stop_seconds", 1.0)
    monkeypatch.setattr(Beside, "limit", 10.0)
    assert _stopped_by_the_controllers(kube_double, settings, config, wedge=True) == -signal.SIGKILL


def test_kopf_failing_in_the_recorders_process_ends_its_thread_instead_of_hanging_it():
    # kopf waits on the stop flag in an executor thread that asyncio.run joins: a failing kopf must set it
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def _broken(**_):
        raise kopf.PermanentError("no evidence store")

    raised: list[BaseException] = []

    def run():
        try:
            run_kopf(registry, threading.Event(), [])
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "kopf's failure left the recorder's thread waiting"
    assert [e.__class__.__name__ for e in raised] == ["ActivityError"]


KILLED_OPERATOR = textwrap.dedent("""
    import asyncio, pickle, sys
    from taugate.controllers.beside import Beside, run_beside, run_kopf

    cfg, settings, config = pickle.load(sys.stdin.buffer)

    async def main():
        beside = Beside(cfg, settings, config, True)
        controllers = asyncio.Event().wait()
        task = asyncio.ensure_future(run_beside(controllers, beside))
        while beside.process is None or "recorderLoopSeconds" not in await beside.responds():
            await asyncio.sleep(0.05)
        print(beside.pid, flush=True)
        await task

    asyncio.run(main())
""")


def test_the_recorders_process_ends_at_once_when_the_operators_process_is_killed(kube_double, settings, config):
    # a leader that lost its Lease exits at once: its recorder must not write after the next leader may
    parent = subprocess.Popen([sys.executable, "-c", KILLED_OPERATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              cwd=REPO)
    try:
        parent.stdin.write(pickle.dumps((kube_double.configuration, settings, config)))
        parent.stdin.close()
        pid = int(parent.stdout.readline())
        assert _state(pid) not in ("gone", "Z")
        parent.kill()
        parent.wait(10)
        until_sync(lambda: _state(pid), check=lambda s: s in ("gone", "Z"), timeout=10,
                   what="the recorder's process to end with its operator")
    finally:
        parent.kill()


def test_a_configuration_with_a_refreshing_token_goes_to_the_recorders_process_with_its_own_context(tmp_path):
    # the kubernetes client's own token hooks are closures: no Configuration with one can be pickled
    kubeconfig = tmp_path / "kubeconfig"

    def write(current: str, token: str, server: str = "https://127.0.0.1:6443") -> None:
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": current,
            "clusters": [{"name": "c", "cluster": {"server": server}},
                         {"name": "d", "cluster": {"server": "https://10.9.9.9:6443"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}},
                         {"name": "d", "context": {"cluster": "d", "user": "v"}}],
            "users": [{"name": "u", "user": {"token": token}}, {"name": "v", "user": {"token": "other"}}]}))

    def in_a_new_process(cfg: kubernetes.client.Configuration) -> str:
        return pickle.loads(pickle.dumps(cfg)).get_api_key_with_prefix("BearerToken")

    write("c", "first")
    cfg = load_configuration(kubeconfig=str(kubeconfig))
    assert isinstance(cfg.refresh_api_key_hook, CredentialsRefresh)
    write("d", "second")  # another current context, and the first one's token changed
    assert in_a_new_process(cfg) == "Bearer second"  # the context it was loaded from, loaded again
    assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer first"  # the client's own hook: a static token
    write("c", "third", server="https://10.0.0.1:6443")
    assert in_a_new_process(cfg) == "Bearer first"  # nothing taken for another API server
    kubeconfig.write_text("not: [a kubeconfig")
    assert in_a_new_process(cfg) == "Bearer first"  # a failed load keeps the token


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


def test_a_signal_to_the_process_group_while_the_recorder_starts_leaves_it_running(
        kube_double, settings, config, monkeypatch):
    """A terminal's Ctrl-C, or an init that forwards the kubelet's SIGTERM to the whole group,
    reaches the recorder too, maybe while it still imports: the operator decides when it stops."""
    monkeypatch.setattr(Beside, "limit", 10.0)

    async def main():
        beside = Beside(kube_double.configuration, settings, config, True)
        stopped = asyncio.Event()
        task = asyncio.ensure_future(run_beside(stopped.wait(), beside))
        await until(lambda: beside.pid is not None, timeout=10, what="the recorder's process")
        for sig in (signal.SIGINT, signal.SIGTERM):  # at once: a fresh interpreter, still importing
            os.kill(beside.pid, sig)
        answer = await until(beside.responds, check=lambda r: "recorderLoopSeconds" in r, timeout=30,
                             what="the recorder's loop to answer after the signals")
        stopped.set()
        async with asyncio.timeout(40):
            await task
        return answer, beside.process.exitcode

    answer, code = asyncio.run(main())
    assert code == 0, answer

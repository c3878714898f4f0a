"""The ``helm`` CLI (helm.sh/helm/v3, built from ``tests/e2e/gomod/helm`` by ``build.sh``) run as a
platform team runs it, and a stand-in for the kubelet that runs the chart's hook Jobs.

No kubelet runs in the end-to-end tier, so a Job's pod is bound by the real scheduler and then
never started, and ``helm install`` would wait for its hook Jobs until its timeout. ``HookKubelet``
does for the hook Jobs' pods what the kubelet of a node does, and nothing more: it watches the pods
bound to its Node (``NODE``, a Node object it registers as a kubelet would), runs each hook pod's
container as a local process (the image's entrypoint ``taugate`` is this checkout's
``python -m taugate.cli``, a ``command: [python, ...]`` is this interpreter) with the container's
env and args, authenticated as the pod's ServiceAccount by a bound token (what the kubelet
projects), and writes the pod's status (``Succeeded`` or ``Failed`` with the exit code) through the
``status`` subresource. The Job controller, the scheduler and helm then do the rest. Pods that are
not hook Jobs' (the webhook's and operator's Deployments) are left as a kubelet-less node leaves
them: bound, never started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import kubernetes

from tests.e2e.controlplane import ControlPlane

NODE = "hook-runner"
HOOK = "helm.sh/hook"


@dataclass
class Helm:
    """The built helm against ``cp`` as the admin, with its config, cache and data under ``home``
    (never the user's ~/.config/helm)."""

    binary: Path
    cp: ControlPlane
    home: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.cp.kubeconfig), "HELM_CONFIG_HOME": str(self.home / "config"),
                "HELM_CACHE_HOME": str(self.home / "cache"), "HELM_DATA_HOME": str(self.home / "data"),
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``helm ARGS`` as typed; the result whatever the exit code (the caller asserts on it)."""
        return subprocess.run([str(self.binary), *args], capture_output=True, text=True, timeout=timeout,
                              env=self.env())


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PlayedPod:
    """A hook pod the stand-in ran: its Job, the argv it ran, exit code and output."""

    job: str
    argv: list[str]
    exit_code: int
    output: str


@dataclass
class HookKubelet:
    """The kubelet of Node ``NODE`` for helm hook Jobs in ``namespace`` (module docstring)."""

    cp: ControlPlane
    namespace: str
    workdir: Path
    played: list[PlayedPod] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _watch: kubernetes.watch.Watch | None = None
    _error: BaseException | None = None
    _stopping: bool = False

    def register_node(self) -> None:
        """The Node as its kubelet registers it: Ready, 8 CPUs, 16 GiB. The API server's
        TaintNodesByCondition admission taints a new Node not-ready; the node-lifecycle controller
        (off in this tier: nothing heartbeats) removes it once Ready, so it is removed here."""
        labels = {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": labels}}
        self.cp.apply_objects([node])
        status = {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                  "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                  "message": "hook stand-in", "lastHeartbeatTime": _now(),
                                  "lastTransitionTime": _now()}]}
        self.cp.kubectl("patch", "node", NODE, "--subresource=status", "--type=merge", "-p",
                        json.dumps({"status": status}))
        self.cp.kubectl("taint", "node", NODE, "node.kubernetes.io/not-ready:NoSchedule-", check=False)

    def start(self) -> None:
        client = kubernetes.config.new_client_from_config(config_file=str(self.cp.kubeconfig))
        core = kubernetes.client.CoreV1Api(client)
        batch = kubernetes.client.BatchV1Api(client)
        self._watch = kubernetes.watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(client, core, batch), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; re-raise what went wrong in the watch thread, if anything."""
        self._stopping = True
        if self._watch:
            self._watch.stop()
        if self._thread:
            self._thread.join(timeout=30)
        if self._error:
            raise self._error

    def _run(self, client, core, batch) -> None:
        done: set[str] = set()
        playing: set[str] = set()
        try:
            for event in self._watch.stream(core.list_namespaced_pod, self.namespace,
                                            field_selector=f"spec.nodeName={NODE}", _request_timeout=600):
                pod = event["object"]
                if event["type"] == "DELETED":
                    continue
                if pod.metadata.deletion_timestamp is not None and pod.metadata.uid not in playing:
                    self._finish_deletion(core, pod)
                    continue
                if pod.metadata.uid in done or pod.status.phase != "Pending":
                    continue
                owner = next((o for o in pod.metadata.owner_references or [] if o.kind == "Job"), None)
                if owner is None:
                    continue
                job = batch.read_namespaced_job(owner.name, self.namespace)
                if HOOK not in (job.metadata.annotations or {}):
                    continue  # a kubelet-less node: only hook Jobs are played
                done.add(pod.metadata.uid)
                playing.add(pod.metadata.uid)
                # in a thread of its own: a hook may wait for what this kubelet does meanwhile (the
                # cleanup hook waits for the operator's pods to be deleted)
                threading.Thread(target=self._play, args=(client, pod, owner.name, playing), daemon=True).start()
        except BaseException as e:  # noqa: BLE001 - reported by stop(); closing the stream ends it so
            if not self._stopping:
                self._error = e
        finally:
            client.close()

    def _finish_deletion(self, core, pod) -> None:
        """What the kubelet does for a pod being deleted gracefully: stop its containers (none
        runs here) and delete it for good (grace period 0), so the pod object goes."""
        try:
            core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise

    def _play(self, client, pod, job: str, playing: set[str]) -> None:
        try:
            self._run_hook(client, pod, job)
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self._error = self._error or e
        finally:
            playing.discard(pod.metadata.uid)

    def _run_hook(self, client, pod, job: str) -> None:
        raw = client.sanitize_for_serialization(pod)
        container = raw["spec"]["containers"][0]
        command = container.get("command") or ["taugate"]  # the image's ENTRYPOINT
        if command[0] == "taugate":
            argv = [sys.executable, "-m", "taugate.cli", *command[1:]]
        elif command[0] == "python":
            argv = [sys.executable, *command[1:]]
        else:
            raise AssertionError(f"hook pod {raw['metadata']['name']} runs {command[0]!r}, which this stand-in "
                                 f"cannot run")
        argv += container.get("args") or []
        env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
        env["KUBECONFIG"] = str(self.cp.token_kubeconfig(self.namespace, raw["spec"]["serviceAccountName"],
                                                         f"hook-{raw['metadata']['name']}"))
        started = _now()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "NO_PROXY": "127.0.0.1,localhost", **env},
                              cwd=self.workdir)
        self.played.append(PlayedPod(job, argv, proc.returncode, proc.stdout + proc.stderr))
        phase = "Succeeded" if proc.returncode == 0 else "Failed"
        status = {"phase": phase, "startTime": started,
                  "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted",
                                  "lastTransitionTime": _now()}],
                  "containerStatuses": [{"name": container["name"], "image": container["image"], "imageID": "",
                                         "ready": False, "restartCount": 0, "started": False,
                                         "state": {"terminated": {"exitCode": proc.returncode,
                                                                  "reason": "Completed" if phase == "Succeeded"
                                                                  else "Error",
                                                                  "startedAt": started, "finishedAt": _now()}}}]}
        self.cp.kubectl("patch", "pod", raw["metadata"]["name"], "-n", self.namespace, "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": status}))

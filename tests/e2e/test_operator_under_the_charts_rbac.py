"""``taugate operator`` on the real API server, authenticated as the chart's own operator
ServiceAccount (a bound token, not the admin), so the chart's RBAC is what it has: the TauCluster
status, a TauWorkspace's namespace, LocalQueue, RBAC, ServiceAccount and PVC, and TauQuotaRequest
approval, which only platform admins may give (RBAC and the webhook both refuse a researcher).
The webhook's watches see the operator's results and admit accordingly within seconds."""

from __future__ import annotations

import json

import yaml

from tests.e2e.platform import NAMESPACE, PROBE_JOB, RELEASE, SYSTEM_NAMESPACE
from tests.e2e.workloads import QUEUE, into_workspace
from tests.paths import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())


def test_the_operator_authenticates_as_the_charts_service_account_and_holds_only_its_rbac(platform):
    cp = platform.cp
    kc = platform.kubeconfigs["operator"]
    who = json.loads(cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kc).stdout)
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{NAMESPACE}:{RELEASE}-operator"
    can = lambda *a: cp.kubectl("auth", "can-i", *a, kubeconfig=kc, check=False).stdout.strip()  # noqa: E731
    assert can("patch", "clusters.tau.azure.com/cluster", "--subresource=status") == "yes"
    assert can("create", "localqueues.kueue.x-k8s.io", "-n", "vision") == "yes"
    assert can("delete", "namespaces") == "no"
    assert can("create", "secrets", "-n", "kube-system") == "no"
    assert can("patch", "clusterqueues.kueue.x-k8s.io") == "no"  # quotaRaise is off by default


def test_the_taucluster_status_holds_the_resolved_profiles_and_the_set_hash_the_webhook_checks(platform, example_state):
    status = platform.cp.get_json("clusters.tau.azure.com", "cluster")["status"]
    assert status["phase"] == "Ready"
    profiles = status["workloadProfiles"]
    names = {p["name"] for p in profiles["profiles"]}
    assert {"h100-1gpu", "h100-8gpu", "a100-4gpu", "cpu-small"} <= names
    assert len(profiles["profileSetHash"]) == 64
    # The admitted object's record carries the same hash: the webhook read it from this status.
    platform.cp.kubectl("apply", "-f", "-", input=json.dumps(into_workspace(EXAMPLE, name="hash-check")))
    admitted = platform.cp.get_json("rayjob", "hash-check", "-n", "vision")
    record = json.loads(admitted["metadata"]["annotations"]["tau.azure.com/admission"])
    assert record["profileSetHash"] == profiles["profileSetHash"]


def test_a_new_workspace_gets_its_namespace_queue_rbac_service_account_and_pvc_and_the_webhook_admits_into_it(platform):
    cp = platform.cp
    cq = cp.get_json("clusterqueues.v1beta2.kueue.x-k8s.io", "nlp-cq")
    cp.apply_objects([{"apiVersion": cq["apiVersion"], "kind": "ClusterQueue", "metadata": {"name": "speech-cq"},
                       "spec": cq["spec"]}])
    ws = {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauWorkspace",
          "metadata": {"name": "speech", "namespace": SYSTEM_NAMESPACE},
          "spec": {"principalRef": {"provider": "entra", "name": "speech-researchers"},
                   "kubernetesSubject": {"kind": "Group", "name": "speech-researchers"},
                   "role": "tau-researcher-v1", "target": {"namespace": "speech", "createNamespace": True},
                   "queue": "speech-queue", "clusterQueue": "speech-cq", "defaults": {"workloadProfile": "cpu-small"},
                   "dataVolume": {"size": "10Gi"}}}
    cp.apply_objects([ws])
    platform.wait_for("the speech workspace to be Ready", lambda: (cp.get_json(
        "workspaces.tau.azure.com", "speech", "-n", SYSTEM_NAMESPACE).get("status") or {}).get("phase") == "Ready", 60)
    ns = cp.get_json("namespace", "speech")
    assert "tau.azure.com/workspace" in ns["metadata"]["labels"]
    assert cp.get_json("localqueue.kueue.x-k8s.io", "speech-queue", "-n", "speech")["spec"]["clusterQueue"]
    assert cp.get_json("persistentvolumeclaims", "-n", "speech")["items"]
    assert cp.get_json("rolebindings", "-n", "speech")["items"]
    # A researcher of the new workspace may create RayJobs there (the bound ClusterRole) ...
    researcher = cp.user_kubeconfig("sam", ("speech-researchers",))
    for resource in ("rayjobs.ray.io", "jobs.batch"):
        assert cp.kubectl("auth", "can-i", "create", resource, "-n", "speech",
                          kubeconfig=researcher).stdout.strip() == "yes"
    # ... and the webhook, from its watches, queues them in the new workspace's LocalQueue.
    job = into_workspace(PROBE_JOB, namespace="speech", name="first")

    def admitted() -> bool:
        out = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", kubeconfig=researcher, check=False,
                         input=json.dumps(job))
        return out.returncode == 0 and json.loads(out.stdout)["metadata"]["labels"].get(QUEUE) == "speech-queue"
    platform.wait_for("the webhook to admit into the new workspace", admitted, 30)


def _quota_request(name: str) -> dict:
    return {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauQuotaRequest",
            "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE},
            "spec": {"workspace": "vision", "resource": "h100", "requested": 16, "reason": "sweep"}}


def test_a_researcher_cannot_approve_a_quota_request_rbac_and_the_webhook_both_refuse_and_an_admin_can(platform):
    cp = platform.cp
    cp.apply_objects([_quota_request("vision-burst")])
    approve = ["annotate", "quotarequests.tau.azure.com", "vision-burst", "-n", SYSTEM_NAMESPACE,
               "tau.azure.com/approved=true"]
    # A researcher has no RBAC on the system namespace at all.
    researcher = cp.user_kubeconfig("alice", ("vision-researchers",))
    out = cp.kubectl(*approve, kubeconfig=researcher, check=False)
    assert out.returncode != 0 and "forbidden" in out.stderr.lower()
    # A requester whom RBAC lets edit quota requests is still refused by taugate's webhook.
    cp.apply_objects([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "quota-requester", "namespace": SYSTEM_NAMESPACE},
         "rules": [{"apiGroups": ["tau.azure.com"], "resources": ["quotarequests"],
                    "verbs": ["get", "list", "create", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "quota-requester", "namespace": SYSTEM_NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "quota-requester"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]}])
    requester = cp.user_kubeconfig("bob", ("vision-researchers",))
    out = cp.kubectl(*approve, kubeconfig=requester, check=False)
    assert out.returncode != 0
    assert "quota-approval" in out.stderr and "only platform admins may approve" in out.stderr, out.stderr
    assert "tau.azure.com/approved" not in (cp.get_json("quotarequests.tau.azure.com", "vision-burst", "-n",
                                                        SYSTEM_NAMESPACE)["metadata"].get("annotations") or {})
    # A platform admin (group tau-platform-admins, bound by the chart to its platform-admin
    # ClusterRole and named to the webhook in TAUGATE_ADMIN_GROUPS) can, and the operator moves
    # the request to Approved.
    # The approver is who the API server authenticated, whatever the annotation says: an admin
    # approving "as the-cto" is recorded as herself, and kubectl prints the Warning that says so.
    admin = cp.user_kubeconfig("carol", ("tau-platform-admins",))
    as_someone = cp.kubectl(*approve, "tau.azure.com/reviewed-by=the-cto", kubeconfig=admin)
    assert ("Warning: tau.azure.com/reviewed-by is recorded as 'carol', the user who made this approval, "
            "not 'the-cto'") in as_someone.stderr, as_someone.stderr
    def status() -> dict:
        request = cp.get_json("quotarequests.tau.azure.com", "vision-burst", "-n", SYSTEM_NAMESPACE)
        return request.get("status") or {}

    done = platform.wait_for("the operator to mark the request Approved", lambda: status().get("phase") == "Approved"
                             and status(), 30)
    assert done["reviewedBy"] == "carol" and done["approvedBy"] == "carol"
    stored = cp.get_json("quotarequests.tau.azure.com", "vision-burst", "-n", SYSTEM_NAMESPACE)
    assert stored["metadata"]["annotations"]["tau.azure.com/reviewed-by"] == "carol"



# ---- which namespaces may become a workspace (issue 27) ------------------------------------------------

def _workspace(name: str, namespace: str) -> dict:
    return {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauWorkspace",
            "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE},
            "spec": {"principalRef": {"provider": "entra", "name": f"{name}-researchers"},
                     "kubernetesSubject": {"kind": "Group", "name": f"{name}-researchers"},
                     "role": "tau-researcher-v1", "target": {"namespace": namespace, "createNamespace": True},
                     "queue": f"{name}-queue", "clusterQueue": "nlp-cq", "defaults": {"workloadProfile": "cpu-small"}}}


def test_a_workspace_for_a_trusted_controllers_or_kubernetes_namespace_is_refused_by_the_api_server(platform):
    cp = platform.cp
    for target in ("ray-system", "kueue-system", "jobset-system", "lws-system", "kubeflow", "kube-public"):
        out = cp.kubectl("create", "-f", "-", input=json.dumps(_workspace("grab", target)), check=False)
        assert out.returncode != 0 and "denied the request" in out.stderr, out.stderr
        assert f"namespace {target!r} is reserved" in out.stderr, out.stderr
    assert cp.kubectl("get", "workspaces.tau.azure.com", "grab", "-n", SYSTEM_NAMESPACE, check=False).returncode != 0


def test_an_existing_namespace_becomes_a_workspace_only_after_a_platform_admin_annotates_it(platform):
    cp = platform.cp
    cp.kubectl("create", "namespace", "legacy-ml")
    cp.apply_objects([_workspace("legacy", "legacy-ml")])

    def status() -> dict:
        return cp.get_json("workspaces.tau.azure.com", "legacy", "-n", SYSTEM_NAMESPACE).get("status") or {}

    def namespace_ready() -> dict:
        return next((c for c in status().get("conditions") or [] if c["type"] == "NamespaceReady"), {})
    refused = platform.wait_for("the operator to refuse adopting legacy-ml",
                                lambda: namespace_ready().get("reason") == "NamespaceRefused" and namespace_ready(), 60)
    assert "kubectl annotate namespace legacy-ml tau.azure.com/adopt-as-workspace=legacy" in refused["message"]
    assert status()["phase"] == "Degraded"
    assert cp.get_json("rolebindings", "-n", "legacy-ml")["items"] == []
    assert "tau.azure.com/workspace" not in (cp.get_json("namespace", "legacy-ml")["metadata"].get("labels") or {})
    # A researcher cannot give the opt-in: Namespaces are cluster-scoped.
    researcher = cp.user_kubeconfig("rita", ("vision-researchers",))
    assert cp.kubectl("annotate", "namespace", "legacy-ml", "tau.azure.com/adopt-as-workspace=legacy",
                      kubeconfig=researcher, check=False).returncode != 0
    # The platform admin's annotation wakes the workspace at once (the operator watches Namespaces).
    cp.kubectl("annotate", "namespace", "legacy-ml", "tau.azure.com/adopt-as-workspace=legacy")
    platform.wait_for("the operator to adopt legacy-ml and bind the researchers",
                      lambda: namespace_ready().get("status") == "True"
                      and cp.get_json("rolebindings", "-n", "legacy-ml")["items"], 30)
    assert cp.get_json("namespace", "legacy-ml")["metadata"]["labels"]["tau.azure.com/workspace"] == "legacy"

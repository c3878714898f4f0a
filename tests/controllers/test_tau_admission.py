"""Admission for taugate's own kinds: only platform admins approve quota; workspace and cluster
specs are checked before they are stored (taugate.tau_admission, called by the webhook)."""

from __future__ import annotations

import copy

import pytest

from taugate import labels
from taugate.snapshot import build_state
from taugate.tau_admission import reviewer_to_record, validate_tau_object
from tests.controllers.conftest import pick

RESEARCHER = {"username": "rita@contoso.com", "groups": ["vision-researchers", "system:authenticated"]}
ADMIN = {"username": "alice@contoso.com", "groups": ["tau-platform-admins", "system:authenticated"]}


def _qr(annotations: dict | None = None, requested: int = 32) -> dict:
    return {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauQuotaRequest",
            "metadata": {"name": "vision-burst", "namespace": "tau-platform", "annotations": annotations or {}},
            "spec": {"workspace": "vision", "resource": "nvidia.com/gpu", "requested": requested, "reason": "sweep"}}


def _req(obj: dict, user: dict, operation: str = "CREATE", old: dict | None = None, **extra) -> dict:
    group, _, version = obj["apiVersion"].rpartition("/")
    return {"uid": "1", "kind": {"group": group, "version": version, "kind": obj["kind"]}, "operation": operation,
            "userInfo": user, "object": obj, "oldObject": old, "namespace": obj["metadata"].get("namespace"),
            "name": obj["metadata"]["name"], **extra}


def _policies(found: list) -> set[str]:
    return {v.policy for v in found}


def test_a_researcher_cannot_approve_their_own_quota_request(settings):
    old = _qr()
    new = _qr({labels.APPROVED: "true", labels.REVIEWED_BY: "rita"})
    found = validate_tau_object(_req(new, RESEARCHER, "UPDATE", old), settings)
    assert _policies(found) == {"quota-approval"}
    msg = found[0].message
    assert "rita@contoso.com adds tau.azure.com/approved" in msg
    assert "tau-platform-admins" in msg and "system:masters" in msg  # names who may approve
    assert found[0].field == "metadata.annotations" and found[0].action == "deny"


def test_an_admin_may_approve_and_reject(settings):
    old = _qr()
    for ann in ({labels.APPROVED: "true", labels.REVIEWED_BY: "alice@contoso.com"}, {labels.REJECTED: "true"}):
        assert validate_tau_object(_req(_qr(ann), ADMIN, "UPDATE", old), settings) == []


def test_an_admin_cannot_approve_as_someone_else(settings):
    (found,) = validate_tau_object(_req(_qr({labels.APPROVED: "true", labels.REVIEWED_BY: "the-cto"}), ADMIN, "UPDATE",
                                        _qr()), settings)
    assert found.policy == "quota-approval" and found.field == f"metadata.annotations[{labels.REVIEWED_BY}]"
    assert "says 'the-cto', but this approval comes from 'alice@contoso.com'" in found.message
    assert "fix: leave tau.azure.com/reviewed-by out" in found.message


def test_an_admin_cannot_recredit_or_erase_someone_elses_review(settings):
    old = _qr({labels.APPROVED: "true", labels.REVIEWED_BY: "carol@contoso.com"})
    for given in ({labels.APPROVED: "true", labels.REVIEWED_BY: "the-cto"},  # re-credited
                  {labels.APPROVED: "true", labels.REVIEWED_BY: "alice@contoso.com"},  # taken over
                  {labels.APPROVED: "true"}):  # erased
        request = _req(_qr(given), ADMIN, "UPDATE", old)
        (found,) = validate_tau_object(request, settings)
        assert found.field == f"metadata.annotations[{labels.REVIEWED_BY}]"
        assert "changes only with tau.azure.com/approved or tau.azure.com/rejected" in found.message
        assert reviewer_to_record(request) is None  # and the mutating route does not rewrite it either


def test_the_approving_user_is_recorded_from_the_request_on_every_change_of_the_approval(settings):
    old = _qr({labels.APPROVED: "true", labels.REVIEWED_BY: "alice@contoso.com"})
    bob = {"username": "bob@contoso.com", "groups": ["tau-platform-admins"]}
    cases = [
        (_req(_qr({labels.APPROVED: "true"}), ADMIN, "UPDATE", _qr()), "alice@contoso.com"),  # approves
        (_req(_qr({labels.APPROVED: "true", labels.REVIEWED_BY: "the-cto"}), ADMIN, "UPDATE", _qr()),
         "alice@contoso.com"),  # approves "as" someone
        (_req(_qr({labels.REJECTED: "true", labels.REVIEWED_BY: "alice@contoso.com"}), bob, "UPDATE", old),
         "bob@contoso.com"),  # another admin rejects what alice approved
        (_req(_qr({labels.APPROVED: "true"}), ADMIN, "CREATE"), "alice@contoso.com"),  # created approved
        (_req(_qr(), ADMIN, "UPDATE", _qr({labels.APPROVED: "true"})), "alice@contoso.com"),  # withdraws
        (_req(_qr(requested=64), ADMIN, "UPDATE", _qr()), None),  # no approval changes
        (_req(old, ADMIN, "UPDATE", old), None),  # already names the user who... made no change
        (_req(_qr({labels.APPROVED: "true"}), ADMIN, "UPDATE", _qr(), subResource="status"), None),
        (_req(_qr({labels.APPROVED: "true"}), {"groups": ["tau-platform-admins"]}, "UPDATE", _qr()), None),
    ]
    assert [reviewer_to_record(r) for r, _ in cases] == [want for _, want in cases]


def test_the_mutating_route_writes_the_reviewer_and_warns_when_it_replaces_a_claimed_one():
    import jsonpatch

    from taugate.webhook import approval

    claimed = _req(_qr({labels.APPROVED: "true", labels.REVIEWED_BY: "the-cto"}), ADMIN, "UPDATE", _qr())
    decision = approval.mutate(copy.deepcopy(claimed))
    assert decision.allowed
    out = jsonpatch.apply_patch(claimed["object"], decision.patch)
    assert out["metadata"]["annotations"][labels.REVIEWED_BY] == "alice@contoso.com"
    assert decision.warnings == [
        "tau.azure.com/reviewed-by is recorded as 'alice@contoso.com', the user who made this approval, not "
        "'the-cto' (taugate records the approving user itself; leave the annotation out)"]
    bare = _req(_qr({labels.APPROVED: "true"}), ADMIN, "UPDATE", _qr())
    bare["object"]["metadata"].pop("annotations")  # cannot approve without annotations: nothing changes
    assert approval.mutate(copy.deepcopy(bare)).patch is None
    plain = _req(_qr({labels.APPROVED: "true"}), ADMIN, "UPDATE", _qr())
    decision = approval.mutate(copy.deepcopy(plain))
    assert decision.warnings == [] and jsonpatch.apply_patch(plain["object"], decision.patch)["metadata"][
        "annotations"] == {labels.APPROVED: "true", labels.REVIEWED_BY: "alice@contoso.com"}


def test_a_configured_admin_user_may_approve_without_the_group(settings):
    s = settings.model_copy(update={"admin_users": ("bob@contoso.com",)})
    bob = {"username": "bob@contoso.com", "groups": ["system:authenticated"]}
    assert validate_tau_object(_req(_qr({labels.APPROVED: "true"}), bob, "UPDATE", _qr()), s) == []
    assert "user(s) bob@contoso.com" in validate_tau_object(_req(_qr({labels.APPROVED: "true"}), RESEARCHER, "UPDATE",
                                                                  _qr()), s)[0].message


@pytest.mark.parametrize("old_ann,new_ann,verb", [
    ({labels.REJECTED: "true"}, {}, "removes tau.azure.com/rejected"),
    ({labels.APPROVED: "true", labels.REVIEWED_BY: "alice"}, {labels.APPROVED: "true", labels.REVIEWED_BY: "rita"},
     "changes tau.azure.com/reviewed-by"),
])
def test_a_researcher_cannot_remove_or_change_a_review(settings, old_ann, new_ann, verb):
    found = validate_tau_object(_req(_qr(new_ann), RESEARCHER, "UPDATE", _qr(old_ann)), settings)
    assert verb in found[0].message


def test_a_researcher_may_create_a_request_without_approval_annotations_but_not_with_them(settings):
    assert validate_tau_object(_req(_qr(), RESEARCHER), settings) == []
    assert _policies(validate_tau_object(_req(_qr({labels.APPROVED: "true"}), RESEARCHER),
                                         settings)) == {"quota-approval"}


def test_an_approved_requests_spec_is_frozen_for_researchers(settings):
    approved = {labels.APPROVED: "true", labels.REVIEWED_BY: "alice"}
    grown = _req(_qr(approved, requested=64), RESEARCHER, "UPDATE", _qr(approved))
    found = validate_tau_object(grown, settings)
    assert [v.field for v in found] == ["spec"] and "create a new TauQuotaRequest" in found[0].message
    assert validate_tau_object({**grown, "userInfo": ADMIN}, settings) == []


def test_the_webhook_denies_a_researchers_approval_with_a_message_naming_the_admins(settings, small_cluster):
    from taugate.webhook.review import review_response, validate_tau

    state = build_state(small_cluster, settings)
    request = _req(_qr({labels.APPROVED: "true"}), RESEARCHER, "UPDATE", _qr())
    decision = validate_tau(request, state, settings)
    assert not decision.allowed and decision.code == 403
    response = review_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request},
                               decision)["response"]
    assert response["allowed"] is False and "tau-platform-admins" in response["status"]["message"]
    assert validate_tau({**request, "userInfo": ADMIN}, state, settings).allowed


def test_status_updates_and_deletes_are_not_judged(settings):
    req = _req(_qr({labels.APPROVED: "true"}), RESEARCHER, "UPDATE", _qr(), subResource="status")
    assert validate_tau_object(req, settings) == []
    assert validate_tau_object({**req, "subResource": None, "operation": "DELETE"}, settings) == []


def test_the_example_workspaces_and_cluster_are_allowed(settings, example_objects):
    state = build_state(example_objects, settings)
    for obj in example_objects:
        if obj["kind"] in ("TauWorkspace", "TauCluster"):
            assert validate_tau_object(_req(obj, ADMIN), settings, state) == [], obj["metadata"]["name"]


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease", "default", "tau-platform",
                                       "taugate-system",
                                       # every trusted controller's namespace (Settings.controller_users)
                                       "ray-system", "kueue-system", "jobset-system", "lws-system", "kubeflow",
                                       "kubeflow-system"])
def test_a_workspace_for_a_reserved_namespace_is_denied(settings, example_objects, namespace):
    ws = pick(example_objects, "TauWorkspace", "vision")
    ws["spec"]["target"]["namespace"] = namespace
    found = validate_tau_object(_req(ws, ADMIN), settings)
    assert [v.field for v in found] == ["spec.target.namespace"] and "reserved" in found[0].message


def test_a_workspace_for_another_workspaces_namespace_is_denied(settings, example_objects):
    state = build_state(example_objects, settings)
    ws = copy.deepcopy(pick(example_objects, "TauWorkspace", "nlp"))
    ws["metadata"]["name"] = "nlp-2"
    found = validate_tau_object(_req(ws, ADMIN), settings, state)
    assert "belongs to TauWorkspace 'nlp'" in found[0].message


def test_workspace_spec_checks_name_each_problem(settings, example_objects):
    state = build_state(example_objects, settings)
    ws = pick(example_objects, "TauWorkspace", "vision")
    ws["spec"]["queue"] = "Vision_Queue"
    ws["spec"]["defaults"]["workloadProfile"] = "h200-8gpu"
    del ws["spec"]["kubernetesSubject"]
    found = {v.field: v.message for v in validate_tau_object(_req(ws, ADMIN), settings, state)}
    assert "not a valid LocalQueue name" in found["spec.queue"]
    assert "missing kubernetesSubject" in found["spec"]
    assert "'h200-8gpu' is not in the TauCluster's workloadProfiles" in found["spec.defaults.workloadProfile"]


def test_a_workspace_with_a_bad_field_is_denied_with_the_schema_error(settings, example_objects):
    ws = pick(example_objects, "TauWorkspace", "vision")
    ws["spec"]["role"] = "owner"
    found = validate_tau_object(_req(ws, ADMIN), settings)
    assert found[0].policy == "tau-schema" and found[0].field == "spec.role"


def test_cluster_spec_checks_unique_names_worker_count_priorities_and_singleton(settings, example_objects):
    cluster = pick(example_objects, "TauCluster")
    profiles = cluster["spec"]["workloadProfiles"]
    profiles[1]["name"] = profiles[0]["name"]
    profiles[2]["workerCount"] = 0
    profiles[3]["priorities"] = {"workloadPriorityClassName": "x"}
    profiles[4]["defaultLocalQueue"] = "Not A Queue"
    cluster["metadata"]["name"] = "prod"
    found = {v.field: v.message for v in validate_tau_object(_req(cluster, ADMIN), settings)}
    assert "already used by spec.workloadProfiles[0]" in found["spec.workloadProfiles[1].name"]
    assert "workerCount >= 1" in found["spec.workloadProfiles[2].workerCount"]
    assert "podPriorityClassName" in found["spec.workloadProfiles[3].priorities"]
    assert "not a valid LocalQueue name" in found["spec.workloadProfiles[4].defaultLocalQueue"]
    assert "singleton named 'cluster'" in found["metadata.name"]


def test_the_namespaces_of_the_configured_trusted_controllers_are_reserved(example_objects):
    from taugate.settings import Settings

    settings = Settings(controller_users=("system:serviceaccount:gpu-operators:my-operator", "system:kube-scheduler"))
    ws = pick(example_objects, "TauWorkspace", "vision")
    ws["spec"]["target"]["namespace"] = "gpu-operators"
    found = validate_tau_object(_req(ws, ADMIN), settings)
    assert [v.field for v in found] == ["spec.target.namespace"] and "gpu-operators" in found[0].message
    ws["spec"]["target"]["namespace"] = "ray-system"  # no longer a trusted controller's here
    assert validate_tau_object(_req(ws, ADMIN), settings) == []

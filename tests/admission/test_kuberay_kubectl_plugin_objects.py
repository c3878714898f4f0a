"""What KubeRay's kubectl plugin (v1.5.0) creates is admitted unmodified: `kubectl ray job submit`
writes a RayJob with ``shutdownAfterJobFinishes: false``, which Kueue refuses for a queued RayJob,
so taugate sets it to true and says so in a warning (unless the platform refuses it);
`kubectl ray create cluster`'s RayCluster needs nothing. The objects are the recorded fixtures of
``tests/data/kuberay-kubectl-plugin`` (each names the plugin's source lines)."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
import yaml

from taugate import labels
from taugate.webhook.review import admit, mutate, request_for, validate
from tests.paths import REPO

PLUGIN = REPO / "tests" / "data" / "kuberay-kubectl-plugin"
JOB_SUBMIT = ("rayjob-submit.yaml", "rayjob-submit-worker-gpu.yaml")
CREATE_CLUSTER = ("raycluster-create.yaml", "raycluster-create-worker-gpu.yaml")
SHUTDOWN = "/spec/shutdownAfterJobFinishes"


def _fixture(name: str) -> dict:
    return yaml.safe_load((PLUGIN / name).read_text())


def _refusing(settings):
    return settings.model_copy(update={"ray_shutdown_after_job_finishes": "refuse"})


def _shutdown_warnings(warnings) -> list[str]:
    return [w for w in warnings if "spec.shutdownAfterJobFinishes" in w]


# --- kubectl ray job submit ------------------------------------------------------------------------

@pytest.mark.parametrize("name", JOB_SUBMIT)
def test_the_rayjob_of_kubectl_ray_job_submit_is_queued_with_shutdown_set_and_a_warning_saying_why(
        name, state, settings):
    obj = _fixture(name)
    assert obj["spec"]["shutdownAfterJobFinishes"] is False and obj["spec"]["submissionMode"] == "InteractiveMode"
    m = mutate(request_for(obj, namespace="vision"), state, settings)
    assert m.allowed, m.message
    assert {"op": "replace", "path": SHUTDOWN, "value": True} in m.patch
    [warning] = _shutdown_warnings(m.warnings)
    assert warning.startswith("taugate set spec.shutdownAfterJobFinishes: true (it was false)")
    assert "a kueue managed job should delete the cluster after finishing" in warning
    assert "kueue pkg/controller/jobs/rayjob/rayjob_webhook.go" in warning
    assert "the RayCluster is deleted as soon as the job finishes" in warning  # ttlSecondsAfterFinished: 0
    d = admit(obj, state=state, settings=settings, namespace="vision")
    assert d.allowed, d.message
    final = d.object
    assert final["spec"]["shutdownAfterJobFinishes"] is True and final["spec"]["suspend"] is True
    assert final["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert len(final["metadata"]["labels"][labels.RUN_ID]) == 24
    # InteractiveMode has no submitter Job: no submitter template is added, the job id is kept.
    assert "submitterPodTemplate" not in final["spec"]
    assert final["spec"]["jobId"] == obj["spec"]["jobId"]
    assert _shutdown_warnings(d.warnings) == [warning]


def test_the_gpu_workers_of_kubectl_ray_job_submit_are_placed_on_the_profiles_gpu_class(state, settings):
    d = admit(_fixture("rayjob-submit-worker-gpu.yaml"), state=state, settings=settings, namespace="vision")
    assert d.allowed, d.message
    cluster = d.object["spec"]["rayClusterSpec"]
    assert d.object["metadata"]["labels"][labels.WORKLOAD_PROFILE] == "h100-1gpu"
    assert cluster["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {settings.gpu_class_label: "h100"}
    assert "nodeSelector" not in cluster["headGroupSpec"]["template"]["spec"]


def test_a_rayjob_that_leaves_shutdown_out_gets_true_and_the_warning_says_it_was_not_set(state, settings):
    obj = _fixture("rayjob-submit.yaml")
    del obj["spec"]["shutdownAfterJobFinishes"]
    obj["spec"]["ttlSecondsAfterFinished"] = 600
    for s in (settings, _refusing(settings)):  # filled either way: the client did not ask to keep it
        m = mutate(request_for(obj, namespace="vision"), state, s)
        assert {"op": "add", "path": SHUTDOWN, "value": True} in m.patch
        [warning] = _shutdown_warnings(m.warnings)
        assert "(it was not set (KubeRay's default: false))" in warning
        assert "deleted 600 s after the job finishes" in warning


def test_a_platform_that_refuses_keeps_the_denial_with_the_field_and_the_plugins_flag_as_the_fix(state, settings):
    obj = _fixture("rayjob-submit.yaml")
    refusing = _refusing(settings)
    m = mutate(request_for(obj, namespace="vision"), state, refusing)
    assert m.allowed and _shutdown_warnings(m.warnings) == []
    assert all(op["path"] != SHUTDOWN for op in m.patch)
    d = admit(obj, state=state, settings=refusing, namespace="vision")
    assert not d.allowed
    [v] = [v for v in d.violations if v.policy == "rayjob-shutdown"]
    assert v.field == "spec.shutdownAfterJobFinishes"
    assert v.message.startswith("is false; allowed: true for a queued RayJob")
    assert "fix: set spec.shutdownAfterJobFinishes: true" in v.message
    assert "--ttl-seconds-after-finished=0" in v.message


def test_a_rayjob_that_says_true_gets_no_warning_and_the_output_mutated_again_gets_no_patch(state, settings):
    obj = _fixture("rayjob-submit.yaml")
    first = mutate(request_for(obj, namespace="vision"), state, settings)
    out = jsonpatch.apply_patch(obj, first.patch)
    again = mutate(request_for(out, namespace="vision"), state, settings)  # the API server's reinvocation
    assert again.patch is None and _shutdown_warnings(again.warnings) == []


def test_a_rayjob_on_an_existing_cluster_or_with_a_deletion_strategy_keeps_what_it_says(state, settings):
    selector = _fixture("rayjob-submit.yaml")
    del selector["spec"]["rayClusterSpec"]
    selector["spec"]["clusterSelector"] = {"ray.io/cluster": "plugin-cluster"}  # not queued: Kueue has no say
    strategy = _fixture("rayjob-submit.yaml")
    del strategy["spec"]["shutdownAfterJobFinishes"]
    strategy["spec"]["deletionStrategy"] = {"deletionRules": [  # KubeRay: exclusive with shutdown: true
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}}]}
    for obj in (selector, strategy):
        m = mutate(request_for(obj, namespace="vision"), state, settings)
        assert m.allowed, m.message
        assert all(op["path"] != SHUTDOWN for op in m.patch) and _shutdown_warnings(m.warnings) == []


def test_an_update_of_a_stored_rayjob_saying_false_is_never_changed_nor_made_to_fail(state, settings):
    created = admit(_fixture("rayjob-submit.yaml"), state=state, settings=settings, namespace="vision").object
    old = copy.deepcopy(created)
    old["spec"]["shutdownAfterJobFinishes"] = False  # stored before this rule, or written by a controller
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team.example/stage"] = "two"
    request = request_for(new, namespace="vision", operation="UPDATE", old=old)
    m = mutate(request, state, settings)
    assert m.allowed and all(op["path"] != SHUTDOWN for op in m.patch or [])
    assert _shutdown_warnings(m.warnings) == []
    assert validate(request, state, settings).allowed


# --- kubectl ray create cluster --------------------------------------------------------------------

@pytest.mark.parametrize("name, profile", [(CREATE_CLUSTER[0], "cpu-small"), (CREATE_CLUSTER[1], "h100-1gpu")])
def test_the_raycluster_of_kubectl_ray_create_cluster_is_queued_and_placed_without_a_warning(
        name, profile, state, settings):
    d = admit(_fixture(name), state=state, settings=settings, namespace="vision")
    assert d.allowed, d.message
    assert d.warnings == []
    meta_labels = d.object["metadata"]["labels"]
    assert meta_labels[labels.KUEUE_QUEUE_NAME] == "vision-queue" and meta_labels[labels.WORKLOAD_PROFILE] == profile
    assert d.object["spec"]["suspend"] is True and "shutdownAfterJobFinishes" not in d.object["spec"]


def test_an_update_setting_it_back_to_false_keeps_true_with_a_warning_or_is_refused_where_the_platform_refuses(
        state, settings):
    # The plugin's apply again under the same name, or a second `kubectl apply` of a file saying
    # false (kubectl's three-way merge sends the file's value), sets false again: Kueue's
    # ValidateUpdate refuses it as its validateCreate does, so taugate keeps true and says so.
    stored = admit(_fixture("rayjob-submit.yaml"), state=state, settings=settings, namespace="vision").object
    new = copy.deepcopy(stored)
    new["spec"]["shutdownAfterJobFinishes"] = False
    new["metadata"]["labels"]["team.example/stage"] = "two"
    request = request_for(new, namespace="vision", operation="UPDATE", old=stored)
    m = mutate(copy.deepcopy(request), state, settings, in_place=True)  # as the server calls it
    assert m.allowed and {"op": "replace", "path": SHUTDOWN, "value": True} in m.patch
    [warning] = _shutdown_warnings(m.warnings)
    assert warning.startswith("taugate kept spec.shutdownAfterJobFinishes: true (this update set false): Kueue refuses")
    final = jsonpatch.apply_patch(new, m.patch)
    assert final["metadata"]["labels"]["team.example/stage"] == "two"
    assert validate(request_for(final, namespace="vision", operation="UPDATE", old=stored), state, settings).allowed
    removed = copy.deepcopy(stored)
    del removed["spec"]["shutdownAfterJobFinishes"]
    m = mutate(request_for(removed, namespace="vision", operation="UPDATE", old=stored), state, settings)
    assert {"op": "add", "path": SHUTDOWN, "value": True} in m.patch
    assert "(this update removed it)" in _shutdown_warnings(m.warnings)[0]
    refusing = _refusing(settings)
    m = mutate(request, state, refusing)
    assert m.allowed and all(op["path"] != SHUTDOWN for op in m.patch or []) and not _shutdown_warnings(m.warnings)
    d = validate(request, state, refusing)
    assert not d.allowed
    [v] = [v for v in d.violations if v.policy == "rayjob-shutdown"]
    assert v.field == "spec.shutdownAfterJobFinishes" and "fix: set spec.shutdownAfterJobFinishes: true" in v.message

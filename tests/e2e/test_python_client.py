"""A Ray job-submission pipeline that talks to the API server with the official Python client
(``kubernetes``), as a researcher's credentials allow: the object it gets back from the create is
the admitted one, and a denial is an ``ApiException`` whose body names the field and the fix."""

from __future__ import annotations

import json

import kubernetes
import pytest
import yaml

from tests.e2e.workloads import RUN_ID, WORKSPACE, admitted_problems, into_workspace
from tests.paths import REPO

EXAMPLE = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
NINE_GPUS = yaml.safe_load((REPO / "examples" / "rayjob-nine-gpus.yaml").read_text())


@pytest.fixture(scope="module")
def researcher_api(platform):
    kubeconfig = platform.cp.user_kubeconfig("pipeline", ("vision-researchers",))
    client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    yield kubernetes.client.CustomObjectsApi(client)
    client.close()


def test_a_pipeline_creating_a_rayjob_with_the_python_client_gets_the_admitted_object_back(researcher_api, platform):
    created = researcher_api.create_namespaced_custom_object("ray.io", "v1", WORKSPACE, "rayjobs",
                                                             into_workspace(EXAMPLE, name="from-pipeline"))
    assert admitted_problems(created) == []
    stored = platform.cp.get_json("rayjob", "from-pipeline", "-n", WORKSPACE)
    assert stored["metadata"]["labels"][RUN_ID] == created["metadata"]["labels"][RUN_ID]


def test_a_denied_create_raises_an_api_exception_naming_the_field_and_the_fix(researcher_api):
    with pytest.raises(kubernetes.client.ApiException) as caught:
        researcher_api.create_namespaced_custom_object("ray.io", "v1", WORKSPACE, "rayjobs",
                                                       into_workspace(NINE_GPUS, name="nine-from-pipeline"))
    body = json.loads(caught.value.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert 400 <= body["code"] < 500
    assert 'workerGroupSpecs[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]' in body["message"]
    assert "allowed: at most 8 GPUs per pod" in body["message"] and "fix:" in body["message"]


def test_a_pipeline_gets_labels_watches_and_deletes_its_rayjob_and_the_run_id_stays_through(researcher_api, platform):
    """The calls a pipeline makes after the create: get, a merge patch of its own label, a watch
    of the status (written here by the admin through the status subresource, as KubeRay would)
    and the delete, seen on the same watch."""
    args = ("ray.io", "v1", WORKSPACE, "rayjobs")
    created = researcher_api.create_namespaced_custom_object(*args, into_workspace(EXAMPLE, name="pipeline-steps"))
    run_id = created["metadata"]["labels"][RUN_ID]
    got = researcher_api.get_namespaced_custom_object(*args, "pipeline-steps")
    assert got["metadata"]["labels"][RUN_ID] == run_id and admitted_problems(got) == []
    patched = researcher_api.patch_namespaced_custom_object(
        *args, "pipeline-steps", {"metadata": {"labels": {"pipeline.example/stage": "evaluate"}}})
    assert patched["metadata"]["labels"]["pipeline.example/stage"] == "evaluate"
    assert patched["metadata"]["labels"][RUN_ID] == run_id and admitted_problems(patched) == []

    watch = kubernetes.watch.Watch()
    events = watch.stream(researcher_api.list_namespaced_custom_object, *args,
                          field_selector="metadata.name=pipeline-steps",
                          resource_version=patched["metadata"]["resourceVersion"], timeout_seconds=60)
    platform.cp.kubectl("patch", "rayjob", "pipeline-steps", "-n", WORKSPACE, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"jobDeploymentStatus": "Initializing"}}))
    seen = []
    for event in events:
        seen.append((event["type"], (event["object"].get("status") or {}).get("jobDeploymentStatus")))
        if event["type"] == "MODIFIED" and seen[-1][1] == "Initializing":
            assert event["object"]["metadata"]["labels"][RUN_ID] == run_id
            researcher_api.delete_namespaced_custom_object(*args, "pipeline-steps")
        if event["type"] == "DELETED":
            watch.stop()
    assert ("MODIFIED", "Initializing") in seen and seen[-1][0] == "DELETED", seen

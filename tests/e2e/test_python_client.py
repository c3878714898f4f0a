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

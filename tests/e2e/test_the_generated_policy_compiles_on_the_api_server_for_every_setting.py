"""kube-apiserver compiles every CEL expression of a ValidatingAdmissionPolicy when it is created
(type-checked against the request, the TauCluster parameter and the variables) and refuses one that
does not compile or exceeds the cost budget: the policy taugate/admission_policy.py generates is
created (server-side dry run) for every setting that changes its text, so a setting a platform
team picks never leaves the operator unable to install it."""

from __future__ import annotations

import json

import pytest

from taugate import admission_policy
from taugate.settings import Settings

VARIANTS = {
    "defaults": Settings(),
    "device access governed, unmanaged kinds warned": Settings(device_access="govern", unmanaged_gpu_workloads="warn"),
    "the platform's own GPU resources and classes": Settings(gpu_device_resources=("example.com/tpu", "acme.io/*"),
                                                             gpu_device_classes=("gpu.example.com",),
                                                             gpu_class_label="example.com/accelerator"),
}


@pytest.mark.parametrize("settings", list(VARIANTS.values()), ids=list(VARIANTS))
def test_the_api_server_accepts_the_generated_policy(control_plane, settings):
    for doc in admission_policy.documents(settings):  # under another name: the operator may own the real one
        doc["metadata"]["name"] = "taugate-compile-check"
        if doc["kind"].endswith("Binding"):
            doc["spec"]["policyName"] = "taugate-compile-check"
        out = control_plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(doc),
                                    check=False)
        assert out.returncode == 0, out.stderr
        created = json.loads(out.stdout)
        assert created["spec"]["policyName" if doc["kind"].endswith("Binding") else "validations"] == \
            doc["spec"]["policyName" if doc["kind"].endswith("Binding") else "validations"]

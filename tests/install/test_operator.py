"""The operator pod has what the recorder needs to start: an evidence directory that survives
restarts and an Ed25519 signing key it can load, configured through settings that exist."""

from __future__ import annotations

import base64
from pathlib import PurePosixPath

import pytest

from taugate.controllers.recorder.config import RecorderConfig
from taugate.controllers.recorder.evidence.records import Signer
from taugate.settings import Settings
from tests.install.chart import find, objects, one, pod_spec


def _operator(objs: list[dict]) -> tuple[dict, dict]:
    spec = pod_spec(one(objs, "Deployment", "taugate-operator"))
    return spec, spec["containers"][0]


def _mounted_volume(spec: dict, container: dict, path: str) -> tuple[dict, str]:
    """The volume a file path lives in, and the path inside the volume."""
    for mount in container["volumeMounts"]:
        if PurePosixPath(path).is_relative_to(mount["mountPath"]):
            volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
            return volume, str(PurePosixPath(path).relative_to(mount["mountPath"]))
    raise AssertionError(f"{path} is on no mounted volume")


def test_the_recorder_settings_the_chart_sets_exist_and_point_at_mounted_volumes(default_objects, monkeypatch):
    spec, container = _operator(default_objects)
    env = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("TAUGATE_RECORDER_")}
    assert set(env) <= {f"TAUGATE_RECORDER_{name.upper()}" for name in RecorderConfig.model_fields}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = RecorderConfig()
    evidence, _ = _mounted_volume(spec, container, str(config.evidence_root))
    claim = one(default_objects, "PersistentVolumeClaim")
    assert evidence["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    key_volume, inner = _mounted_volume(spec, container, str(config.signing_key_file))
    assert [i["path"] for i in key_volume["secret"]["items"]] == [inner]


def test_the_generated_evidence_key_is_an_ed25519_key_the_recorder_loads(default_objects):
    spec, container = _operator(default_objects)
    volume, inner = _mounted_volume(spec, container, "/etc/taugate/evidence-key/ed25519.pem")
    secret = one(default_objects, "Secret", volume["secret"]["secretName"])
    signer = Signer.from_pem(base64.b64decode(secret["data"][inner]), "rendered Secret")
    assert len(signer.public_raw) == 32
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_an_existing_key_and_claim_are_used_instead_of_created():
    objs = objects({"operator": {"evidence": {"signingKey": {"existingSecret": "platform-evidence-key"},
                                              "persistence": {"existingClaim": "audit"}}}})
    spec, _ = _operator(objs)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["evidence-key"]["secret"]["secretName"] == "platform-evidence-key"
    assert volumes["evidence"]["persistentVolumeClaim"]["claimName"] == "audit"
    assert [o["metadata"]["name"] for o in find(objs, "Secret")] == ["taugate-admission-key"]
    assert find(objs, "PersistentVolumeClaim") == []


def _env_var(container: dict, name: str) -> dict:
    return next(e for e in container["env"] if e["name"] == name)


def test_the_webhook_and_the_operator_share_one_generated_admission_key(default_objects, monkeypatch):
    _, operator = _operator(default_objects)
    webhook = pod_spec(one(default_objects, "Deployment", "taugate-webhook"))["containers"][0]
    refs = [_env_var(c, "TAUGATE_ADMISSION_KEY")["valueFrom"]["secretKeyRef"] for c in (operator, webhook)]
    assert refs[0] == refs[1] == {"name": "taugate-admission-key", "key": "key"}
    secret = one(default_objects, "Secret", "taugate-admission-key")
    key = base64.b64decode(secret["data"]["key"])
    # 48 random bytes (Helm's randBytes), written as 64 characters of base64: at least the 32 bytes of key material
    # taugate serve and the operator insist on.
    assert len(base64.b64decode(key, validate=True)) == 48 and len(key) == 64
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    again = base64.b64decode(one(objects(), "Secret", "taugate-admission-key")["data"]["key"])
    assert again != key, "each install generates its own key"
    # The settings both processes load read it.
    monkeypatch.setenv("TAUGATE_ADMISSION_KEY", key.decode())
    assert Settings().admission_key_bytes() == key and Settings().admission_key_problem() is None


def test_an_existing_admission_key_secret_is_used_instead_of_created():
    objs = objects({"webhook": {"admissionKey": {"existingSecret": "platform-admission-key"}}})
    _, operator = _operator(objs)
    assert _env_var(operator, "TAUGATE_ADMISSION_KEY")["valueFrom"]["secretKeyRef"]["name"] == "platform-admission-key"
    assert "taugate-admission-key" not in [o["metadata"]["name"] for o in find(objs, "Secret")]


@pytest.mark.parametrize("data_claim", ["", "workspace-data"])
def test_workspace_data_is_mounted_read_only_only_when_a_claim_is_named(data_claim):
    spec, container = _operator(objects({"operator": {"dataClaim": data_claim}}))
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    if not data_claim:
        assert "data" not in mounts
        return
    assert mounts["data"]["readOnly"] is True and mounts["data"]["mountPath"] == "/var/lib/taugate/data"
    volume = next(v for v in spec["volumes"] if v["name"] == "data")
    assert volume["persistentVolumeClaim"] == {"claimName": data_claim, "readOnly": True}


def test_evidence_in_object_storage_sets_the_bucket_retention_endpoint_credentials_and_ca_and_no_volume(monkeypatch):
    s3 = {"url": "s3://acme-evidence/prod", "endpoint": "https://s3.storage.svc:8443", "region": "eu-west-1",
          "credentialsSecret": "evidence-s3", "caBundleSecret": "evidence-ca",
          "retention": {"mode": "COMPLIANCE", "days": 2555}}
    objs = objects({"operator": {"evidence": {"s3": s3}}})
    spec, container = _operator(objs)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert {k: env[k] for k in ("TAUGATE_RECORDER_EVIDENCE_ROOT", "TAUGATE_RECORDER_EVIDENCE_RETENTION_MODE",
                                "TAUGATE_RECORDER_EVIDENCE_RETENTION_DAYS", "AWS_ENDPOINT_URL_S3", "AWS_REGION")} == {
        "TAUGATE_RECORDER_EVIDENCE_ROOT": "s3://acme-evidence/prod", "TAUGATE_RECORDER_EVIDENCE_RETENTION_MODE":
        "COMPLIANCE", "TAUGATE_RECORDER_EVIDENCE_RETENTION_DAYS": "2555",
        "AWS_ENDPOINT_URL_S3": "https://s3.storage.svc:8443", "AWS_REGION": "eu-west-1"}
    assert container["envFrom"] == [{"secretRef": {"name": "evidence-s3"}}]
    ca, inner = _mounted_volume(spec, container, env["AWS_CA_BUNDLE"])
    assert ca["secret"]["secretName"] == "evidence-ca" and [i["path"] for i in ca["secret"]["items"]] == [inner]
    # the recorder takes these settings as they are rendered
    for key, value in env.items():
        if key.startswith("TAUGATE_RECORDER_"):
            monkeypatch.setenv(key, value)
    config = RecorderConfig()
    assert (config.retention.mode, config.retention.days) == ("COMPLIANCE", 2555)
    # no evidence volume or claim; the operator may reach the object store
    assert "evidence" not in {v["name"] for v in spec["volumes"]}
    assert not find(objs, "PersistentVolumeClaim")
    policy = next(p for p in find(objs, "NetworkPolicy") if "operator" in p["metadata"]["name"])
    assert {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443, "protocol": "TCP"}]} in \
        policy["spec"]["egress"]

"""The admission key (``TAUGATE_ADMISSION_KEY``) signs every admission record: a short one is
recovered offline from any signed record, and then forged records verify. ``taugate serve`` and
``taugate operator`` refuse to start with a key under 32 bytes, in one line naming the variable
and the chart's Secret, exit 2 (issue 27 item 6). Real processes, as the chart starts them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

from taugate.settings import MIN_ADMISSION_KEY_BYTES
from tests.paths import EXAMPLE_CLUSTER, REPO


def _run(*args: str, key: str, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAUGATE_")}
    env.update(TAUGATE_ADMISSION_KEY=key, HOME=str(tmp_path))  # HOME: no ~/.kube/config of this machine
    return subprocess.run([sys.executable, "-m", "taugate.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def _unreachable_kubeconfig(tmp_path) -> str:
    with socket.socket() as s:  # a port nothing listens on: connecting is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


COMMANDS = {
    "serve": lambda tmp_path: ("serve", "--cluster", str(EXAMPLE_CLUSTER), "--port", "0"),
    "operator": lambda tmp_path: ("operator", "--kubeconfig", _unreachable_kubeconfig(tmp_path)),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("key", ["k", "a-shared-admission-key", "x" * (MIN_ADMISSION_KEY_BYTES - 1)],
                         ids=["1-byte", "22-bytes", "31-bytes"])
def test_a_process_given_a_short_admission_key_refuses_to_start_naming_the_variable_and_secret(tmp_path, command,
                                                                                               key):
    done = _run(*COMMANDS[command](tmp_path), key=key, tmp_path=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"TAUGATE_ADMISSION_KEY is {len(key)} byte(s)" in done.stderr, done.stderr
    assert "at least 32 bytes" in done.stderr and "webhook.admissionKey.existingSecret" in done.stderr, done.stderr
    if len(key) > 1:
        assert key not in done.stderr, "the key is never printed"
    assert done.stdout == "", "nothing was served"


def test_the_operator_with_a_32_byte_key_goes_on_to_connect(tmp_path):
    # Past the key check, it stops at the next one: an API server that cannot be reached (exit 1).
    done = _run(*COMMANDS["operator"](tmp_path), key="k" * MIN_ADMISSION_KEY_BYTES, tmp_path=tmp_path)
    assert done.returncode == 1 and "ADMISSION_KEY" not in done.stderr, done.stderr


async def test_serve_with_a_32_byte_key_starts_and_signs_what_it_admits(tmp_path):
    from taugate import labels
    from tests.server.https import AdmissionClient, admission_review, apply, check_response, workload_request
    from tests.server.process import serving

    key = "k" * MIN_ADMISSION_KEY_BYTES
    obj = yaml.safe_load((REPO / "examples" / "rayjob-image-classifier.yaml").read_text())
    async with serving("--cluster", str(EXAMPLE_CLUSTER), "--port", "0",
                       env={"TAUGATE_ADMISSION_KEY": key}) as (_, port, ca):
        client = AdmissionClient(port, ca)
        try:
            request = workload_request(obj)
            resp = check_response((await client.post("/mutate", admission_review(request))).body, request["uid"])
        finally:
            await client.close()
    from taugate import record

    admitted = apply(obj, resp)
    signed = json.loads(admitted["metadata"]["annotations"][labels.ADMISSION_RECORD])
    assert signed["signature"].startswith("hmac-sha256:"), signed
    assert record.verify(signed, admitted, key.encode()).trusted

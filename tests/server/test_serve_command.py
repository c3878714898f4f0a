"""``taugate serve`` as a process: start-up message, HTTPS with the printed CA, a clean SIGTERM
shutdown; bad input is one line and exit 2. And the snapshot provider's reload."""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path

import yaml

from taugate.cli import main
from taugate.settings import Settings
from taugate.webhook.providers import SnapshotStateProvider
from tests.paths import POLICIES
from tests.server.conftest import EXAMPLE_CLUSTER
from tests.server.https import AdmissionClient, admission_review, check_response, workload_request
from tests.server.process import serve as _serve
from tests.server.process import serving
from tests.server.process import startup_lines as _startup_lines


async def test_serve_generates_a_ca_serves_reviews_and_stops_cleanly_on_sigterm(rayjob):
    proc = _serve("--cluster", str(EXAMPLE_CLUSTER), "--port", "0")
    try:
        port, ca = await _startup_lines(proc)
        assert ca.name == "ca.crt" and ca.is_file()
        client = AdmissionClient(port, ca)  # verifies taugate-webhook.taugate-system.svc
        try:
            assert (await client.get("/readyz")).status == 200
            req = workload_request(rayjob)
            resp = check_response((await client.post("/mutate", admission_review(req))).body, req["uid"])
            assert resp["allowed"] and resp["patchType"] == "JSONPatch"
        finally:
            await client.close()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
        assert not ca.parent.exists()  # the generated private directory is removed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_serve_uses_the_certificates_of_cert_dir(cert_dir, rayjob):
    proc = _serve("--cluster", str(EXAMPLE_CLUSTER), "--port", "0", "--cert-dir", str(cert_dir))
    try:
        port, ca = await _startup_lines(proc)
        assert ca == cert_dir / "ca.crt"
        client = AdmissionClient(port, cert_dir / "ca.crt")
        try:
            assert (await client.get("/healthz")).status == 200
        finally:
            await client.close()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
        assert (cert_dir / "tls.crt").exists()  # given certificates are never removed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_reports_bad_input_in_one_line_with_exit_2(tmp_path, capsys):
    broken = tmp_path / "cluster.yaml"
    broken.write_text("kind: TauCluster\nmetadata: {name: cluster\n")
    empty_dir = tmp_path / "certs"
    empty_dir.mkdir()
    wrong = tmp_path / "wrong.yaml"  # a field of the wrong type: named, never a crash at start
    text = EXAMPLE_CLUSTER.read_text()
    at = text.rindex("clusterQueue: vision-cq")  # the LocalQueue's (the TauWorkspace names it first)
    wrong.write_text(text[:at] + "clusterQueue: true" + text[at + len("clusterQueue: vision-cq"):])
    cases = [
        (("--cluster", str(tmp_path / "missing.yaml")), "missing.yaml: no such file"),
        (("--cluster", str(wrong)),
         "LocalQueue 'vision-queue': spec.clusterQueue: is a boolean (True); it must be a string"),
        (("--cluster", str(broken)), "cluster.yaml: invalid YAML at line"),
        (("--cluster", str(EXAMPLE_CLUSTER), "--cert-dir", str(empty_dir), "--port", "0"), "tls.crt: no such file"),
        (("--cluster", str(EXAMPLE_CLUSTER), "--policies", str(tmp_path / "nopolicies"), "--port", "0"),
         "nopolicies"),
        (("--cluster", str(EXAMPLE_CLUSTER), "--policy-backend", "opa", "--port", "0"),
         "--policy-backend opa needs --opa-url"),
        (("--cluster", str(EXAMPLE_CLUSTER), "--policy-backend", "opa", "--opa-url", "http://127.0.0.1:1",
          "--port", "0"), "policies: cannot push policies to OPA: OPA server at http://127.0.0.1:1 failed"),
    ]
    for args, expected in cases:
        code = main(["serve", *args])  # in process: these fail before anything is served
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert err.count("\n") == 1 and err.startswith("taugate serve: ") and expected in err, (args, err)


def test_a_changed_snapshot_replaces_the_state_and_a_broken_one_keeps_it(tmp_path):
    snap = tmp_path / "cluster.yaml"
    shutil.copy(EXAMPLE_CLUSTER, snap)
    provider = SnapshotStateProvider(snap, Settings())
    first = provider.state
    assert provider.check() is False and set(first.workspaces) == {"vision", "nlp"}
    docs = [d for d in yaml.safe_load_all(snap.read_text())
            if not (d.get("kind") == "TauWorkspace" and d["metadata"]["name"] == "nlp")]
    snap.write_text(yaml.safe_dump_all(docs))
    assert provider.check() is True and set(provider.state.workspaces) == {"vision"}
    snap.write_text("kind: [unclosed\n")
    assert provider.check() is False and set(provider.state.workspaces) == {"vision"}


async def test_a_changed_enforcement_file_takes_effect_without_a_restart(tmp_path, cert_dir, rayjob):
    policies = tmp_path / "policies"
    shutil.copytree(Path(Settings().policy_dir), policies)
    group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    group["replicas"] = group["minReplicas"] = group["maxReplicas"] = 5  # h100-1gpu allows at most 4
    rayjob["spec"]["shutdownAfterJobFinishes"] = True  # as the mutating webhook leaves it
    proc = _serve("--cluster", str(EXAMPLE_CLUSTER), "--port", "0", "--cert-dir", str(cert_dir),
                  "--policies", str(policies))
    try:
        port, _ = await _startup_lines(proc)
        client = AdmissionClient(port, cert_dir / "ca.crt")
        try:
            req = workload_request(rayjob)
            resp = check_response((await client.post("/validate", admission_review(req))).body, req["uid"])
            assert not resp["allowed"] and "[workers-match-profile]" in resp["status"]["message"]
            enforcement = policies / "enforcement.yaml"
            enforcement.write_text(enforcement.read_text() + "workers-match-profile: warn\n")
            edited_at = asyncio.get_running_loop().time()
            while not resp["allowed"]:  # served once the changed set passes the reload gate (policy test)
                assert asyncio.get_running_loop().time() - edited_at < 120, "the changed enforcement was never served"
                await asyncio.sleep(0.1)
                req = workload_request(rayjob)
                resp = check_response((await client.post("/validate", admission_review(req))).body, req["uid"])
            assert resp["allowed"] and any(w.startswith("[workers-match-profile]") for w in resp["warnings"])
        finally:
            await client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_a_host_that_is_not_an_address_is_reported_with_the_host_and_port(capsys):
    code = main(["serve", "--cluster", str(EXAMPLE_CLUSTER), "--no-policies", "--host", "999.1.1.1", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("taugate serve: cannot listen on 999.1.1.1:0: "), err
    assert "give an IP address" in err


async def test_editing_a_policy_over_https_changes_decisions_once_it_passes_the_gate_and_a_broken_one_changes_nothing(
        tmp_path, cert_dir, rayjob):
    policies = tmp_path / "policies"
    shutil.copytree(Path(Settings().policy_dir), policies)
    group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    group["replicas"] = group["minReplicas"] = group["maxReplicas"] = 5  # h100-1gpu (elastic) allows at most 4
    proc = _serve("--cluster", str(EXAMPLE_CLUSTER), "--port", "0", "--cert-dir", str(cert_dir),
                  "--policies", str(policies))

    async def message() -> str:
        req = workload_request(rayjob)
        resp = check_response((await client.post("/validate", admission_review(req))).body, req["uid"])
        assert not resp["allowed"]
        return resp["status"]["message"]

    try:
        port, _ = await _startup_lines(proc)
        client = AdmissionClient(port, cert_dir / "ca.crt")
        try:
            assert "or use a profile with more workers" in await message()
            rego = policies / "workers-match-profile" / "policy.rego"
            original = rego.read_text()
            rego.write_text(original.replace("or use a profile with more workers", "or ask for the h100-4gpu profile"))
            edited_at = asyncio.get_running_loop().time()
            while "or ask for the h100-4gpu profile" not in await message():
                assert asyncio.get_running_loop().time() - edited_at < 120, "the edit was never served"
                await asyncio.sleep(0.05)
            rego.write_text(original.replace("deny contains", "deny contains contains ("))  # does not parse

            async def broken_seen() -> bool:  # the server tried the broken set and kept the one it had
                metrics = (await client.get("/metrics")).text
                return ("taugate_policy_set_broken 1.0" in metrics
                        and "taugate_policy_reload_failures_total 1.0" in metrics)

            broken_at = asyncio.get_running_loop().time()
            while not await broken_seen():
                assert asyncio.get_running_loop().time() - broken_at < 10, "the broken policy was never tried"
                await asyncio.sleep(0.05)
            assert "or ask for the h100-4gpu profile" in await message()
            assert (await client.get("/readyz")).status == 200
        finally:
            await client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


async def test_serve_with_the_opa_backend_set_in_the_environment_decides_on_the_opa_server(opa_server):
    obj = yaml.safe_load((POLICIES / "head-without-gpu/samples/example_disallowed_head_one_gpu.yaml").read_text())
    async with serving("--cluster", str(EXAMPLE_CLUSTER), "--port", "0",
                       env={"TAUGATE_POLICY_BACKEND": "opa", "TAUGATE_OPA_URL": opa_server.url}) as (_, port, ca):
        assert "taugate/head-without-gpu/policy.rego" in opa_server.policies()
        client = AdmissionClient(port, ca)
        try:
            req = workload_request(obj, namespace=obj["metadata"]["namespace"])
            resp = check_response((await client.post("/validate", admission_review(req))).body, req["uid"])
            assert any(w.startswith("[head-without-gpu]") for w in resp.get("warnings", [])), resp  # a warn policy
            opa_server.stop()
            r = await client.post("/validate", admission_review(workload_request(obj, namespace=req["namespace"])))
            assert r.status == 503 and "OPA server at" in r.body["message"], r.text
        finally:
            await client.close()

"""`taugate admit`: admitted objects on stdout, denials on stderr, exit 0 / 1 / 2."""

from __future__ import annotations

import json

import yaml

from taugate import labels
from taugate.cli import main
from tests.admission.conftest import EXAMPLE_CLUSTER, IMAGE_CLASSIFIER, REPO

EXAMPLE_RAYJOB = REPO / "examples" / "rayjob-image-classifier.yaml"


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_readme_example_is_admitted_queued_and_placed(capsys):
    code, out, err = run(capsys, "admit", "-f", str(EXAMPLE_RAYJOB), "--cluster", str(EXAMPLE_CLUSTER), "--no-policies")
    assert code == 0, err
    obj = yaml.safe_load(out)
    assert obj["metadata"]["labels"][labels.KUEUE_QUEUE_NAME] == "vision-queue"
    assert obj["spec"]["suspend"] is True


def test_patch_output_is_a_jsonpatch(capsys):
    code, out, _ = run(capsys, "admit", "-f", str(IMAGE_CLASSIFIER), "--cluster", str(EXAMPLE_CLUSTER),
                       "-n", "vision", "-o", "patch", "--no-policies")
    [entry] = json.loads(out)
    assert code == 0 and entry["kind"] == "RayJob" and entry["namespace"] == "vision"
    assert {"op", "path"} <= set(entry["patch"][0])


def test_a_denial_exits_1_and_says_why_on_stderr(tmp_path, capsys):
    obj = yaml.safe_load(IMAGE_CLASSIFIER.read_text())
    obj["metadata"]["labels"] = {labels.KUEUE_QUEUE_NAME: "nlp-queue"}
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(obj))
    code, out, err = run(capsys, "admit", "-f", str(f), "--cluster", str(EXAMPLE_CLUSTER), "-n", "vision",
                         "--no-policies")
    assert code == 1 and out == ""
    assert "denied" in err and "allowed: vision-queue" in err


def test_bad_input_is_one_line_naming_the_file_and_exit_2(tmp_path, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: x\n")
    cases = [
        ("admit", "-f", str(tmp_path / "missing.yaml"), "--cluster", str(EXAMPLE_CLUSTER)),
        ("admit", "-f", str(broken), "--cluster", str(EXAMPLE_CLUSTER)),
        ("admit", "-f", str(IMAGE_CLASSIFIER), "--cluster", str(broken)),
        ("admit", "-f", str(IMAGE_CLASSIFIER), "--cluster", str(EXAMPLE_CLUSTER), "--no-policies"),  # no namespace
    ]
    for argv in cases:
        code, out, err = run(capsys, *argv)
        assert code == 2, argv
        assert len(err.strip().splitlines()) == 1, err
        assert "missing.yaml" in err or "broken.yaml" in err or "namespace" in err
        assert out == ""


def test_a_snapshot_with_an_invalid_profile_names_the_object_and_field(tmp_path, capsys):
    docs = list(yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()))
    docs[0]["spec"]["workloadProfiles"][0]["mode"] = "sometimes"
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    code, _, err = run(capsys, "admit", "-f", str(EXAMPLE_RAYJOB), "--cluster", str(f), "--no-policies")
    assert code == 2 and "TauCluster 'cluster'" in err and "mode" in err


def test_kinds_taugate_does_not_admit_pass_through_unchanged(tmp_path, capsys):
    from tests.paths import KUBERAY_SAMPLES
    code, out, err = run(capsys, "admit", "-f", str(KUBERAY_SAMPLES / "ray-job.sample.yaml"),
                         "--cluster", str(EXAMPLE_CLUSTER), "-n", "vision", "--no-policies")
    docs = list(yaml.safe_load_all(out))
    assert code == 0 and [d["kind"] for d in docs] == ["RayJob", "ConfigMap"]
    assert "ConfigMap" in err and "unchanged" in err

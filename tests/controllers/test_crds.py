"""taugate's CRDs are generated from the pydantic models, live in the chart, and accept every
object TauGrid's own CRDs accept (same names and scope; additions are optional fields only). TauGrid's
CRDs and samples are read from ``tests/data/taugrid`` (written by the project after TauGrid's public
chart: TauGrid is not on the Go module proxy)."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from taugate.cli import main
from taugate.controllers.crds import CRD_KINDS, build_crd, render_crds, stale_crds, write_crds
from tests.controllers.schema_compat import example_instance, widening_problems
from tests.crdschema import translate
from tests.paths import TAUGRID

REPO = Path(__file__).resolve().parents[2]
CHART_CRDS = REPO / "charts" / "taugate" / "crds"
TAUGRID_CRDS = TAUGRID / "crds"
TAUGRID_KINDS = [k for k in CRD_KINDS if (TAUGRID_CRDS / k.filename).is_file()]


def _schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _taugrid(kind) -> dict:
    return yaml.safe_load((TAUGRID_CRDS / kind.filename).read_text())


def _validator(crd: dict) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(translate(copy.deepcopy(_schema(crd))))


def _errors(crd: dict, obj: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(crd).iter_errors(obj)]


def test_the_chart_holds_exactly_the_crds_the_models_generate():
    assert stale_crds(CHART_CRDS) == [], "run `taugate crds -o charts/taugate/crds`"
    assert sorted(p.name for p in CHART_CRDS.glob("*.yaml")) == sorted(render_crds())


def test_the_three_taugrid_kinds_are_all_generated():
    assert {k.kind for k in TAUGRID_KINDS} == {"TauCluster", "TauWorkspace", "TauQuotaRequest"}


@pytest.mark.parametrize("kind", TAUGRID_KINDS, ids=lambda k: k.kind)
def test_each_crd_uses_taugrids_group_names_and_scope(kind):
    theirs, ours = _taugrid(kind), build_crd(kind)
    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    assert ours["spec"]["group"] == theirs["spec"]["group"] and ours["spec"]["scope"] == theirs["spec"]["scope"]
    for key in ("kind", "listKind", "plural", "singular"):
        assert ours["spec"]["names"][key] == theirs["spec"]["names"][key], key
    assert set(theirs["spec"]["names"].get("shortNames", [])) <= set(ours["spec"]["names"]["shortNames"])
    assert [v["name"] for v in ours["spec"]["versions"]] == [v["name"] for v in theirs["spec"]["versions"]]
    assert ours["spec"]["versions"][0]["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", TAUGRID_KINDS, ids=lambda k: k.kind)
def test_every_object_taugrids_schema_accepts_our_schema_accepts(kind):
    assert widening_problems(_schema(_taugrid(kind)), _schema(build_crd(kind))) == []


def test_the_compatibility_check_notices_a_dropped_field_a_narrower_enum_and_a_new_requirement():
    kind = next(k for k in TAUGRID_KINDS if k.kind == "TauCluster")
    theirs, ours = _schema(_taugrid(kind)), _schema(build_crd(kind))
    profile = ours["properties"]["spec"]["properties"]["workloadProfiles"]["items"]
    broken = copy.deepcopy(ours)
    del broken["properties"]["spec"]["properties"]["queues"]
    bp = broken["properties"]["spec"]["properties"]["workloadProfiles"]["items"]
    bp["properties"]["mode"]["enum"] = ["fixed"]
    bp["required"] = profile["required"] + ["gpuClass"]
    problems = widening_problems(theirs, broken)
    assert any(p.startswith("spec.queues:") for p in problems)
    assert any("mode: our enum ['fixed']" in p for p in problems)
    assert any("we require ['gpuClass']" in p for p in problems)


@pytest.mark.parametrize("kind", TAUGRID_KINDS, ids=lambda k: k.kind)
def test_a_maximal_object_built_from_taugrids_schema_is_valid_under_ours(kind):
    theirs, ours = _taugrid(kind), build_crd(kind)
    obj = example_instance(_schema(theirs))
    obj.update(apiVersion="tau.azure.com/v1alpha1", kind=kind.kind, metadata={"name": "x"})
    if kind.kind == "TauWorkspace":  # TauGrid's CEL rule: workspace-rbac needs these three
        obj["spec"]["authorization"] = {"mode": "workspace-rbac"}
        obj["spec"]["role"] = "researcher"
    assert _errors(theirs, obj) == []  # the object really is valid for TauGrid
    assert _errors(ours, obj) == []


def _taugrid_samples() -> list[dict]:
    docs = []
    for path in sorted((TAUGRID / "samples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    smoke = yaml.safe_load((TAUGRID / "kind-smoke/taucluster-profiles.yaml").read_text())
    docs.append({"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauCluster", "metadata": {"name": "cluster"},
                 **smoke})
    return docs


def _kind(obj: dict):
    return next(k for k in CRD_KINDS if k.kind == obj["kind"])


@pytest.mark.parametrize("obj", _taugrid_samples(), ids=lambda o: f"{o['kind']}-{o['metadata']['name']}")
def test_taugrids_sample_objects_are_valid_under_their_crds_and_ours(obj):
    assert _errors(_taugrid(_kind(obj)), obj) == []
    assert _errors(build_crd(_kind(obj)), obj) == []


def test_our_example_objects_are_valid_under_our_crds(example_objects):
    tau = [o for o in example_objects if o["kind"].startswith("Tau")]
    assert len(tau) == 3
    for obj in tau:
        assert _errors(build_crd(_kind(obj)), obj) == [], obj["metadata"]["name"]
    # they use taugate's extensions, which TauGrid's schema does not know (and would prune)
    assert any("gpuClass" in e for e in _errors(_taugrid(_kind(tau[0])), tau[0]))


def test_our_crds_reject_what_the_models_reject():
    cluster_crd = build_crd(next(k for k in CRD_KINDS if k.kind == "TauCluster"))
    profile = {"name": "p", "gpusPerWorker": 1, "workerCount": 0, "mode": "sometimes", "placement": "same-host",
               "defaultLocalQueue": "q", "priorities": {"disableDefaultPriorities": True}, "gpuClas": "h100"}
    errors = _errors(cluster_crd, {"apiVersion": "tau.azure.com/v1alpha1", "kind": "TauCluster",
                                   "metadata": {"name": "cluster"}, "spec": {"workloadProfiles": [profile]}})
    assert any("workerCount" in e and "minimum" in e for e in errors)
    assert any("mode" in e and "sometimes" in e for e in errors)
    assert any("gpuClas" in e for e in errors)  # a misspelled field: the API server would prune it


@pytest.mark.parametrize("kind", CRD_KINDS, ids=lambda k: k.kind)
def test_every_crd_is_a_valid_structural_customresourcedefinition(kind):
    crd = build_crd(kind)
    kubernetes_validate.validate(crd, "1.30.0", strict=True)

    def walk(node: dict, path: str) -> None:
        assert "$ref" not in node and "$defs" not in node, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string"), f"{path}: anyOf only for int-or-string"
        has_type = "type" in node or node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields")
        assert has_type, f"{path}: a structural schema needs a type"
        for k, v in (node.get("properties") or {}).items():
            walk(v, f"{path}.{k}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}[*]")
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), f"{path}: map keys must be required"

    walk(_schema(crd), kind.kind)


def test_the_crds_command_writes_checks_and_prints(tmp_path, capsys):
    assert main(["crds", "--check", str(tmp_path)]) == 1
    assert "missing" in capsys.readouterr().err
    assert main(["crds", "-o", str(tmp_path)]) == 0
    assert main(["crds", "--check", str(tmp_path)]) == 0
    (tmp_path / "tau.azure.com_clusters.yaml").write_text("# edited by hand\n")
    assert main(["crds", "--check", str(tmp_path)]) == 1
    capsys.readouterr()
    assert main(["crds"]) == 0
    printed = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert {d["spec"]["names"]["kind"] for d in printed} == {k.kind for k in CRD_KINDS}
    assert main(["crds", "--check", str(tmp_path / "missing")]) == 2


def _checked(capsys, directory) -> tuple[int, list[str]]:
    code = main(["crds", "--check", str(directory)])
    return code, capsys.readouterr().err.splitlines()


def test_crds_check_reports_a_stray_manifest_helm_would_install(tmp_path, capsys):
    write_crds(tmp_path)
    (tmp_path / "garbage.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "extra.JSON").write_text("{}")
    (tmp_path / "NOTES.md").write_text("Helm does not install this one")
    code, err = _checked(capsys, tmp_path)
    assert code == 1 and len(err) == 2
    assert err[0].startswith(f"taugate: {tmp_path / 'garbage.yaml'}: unexpected file")
    assert err[1].startswith(f"taugate: {tmp_path / 'sub' / 'extra.JSON'}: unexpected file")


def test_crds_check_says_missing_for_a_missing_file_and_differs_only_for_different_content(tmp_path, capsys):
    write_crds(tmp_path)
    (tmp_path / "tau.azure.com_tauruns.yaml").unlink()
    clusters = tmp_path / "tau.azure.com_clusters.yaml"
    crd = yaml.safe_load(clusters.read_text())
    crd["spec"]["names"]["shortNames"] = ["renamed"]
    clusters.write_text(yaml.safe_dump(crd))
    code, err = _checked(capsys, tmp_path)
    assert code == 1 and err == [
        f"taugate: {clusters}: differs from the CRD generated from taugate/models.py; run `taugate crds -o {tmp_path}`",
        f"taugate: {tmp_path / 'tau.azure.com_tauruns.yaml'}: missing; run `taugate crds -o {tmp_path}`"]


def test_crds_check_passes_a_reformatted_file_with_the_same_content(tmp_path, capsys):
    write_crds(tmp_path)
    path = tmp_path / "tau.azure.com_workspaces.yaml"
    original = path.read_text()
    # Keys sorted, no header comment, flow style: the same objects for the API server.
    path.write_text(yaml.safe_dump(yaml.safe_load(original), sort_keys=True, default_flow_style=True, width=80))
    assert path.read_text() != original
    assert _checked(capsys, tmp_path) == (0, [])
    path.write_text("spec: [not: closed\n")
    code, err = _checked(capsys, tmp_path)
    assert code == 1 and err == [f"taugate: {path}: differs from the CRD generated from taugate/models.py; "
                                 f"run `taugate crds -o {tmp_path}`"]


def test_crds_check_on_a_regular_file_says_it_is_not_a_directory(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# not a directory")
    assert _checked(capsys, readme) == (2, [f"taugate: {readme}: is not a directory"])
    assert _checked(capsys, tmp_path / "nothing") == (2, [f"taugate: {tmp_path / 'nothing'}: no such directory"])

"""The names a user types reach taugate's kinds, as kubectl resolves them from the chart's CRDs
(k8s.io/client-go restmapper/shortcut.go ``expandResourceShortcut``: a resource's plural or
singular, else one of its short names; never its kind): ``kubectl get taucluster``, TauGrid's
``clusters`` and ``tc``, ``kubectl get tau`` for all of them, and no name that another
controller a GPU platform runs (KubeRay, Kueue, JobSet, LWS, Kubeflow, Kyverno) or Kubernetes
itself already uses. ``kubectl get tauruns`` says what each run belongs to."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.paths import JOBSET, KUBEFLOW, KUBERAY, KUEUE_CRDS, KYVERNO, LWS, REPO, TAUGRID, TRAINER_CRDS, upstream

CHART_CRDS = REPO / "charts" / "taugate" / "crds"
UPSTREAM_CRD_DIRS = (KUBERAY / "config" / "crd" / "bases", KUEUE_CRDS,
                     JOBSET / "config" / "components" / "crd" / "bases", LWS / "config" / "crd" / "bases",
                     KUBEFLOW / "manifests" / "base" / "crds", TRAINER_CRDS, KYVERNO / "config" / "crds")


def _crds(paths) -> list[dict]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text())
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]


OURS = {c["spec"]["names"]["kind"]: c for c in _crds(sorted(CHART_CRDS.glob("tau.azure.com_*.yaml")))}


def _resolve(typed: str) -> str | None:
    """The kind ``kubectl get <typed>`` lists among taugate's CRDs, resolved as kubectl does."""
    for crd in OURS.values():
        if typed in (crd["spec"]["names"]["plural"], crd["spec"]["names"]["singular"]):
            return crd["spec"]["names"]["kind"]
    hits = [c["spec"]["names"]["kind"] for c in OURS.values() if typed in c["spec"]["names"].get("shortNames", [])]
    assert len(hits) <= 1, (typed, hits)
    return hits[0] if hits else None


@pytest.mark.parametrize(("typed", "kind"), [
    ("taucluster", "TauCluster"), ("tauclusters", "TauCluster"), ("clusters", "TauCluster"), ("tc", "TauCluster"),
    ("tauworkspace", "TauWorkspace"), ("tauworkspaces", "TauWorkspace"), ("workspaces", "TauWorkspace"),
    ("tw", "TauWorkspace"),
    ("tauquotarequest", "TauQuotaRequest"), ("tauquotarequests", "TauQuotaRequest"),
    ("quotarequests", "TauQuotaRequest"), ("tqr", "TauQuotaRequest"),
    ("taurun", "TauRun"), ("tauruns", "TauRun"), ("tr", "TauRun"),
    ("tauprofileplacement", "TauProfilePlacement"), ("profileplacements", "TauProfilePlacement"),
    ("tpp", "TauProfilePlacement"),
])
def test_what_a_user_types_resolves_to_the_kind(typed, kind):
    assert _resolve(typed) == kind


def test_taugrids_names_are_kept():
    for crd in _crds(sorted((TAUGRID / "crds").glob("*.yaml"))):
        theirs, ours = crd["spec"]["names"], OURS[crd["spec"]["names"]["kind"]]["spec"]["names"]
        assert (ours["plural"], ours["singular"]) == (theirs["plural"], theirs["singular"])
        assert set(theirs.get("shortNames", [])) <= set(ours["shortNames"])


def test_every_kind_is_in_the_tau_and_taugate_categories_but_the_policys_parameter_in_taugates_only():
    assert {k: c["spec"]["names"]["categories"] for k, c in OURS.items()} == {
        **{k: ["tau", "taugate"] for k in ("TauCluster", "TauWorkspace", "TauQuotaRequest", "TauRun")},
        "TauProfilePlacement": ["taugate"]}  # the operator's, not TauGrid's


def _kubernetes_short_names() -> set[str]:
    """Short names of Kubernetes' built-in resources (``ShortNames()`` of pkg/registry)."""
    registry = upstream.module_dir("kubernetes", "k8s.io/kubernetes") / "pkg" / "registry"
    found = set()
    for path in registry.rglob("storage.go"):
        for names in re.findall(r'ShortNames\(\) \[\]string \{\s*return \[\]string\{([^}]*)\}', path.read_text()):
            found |= set(re.findall(r'"([^"]+)"', names))
    return found


def test_no_name_of_ours_is_a_name_another_platform_component_or_kubernetes_uses():
    taken: dict[str, str] = {}
    for crd in _crds(sorted(p for d in UPSTREAM_CRD_DIRS for p in d.rglob("*.yaml"))):
        n = crd["spec"]["names"]
        for name in (n["plural"], n.get("singular", ""), *n.get("shortNames", []), *n.get("categories", [])):
            taken.setdefault(name, crd["metadata"]["name"])
    builtin = _kubernetes_short_names()
    assert {"po", "deploy", "pvc", "ns"} <= builtin and len(taken) > 60  # the sources were read
    for crd in OURS.values():
        n = crd["spec"]["names"]
        ours = {n["plural"], n["singular"], *n["shortNames"], *n["categories"]}
        assert not {name: taken[name] for name in ours if name in taken}, crd["metadata"]["name"]
        assert not ours & builtin, crd["metadata"]["name"]


def test_kubectl_get_tauruns_says_what_each_run_belongs_to_and_its_phase():
    columns = OURS["TauRun"]["spec"]["versions"][0]["additionalPrinterColumns"]
    default = [(c["name"], c["jsonPath"]) for c in columns if not c.get("priority")]
    assert default[:3] == [("Kind", ".spec.object.kind"), ("Object", ".spec.object.name"), ("Phase", ".status.phase")]
    assert {c["name"] for c in columns if c.get("priority") == 1} == {"Workspace", "Profile", "Queue", "Reason"}
    assert default[-1] == ("Age", ".metadata.creationTimestamp")


def _undescribed(schema: dict, path: str) -> list[str]:
    """Paths under ``schema`` (a CRD schema node at ``path``) whose node has no description."""
    out = []
    for key, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{key}"
        if not sub.get("description"):
            out.append(here)
        out += _undescribed(sub, here)
    if isinstance(schema.get("items"), dict):
        out += _undescribed(schema["items"], f"{path}[]")
    return out


@pytest.mark.parametrize("kind", ["TauCluster", "TauWorkspace", "TauQuotaRequest", "TauRun"])
def test_kubectl_explain_describes_the_spec_and_every_field_under_it(kind):
    schema = OURS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for top in ("spec", "status"):
        assert schema["properties"][top].get("description"), (kind, top)
    assert _undescribed(schema["properties"]["spec"], "spec") == []


def test_a_field_description_comes_from_the_docstring_under_the_model_field():
    spec = OURS["TauQuotaRequest"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["requested"]["description"] == "The nominal quota asked for (a quantity)."
    profile = (OURS["TauCluster"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
               ["properties"]["workloadProfiles"]["items"]["properties"])
    assert "tau.azure.com/gpu-class" in profile["gpuClass"]["description"]

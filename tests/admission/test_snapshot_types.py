"""Every field of a snapshot that cluster state reads is type-checked on load: a snapshot with a
field of the wrong type is refused in one line naming the file, the object and the field, or
(for a field taugate does not read) loads and admits exactly as before. It never crashes
``admit`` or ``serve`` and never misleads admission with a wrong-typed value used as a name."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from taugate.settings import Settings
from taugate.snapshot import SnapshotError, load_snapshot
from taugate.webhook.review import admit
from tests.paths import EXAMPLE_CLUSTER, EXAMPLE_RAYJOB

DOCS = [d for d in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if d]
SETTINGS = Settings()


def _leaves(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))


def _wrong(value):
    """Values of another JSON type than ``value``."""
    for w in (True, 7, "x", [], {}, 1e30):
        if type(w) is not type(value) and not (isinstance(value, (int, float)) and isinstance(w, (int, float))
                                              and not isinstance(w, bool) and w != 1e30):
            yield w


def _cases():
    """One wrong value per field (the wrong types taken in turn), two for scalar fields."""
    n = 0
    for i, doc in enumerate(DOCS):
        for path, value in _leaves(doc):
            if path and path[0] != "apiVersion":
                wrong = list(_wrong(value))
                for k in range(1 if isinstance(value, (dict, list)) else 2):
                    yield i, path, wrong[(n + k) % len(wrong)]
                n += 1


CASES = list(_cases())


def _rayjob():
    obj = yaml.safe_load(EXAMPLE_RAYJOB.read_text())
    obj["spec"]["shutdownAfterJobFinishes"] = True
    return obj


@pytest.fixture(scope="module")
def baseline():
    return admit(_rayjob(), state=load_snapshot(EXAMPLE_CLUSTER, SETTINGS), settings=SETTINGS, namespace="vision")


def test_every_field_of_the_example_snapshot_with_a_wrong_type_is_refused_in_one_line_or_harmless(tmp_path, baseline):
    assert len(CASES) > 1000
    refused = loaded = 0
    f = tmp_path / "snapshot.json"  # JSON: the same checks, read ~50x faster than YAML
    for i, path, wrong in CASES:
        docs = copy.deepcopy(DOCS)
        target = docs[i]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = wrong
        f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        where = f"{DOCS[i]['kind']} {'.'.join(map(str, path))} = {wrong!r}"
        try:
            state = load_snapshot(f, SETTINGS)
        except SnapshotError as e:
            message = str(e)
            assert "\n" not in message and message.startswith(f"{f}: "), (where, message)
            assert "Error:" not in message, (where, message)  # a named field, never an exception's name
            refused += 1
            continue
        loaded += 1
        decision = admit(_rayjob(), state=state, settings=SETTINGS, namespace="vision")
        for shown in ("'True'", "'7'", "'x'", "'[]'", "'{}'", "1e+30"):
            assert shown not in decision.message, (where, decision.message)  # a wrong value used as a name
    # What loads is a field taugate does not read (e.g. a Node's images list) or an empty value.
    assert refused > 2 * loaded, (refused, loaded)


def _with(change) -> list[dict]:
    docs = copy.deepcopy(DOCS)
    change({d["kind"] + "/" + d["metadata"]["name"]: d for d in docs})
    return docs


@pytest.mark.parametrize("change, message", [
    (lambda d: d["LocalQueue/vision-queue"]["spec"].__setitem__("clusterQueue", True),
     "LocalQueue 'vision-queue': spec.clusterQueue: is a boolean (True); it must be a string"),
    (lambda d: d["TauCluster/cluster"]["spec"]["workloadProfiles"][0].__setitem__("workerCount", 1e30),
     "TauCluster 'cluster': spec.workloadProfiles[0].workerCount: is a number (1e+30); it must be a whole number"),
    (lambda d: d["TauCluster/cluster"]["spec"]["workloadProfiles"][0].__setitem__("workerCount", 10**30),
     "TauCluster 'cluster': spec.workloadProfiles[0].workerCount: 1000000000000000000000000000000 is outside the "
     "64-bit integer range"),
    (lambda d: d["ClusterQueue/vision-cq"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
     .__setitem__("borrowingLimit", "1e30"),
     "ClusterQueue 'vision-cq': spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: is a string ('1e30'); "
     "it must be a Kubernetes quantity from 0 to 9223372036854775807"),
    (lambda d: d["ResourceFlavor/h100"]["spec"].__setitem__("nodeLabels", ["tau.azure.com/gpu-class=h100"]),
     "ResourceFlavor 'h100': spec.nodeLabels: is an array"),
    (lambda d: d["TauWorkspace/vision"].__setitem__("kind", True), "an object's kind and apiVersion must be strings"),
], ids=["cluster-queue-true", "worker-count-1e30", "worker-count-10-30", "borrowing-limit-1e30", "node-labels-array",
        "kind-true"])
def test_a_wrong_field_is_named_with_its_object(tmp_path, change, message):
    f = tmp_path / "snapshot.yaml"
    f.write_text(yaml.safe_dump_all(_with(change)))
    with pytest.raises(SnapshotError) as e:
        load_snapshot(f, SETTINGS)
    assert str(e.value).startswith(f"{f}: ") and message in str(e.value), str(e.value)


def test_a_resource_flavor_with_null_node_labels_loads_and_admits(tmp_path, baseline):
    f = tmp_path / "snapshot.yaml"
    f.write_text(yaml.safe_dump_all(_with(lambda d: d["ResourceFlavor/h100"]["spec"].__setitem__("nodeLabels", None))))
    state = load_snapshot(f, SETTINGS)  # null is an absent field, as the API server stores it
    decision = admit(_rayjob(), state=state, settings=SETTINGS, namespace="vision")
    assert decision.allowed == baseline.allowed, decision.message

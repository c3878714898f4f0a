package taugate.policies.requests_required

import data.taugate.lib.fixtures as fx

test_containers_with_requests_are_allowed if {
	count(deny) == 0 with input as fx.rayjob("h100-8gpu", 2, 8)
}

test_missing_memory_is_denied_at_the_request_field if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [
		{"op": "remove", "path": "/object/podTemplates/1/containers/0/requests/memory"},
		{"op": "remove", "path": "/object/podTemplates/1/containers/0/limits/memory"},
	])
	count(deny) == 1 with input as inp
	some v in deny with input as inp
	v.field == "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.requests.memory"
	contains(v.msg, "requests no memory")
}

test_a_limit_counts_as_the_request if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [{"op": "replace", "path": "/object/podTemplates/0/containers/0/requests", "value": {}}])
	count(deny) == 0 with input as inp
}

test_no_resources_at_all_gives_two_violations if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [
		{"op": "replace", "path": "/object/podTemplates/0/containers/0/requests", "value": {}},
		{"op": "replace", "path": "/object/podTemplates/0/containers/0/limits", "value": {}},
	])
	count(deny) == 2 with input as inp
}

test_init_containers_are_not_required if {
	init := {"name": "fetch", "kind": "initContainers", "field": "spec.rayClusterSpec.headGroupSpec.template.spec.initContainers[0]", "requests": {}, "limits": {}, "gpus": 0}
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [{"op": "add", "path": "/object/podTemplates/0/containers/-", "value": init}])
	count(deny) == 0 with input as inp
}

test_a_pod_level_request_covers_the_containers if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [
		{"op": "replace", "path": "/object/podTemplates/1/containers/0/requests", "value": {}},
		{"op": "replace", "path": "/object/podTemplates/1/containers/0/limits", "value": {"nvidia.com/gpu": "8"}},
		{"op": "add", "path": "/object/podTemplates/1/podRequests", "value": {"cpu": "16", "memory": "64Gi"}},
	])
	count(deny) == 0 with input as inp
}

test_a_pod_level_request_of_cpu_alone_leaves_memory_required if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [
		{"op": "replace", "path": "/object/podTemplates/1/containers/0/requests", "value": {}},
		{"op": "replace", "path": "/object/podTemplates/1/containers/0/limits", "value": {"nvidia.com/gpu": "8"}},
		{"op": "add", "path": "/object/podTemplates/1/podRequests", "value": {"cpu": "16"}},
	])
	count(deny) == 1 with input as inp
	some v in deny with input as inp
	contains(v.msg, "requests no memory")
}

package taugate.policies.gpu_per_pod_fits_node

import data.taugate.lib.fixtures as fx

test_pod_that_fits_an_h100_node_is_allowed if {
	count(deny) == 0 with input as fx.rayjob("h100-8gpu", 2, 8)
}

test_pod_larger_than_any_h100_node_is_denied_with_both_numbers if {
	some v in deny with input as fx.rayjob("h100-8gpu", 2, 16)
	v.policy == "gpu-per-pod-fits-node"
	v.field == "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]"
	contains(v.msg, "asks for 16 GPUs per pod")
	contains(v.msg, "has 8 allocatable GPUs")
}

test_a100_nodes_hold_at_most_4_gpus if {
	inp := fx.input_for("nlp", "a100-4gpu", [fx.head(0), fx.worker(0, 2, 8)])
	count(deny) == 1 with input as inp
	count(deny) == 0 with input as fx.input_for("nlp", "a100-4gpu", [fx.head(0), fx.worker(0, 2, 4)])
}

test_profile_class_without_nodes_is_denied if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [{"op": "replace", "path": "/profile/gpuClass", "value": "b200"}])
	some v in deny with input as inp
	contains(v.msg, "no node of that class exists")
}

test_profile_without_class_compares_with_largest_node_of_any_class if {
	inp := fx.rayjob("cpu-small", 1, 12)
	some v in deny with input as inp
	contains(v.msg, "largest GPU node in the cluster has 8")
	count(deny) == 0 with input as fx.rayjob("cpu-small", 1, 8)
}

test_cpu_only_workload_is_never_denied if {
	count(deny) == 0 with input as fx.rayjob("cpu-small", 2, 0)
}

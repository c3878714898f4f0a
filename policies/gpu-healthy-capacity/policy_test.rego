package taugate.policies.gpu_healthy_capacity

import data.taugate.lib.fixtures as fx

test_fits_the_three_healthy_h100_nodes if {
	count(warn) == 0 with input as fx.rayjob("h100-4gpu", 6, 4)
}

test_four_full_nodes_with_one_unhealthy_warns if {
	some v in warn with input as fx.rayjob("h100-4gpu", 8, 4)
	v.policy == "gpu-healthy-capacity"
	v.field == "spec.rayClusterSpec.workerGroupSpecs[0].replicas"
	contains(v.msg, "needs 4 h100 nodes at once")
	contains(v.msg, "3 of 4 h100 nodes are healthy")
	contains(v.msg, "aks-h100-3: GpuXid")
}

test_no_healthy_node_big_enough_warns_per_template if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [{"op": "replace", "path": "/cluster/gpuClasses/h100/maxHealthyGpusPerNode", "value": 4}])
	some v in warn with input as inp
	contains(v.msg, "no healthy h100 node has that many")
}

test_all_a100_nodes_healthy_means_no_warning if {
	count(warn) == 0 with input as fx.input_for("nlp", "a100-4gpu", [fx.head(0), fx.worker(0, 4, 4)])
}

test_more_nodes_than_the_class_has_says_so if {
	some v in warn with input as fx.input_for("nlp", "a100-4gpu", [fx.head(0), fx.worker(0, 6, 4)])
	contains(v.msg, "needs 6 a100 nodes at once")
	contains(v.msg, "GPU class a100 has only 4 nodes in all")
	contains(v.msg, "allowed right now: 4 healthy nodes, at most 4 pods of 4 GPUs")
}

package taugate.policies.gpu_class_matches_profile

import data.taugate.lib.fixtures as fx

with_worker(inp, patch) := json.patch(inp, [{"op": "add", "path": sprintf("/object/podTemplates/1/%s", [k]), "value": v} | some k, v in patch])

test_selector_for_the_profile_class_is_allowed if {
	inp := with_worker(fx.rayjob("h100-8gpu", 2, 8), {"nodeSelector": {"tau.azure.com/gpu-class": "h100", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}})
	count(deny) == 0 with input as inp
}

test_selector_for_another_class_is_denied if {
	inp := with_worker(fx.rayjob("h100-8gpu", 2, 8), {"nodeSelector": {"tau.azure.com/gpu-class": "a100"}})
	some v in deny with input as inp
	v.field == "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.nodeSelector[\"tau.azure.com/gpu-class\"]"
	contains(v.msg, "asks for GPU class a100")
	contains(v.msg, "allowed: GPU class h100, where workload profile h100-8gpu runs")
}

test_selector_for_another_product_is_denied if {
	inp := with_worker(fx.rayjob("h100-8gpu", 2, 8), {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"}})
	some v in deny with input as inp
	contains(v.msg, "GPU product NVIDIA-A100-80GB-PCIe")
}

affinity(key, op, values) := {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
	{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}, {"key": key, "operator": op, "values": values}]},
]}}}

test_required_affinity_for_another_class_is_denied_at_the_expression if {
	inp := with_worker(fx.rayjob("h100-8gpu", 2, 8), {"affinity": affinity("tau.azure.com/gpu-class", "In", ["a100"])})
	some v in deny with input as inp
	endswith(v.field, ".requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1]")
}

test_required_affinity_that_includes_the_class_is_allowed if {
	count(deny) == 0 with input as with_worker(fx.rayjob("h100-8gpu", 2, 8), {"affinity": affinity("tau.azure.com/gpu-class", "In", ["a100", "h100"])})
	count(deny) == 0 with input as with_worker(fx.rayjob("h100-8gpu", 2, 8), {"affinity": affinity("tau.azure.com/gpu-class", "NotIn", ["a100"])})
}

test_not_in_the_profile_product_is_denied if {
	count(deny) == 1 with input as with_worker(fx.rayjob("h100-8gpu", 2, 8), {"affinity": affinity("nvidia.com/gpu.product", "NotIn", ["NVIDIA-H100-80GB-HBM3"])})
}

test_cpu_profile_has_no_class_to_match if {
	count(deny) == 0 with input as with_worker(fx.rayjob("cpu-small", 2, 0), {"nodeSelector": {"tau.azure.com/gpu-class": "a100"}})
}

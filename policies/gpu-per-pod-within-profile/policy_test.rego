package taugate.policies.gpu_per_pod_within_profile

import data.taugate.lib.fixtures as fx

test_exactly_gpus_per_worker_is_allowed if {
	count(deny) == 0 with input as fx.rayjob("h100-8gpu", 2, 8)
}

test_fewer_gpus_than_the_profile_is_allowed if {
	count(deny) == 0 with input as fx.rayjob("h100-4gpu", 2, 2)
}

test_nine_gpus_per_worker_against_eight_is_denied_with_both_numbers if {
	some v in deny with input as fx.rayjob("h100-8gpu", 2, 9)
	v.policy == "gpu-per-pod-within-profile"
	contains(v.msg, "asks for 9 GPUs per pod")
	contains(v.msg, "allowed: 8 GPUs per worker under workload profile h100-8gpu")
	endswith(v.field, ".resources.limits[\"nvidia.com/gpu\"]")
}

test_gpu_pods_under_a_cpu_profile_are_denied if {
	some v in deny with input as fx.rayjob("cpu-small", 2, 1)
	contains(v.msg, "allowed: 0 GPUs per worker")
}

test_max_gpus_per_pod_caps_below_gpus_per_worker if {
	inp := json.patch(fx.rayjob("h100-8gpu", 2, 8), [{"op": "add", "path": "/profile/maxGpusPerPod", "value": 4}])
	some v in deny with input as inp
	contains(v.msg, "allowed: at most 4 GPUs per pod under workload profile h100-8gpu (maxGpusPerPod 4)")
}

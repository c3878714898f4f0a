package taugate.policies.head_without_gpu

import data.taugate.lib.fixtures as fx

test_cpu_head_is_allowed if {
	count(deny) == 0 with input as fx.rayjob("h100-8gpu", 2, 8)
}

test_gpu_head_is_reported_at_its_gpu_limit if {
	inp := fx.input_for("vision", "h100-8gpu", [fx.head(1), fx.worker(0, 2, 8)])
	some v in deny with input as inp
	v.policy == "head-without-gpu"
	v.field == "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]"
	contains(v.msg, "asks for 1 GPU,")
}

test_gpu_job_and_workers_are_not_heads if {
	count(deny) == 0 with input as fx.input_for("vision", "h100-8gpu", [fx.job(2, 8)])
}

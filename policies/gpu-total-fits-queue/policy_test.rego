package taugate.policies.gpu_total_fits_queue

import data.taugate.lib.fixtures as fx

test_workload_within_nominal_plus_borrowing_is_allowed if {
	count(deny) == 0 with input as fx.rayjob("h100-4gpu", 8, 4)
}

test_usage_does_not_matter_only_the_limit if {
	# 32 GPUs: above what is free now (32 - 8 used) but admissible once the queue drains.
	count(deny) == 0 with input as fx.rayjob("h100-8gpu", 4, 8)
}

test_sixty_four_gpus_against_thirty_two_is_denied_with_both_numbers if {
	some v in deny with input as fx.rayjob("h100-4gpu", 16, 4)
	v.policy == "gpu-total-fits-queue"
	v.field == "spec.rayClusterSpec.workerGroupSpecs[0].replicas"
	contains(v.msg, "asks for 64 GPUs in total")
	contains(v.msg, "at most 32 nvidia.com/gpu")
	contains(v.msg, "nominalQuota 24 + borrowingLimit 8")
}

test_nlp_cannot_borrow_beyond_zero if {
	inp := fx.input_for("nlp", "a100-4gpu", [fx.head(0), fx.worker(0, 5, 4)])
	some v in deny with input as inp
	contains(v.msg, "asks for 20 GPUs in total")
	contains(v.msg, "at most 16")
}

test_unbounded_borrowing_in_a_cohort_is_not_judged if {
	inp := json.patch(fx.rayjob("h100-4gpu", 16, 4), [{"op": "replace", "path": "/cluster/queue/gpu", "value": {"flavors": ["h100"], "nominal": 24, "borrowingLimit": null, "usage": 8, "max": null}}])
	count(deny) == 0 with input as inp
}

test_no_cohort_means_nominal_only if {
	inp := json.patch(fx.rayjob("h100-4gpu", 7, 4), [{"op": "replace", "path": "/cluster/queue/gpu", "value": {"flavors": ["h100"], "nominal": 24, "borrowingLimit": null, "usage": 8, "max": 24}}])
	some v in deny with input as inp
	contains(v.msg, "at most 24 nvidia.com/gpu (flavor h100: nominalQuota 24, no cohort to borrow from)")
}

test_queue_without_gpu_quota_admits_no_gpu if {
	inp := json.patch(fx.rayjob("h100-1gpu", 1, 1), [{"op": "replace", "path": "/cluster/queue/gpu", "value": {"flavors": [], "nominal": 0, "borrowingLimit": 0, "usage": 0, "max": 0}}])
	some v in deny with input as inp
	contains(v.msg, "at most 0 nvidia.com/gpu (ClusterQueue vision-cq has no nvidia.com/gpu quota)")
}

test_job_total_counts_parallelism if {
	inp := fx.input_for("vision", "h100-4gpu", [fx.job(9, 4)])
	some v in deny with input as inp
	v.field == "spec.parallelism"
	contains(v.msg, "asks for 36 GPUs")
}

# partial_job(parallelism, min, gpus): a Job Kueue may admit with `min` of its `parallelism` pods.
partial_job(parallelism, min, gpus) := inp if {
	t := object.union(fx.job(parallelism, gpus), {"minReplicas": min})
	base := fx.input_for("vision", "h100-4gpu", [t])
	inp := json.patch(base, [{"op": "replace", "path": "/object/minTotalGpus", "value": min * gpus}])
}

test_a_job_kueue_may_admit_partially_is_judged_at_its_minimum if {
	# 9 pods x 4 GPUs = 36 > 32, but partial admission may run it with 8 pods (32 GPUs).
	count(deny) == 0 with input as partial_job(9, 8, 4)
}

test_a_job_whose_partial_minimum_still_exceeds_the_quota_is_denied_with_the_range if {
	some v in deny with input as partial_job(12, 9, 4)
	v.field == "spec.parallelism"
	contains(v.msg, "at least 36 GPUs in total even at Kueue's partial-admission minimum")
	contains(v.msg, "job: 9-12 pods x 4 GPUs")
	contains(v.msg, "at most 32 nvidia.com/gpu")
}

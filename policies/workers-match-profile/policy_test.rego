package taugate.policies.workers_match_profile

import data.taugate.lib.fixtures as fx

test_fixed_profile_with_exact_count_is_allowed if {
	count(deny) == 0 with input as fx.rayjob("h100-8gpu", 2, 8)
}

test_fixed_profile_with_other_count_is_denied if {
	some v in deny with input as fx.rayjob("h100-8gpu", 3, 8)
	v.field == "spec.rayClusterSpec.workerGroupSpecs[0].replicas"
	contains(v.msg, "asks for 3 workers")
	contains(v.msg, "allowed: exactly 2 under workload profile h100-8gpu")
	count(deny) == 1 with input as fx.rayjob("h100-8gpu", 1, 8)
}

test_elastic_profile_allows_fewer if {
	count(deny) == 0 with input as fx.rayjob("h100-1gpu", 1, 1)
}

test_elastic_profile_denies_more if {
	some v in deny with input as fx.rayjob("h100-1gpu", 5, 1)
	contains(v.msg, "allowed: at most 4 under workload profile h100-1gpu")
}

test_worker_groups_add_up if {
	inp := fx.input_for("vision", "h100-8gpu", [fx.head(0), fx.worker(0, 1, 8), fx.worker(1, 2, 8)])
	some v in deny with input as inp
	contains(v.msg, "asks for 3 workers (gpu-group-0: 1, gpu-group-1: 2)")
}

test_autoscaler_maximum_counts if {
	autoscaled := object.union(fx.worker(0, 2, 1), {"maxReplicas": 8})
	inp := json.patch(fx.input_for("vision", "h100-1gpu", [fx.head(0), autoscaled]), [{"op": "replace", "path": "/object/autoscaling", "value": true}])
	some v in deny with input as inp
	contains(v.msg, "grow to 8 workers")
}

test_cpu_worker_groups_do_not_count_for_a_gpu_profile if {
	inp := fx.input_for("vision", "h100-8gpu", [fx.head(0), fx.worker(0, 2, 8), fx.worker(1, 6, 0)])
	count(deny) == 0 with input as inp
}

test_job_parallelism_counts_as_workers if {
	some v in deny with input as fx.input_for("vision", "h100-8gpu", [fx.job(4, 8)])
	v.field == "spec.parallelism"
}

test_a_fixed_profile_job_that_kueue_may_admit_partially_is_denied_naming_the_annotation if {
	t := object.union(fx.job(2, 8), {"minReplicas": 1})
	inp := fx.input_for("vision", "h100-8gpu", [t])
	some v in deny with input as inp
	v.field == "metadata.annotations[\"kueue.x-k8s.io/job-min-parallelism\"]"
	contains(v.msg, "start it with 1 of its 2 workers; allowed: exactly 2")
}

test_a_fixed_profile_job_without_partial_admission_is_allowed if {
	count(deny) == 0 with input as fx.input_for("vision", "h100-8gpu", [fx.job(2, 8)])
}

test_a_jobset_replicated_job_counts_as_workers_named_by_its_replicas if {
	t := object.union(
		fx.template("replicated-job", "trainer-node", "spec.replicatedJobs[1].template.spec.template", 3, 8),
		{"replicasField": "spec.replicatedJobs[1].replicas"},
	)
	some v in deny with input as fx.input_for("vision", "h100-8gpu", [t])
	v.field == "spec.replicatedJobs[1].replicas"
	contains(v.msg, "asks for 3 workers (trainer-node: 3)")
}

test_a_kubeflow_master_and_a_leaderworkerset_leader_count_as_workers if {
	master := fx.template("master", "Master", "spec.pytorchReplicaSpecs.Master.template", 1, 8)
	worker := fx.template("worker", "Worker", "spec.pytorchReplicaSpecs.Worker.template", 1, 8)
	count(deny) == 0 with input as fx.input_for("vision", "h100-8gpu", [master, worker])
	leader := fx.template("leader", "leader", "spec.leaderWorkerTemplate.leaderTemplate", 2, 8)
	some v in deny with input as fx.input_for("vision", "h100-8gpu", [leader, worker])
	contains(v.msg, "asks for 3 workers (leader: 2, Worker: 1)")
}

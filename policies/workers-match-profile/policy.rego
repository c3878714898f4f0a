# workers-match-profile: the number of worker pods follows the workload profile.
#
# TauGrid profile semantics: `mode: fixed` runs exactly `workerCount` workers (gang-sized
# placement and quota are planned for that number); `mode: elastic` runs at most
# `workerCount`. Workers are Ray worker-group pods (the larger of KubeRay's
# clamp(replicas, minReplicas, maxReplicas) and Kueue's replicas, x numOfHosts; with the KubeRay
# autoscaler on, up to maxReplicas x numOfHosts), the pods a batch/v1 Job runs at a time
# (min(parallelism, completions)), a bare Pod (1, or its Kueue pod group), a Deployment's or
# StatefulSet's replicas, and the pods of every other role but the Ray head and the RayJob
# submitter (JobSet replicated jobs, Kubeflow Master and Worker, LeaderWorkerSet leaders and
# workers); for a GPU profile only pod templates that hold GPUs count.
package taugate.policies.workers_match_profile

import data.taugate.lib

name := "workers-match-profile"

# Worker pods now and at most (input.object.workers counts them: GPU ones for a GPU profile).
now := input.object.workers.gpuPods if input.profile.gpusPerWorker > 0

else := input.object.workers.pods

most := input.object.workers.maxGpuPods if input.profile.gpusPerWorker > 0

else := input.object.workers.maxPods

workers := [t | some t in input.object.podTemplates; not t.role in {"head", "submitter"}; t.gpusPerPod > 0] if {
	input.profile.gpusPerWorker > 0
} else := [t | some t in input.object.podTemplates; not t.role in {"head", "submitter"}]

groups := concat(", ", [sprintf("%s: %d", [t.group, t.replicas]) | some t in workers])

field := lib.replicas_field(workers[0])

# fix(qualifier, n): how to run n workers ("at most " n with qualifier): a Deployment's, Job's or
# worker group's replicas, or for bare Pods a Kueue pod group of n pods (kueue v0.17
# pod_webhook.go validatePodGroupMetadata: the group's label and total-count annotation together).
fix(qualifier, n) := sprintf(
	"run %s%d such pods as one Kueue pod group (the label kueue.x-k8s.io/pod-group-name and the annotation kueue.x-k8s.io/pod-group-total-count on each pod)",
	[qualifier, n],
) if {
	workers[0].role == "pod"
} else := sprintf("set the worker replicas to %s%d in total", [qualifier, n])

deny contains lib.violation(name, field, msg) if {
	input.profile.mode == "fixed"
	now != input.profile.workerCount
	now > 0
	msg := sprintf(
		"asks for %d workers (%s); allowed: exactly %d under workload profile %s (mode fixed, workerCount %d); fix: %s, or use an elastic profile",
		[now, groups, input.profile.workerCount, input.profile.name, input.profile.workerCount, fix("", input.profile.workerCount)],
	)
}

deny contains lib.violation(name, field, msg) if {
	input.profile.mode == "elastic"
	now > input.profile.workerCount
	msg := sprintf(
		"asks for %d workers (%s); allowed: at most %d under workload profile %s (mode elastic, workerCount %d); fix: %s, or use a profile with more workers",
		[now, groups, input.profile.workerCount, input.profile.name, input.profile.workerCount, fix("at most ", input.profile.workerCount)],
	)
}

# An autoscaler may grow the workers past the profile's count: KubeRay's (worker groups up to
# maxReplicas) or a PyTorchJob's elastic HPA (the Worker up to elasticPolicy.maxReplicas).
deny contains lib.violation(name, field, msg) if {
	input.object.autoscaling
	now <= input.profile.workerCount
	most > input.profile.workerCount
	msg := sprintf(
		"lets the autoscaler grow to %d workers (maxReplicas); allowed: at most %d under workload profile %s (mode %s, workerCount %d); fix: set maxReplicas so the workers add up to at most %d",
		[most, input.profile.workerCount, input.profile.name, input.profile.mode, input.profile.workerCount, input.profile.workerCount],
	)
}

# Kueue's partial admission (a Job's kueue.x-k8s.io/job-min-parallelism; kueue
# pkg/controller/jobs/job Job.minPodsCount) may start a fixed-size workload with fewer workers,
# and then lowers spec.parallelism itself: a fixed profile must say so at apply time.
deny contains lib.violation(name, "metadata.annotations[\"kueue.x-k8s.io/job-min-parallelism\"]", msg) if {
	input.profile.mode == "fixed"
	now == input.profile.workerCount
	least := sum([t.minReplicas | some t in workers])
	least < now
	msg := sprintf(
		"lets Kueue's partial admission start it with %d of its %d workers; allowed: exactly %d under workload profile %s (mode fixed, workerCount %d); fix: remove the kueue.x-k8s.io/job-min-parallelism annotation, or use an elastic profile",
		[least, now, input.profile.workerCount, input.profile.name, input.profile.workerCount],
	)
}

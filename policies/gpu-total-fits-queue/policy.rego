# gpu-total-fits-queue: a workload's GPUs must fit the queue's quota at all.
#
# Kueue admits a Workload only when all its pods fit the ClusterQueue's quota for the flavor:
# at most nominalQuota + borrowingLimit (Kueue ClusterQueue resource quotas). A workload above
# that is never admitted: it waits forever. input.cluster.queue.gpu already holds the limit
# for the profile's GPU class (the flavors whose nodeLabels name the class, else every
# nvidia.com/gpu flavor of the ClusterQueue); its `max` is null when a flavor may borrow
# without bound inside its cohort, and then this policy says nothing.
#
# What counts is the fewest GPUs Kueue may admit the workload with: input.object.minTotalGpus.
# Pods per template follow KubeRay and Kueue (a worker group: the larger of KubeRay's
# clamp(replicas, minReplicas, maxReplicas) and Kueue's replicas, x numOfHosts; a Job:
# min(parallelism, completions)), and a Job with Kueue's partial admission annotation
# kueue.x-k8s.io/job-min-parallelism may be admitted with that many pods (kueue
# pkg/controller/jobs/job Job.minPodsCount), so only its minimum must fit.
package taugate.policies.gpu_total_fits_queue

import data.taugate.lib
import data.taugate.lib.gpu_templates

name := "gpu-total-fits-queue"

quota := input.cluster.queue.gpu

describe_quota := sprintf("ClusterQueue %s has no nvidia.com/gpu quota", [input.cluster.queue.clusterQueue]) if {
	count(quota.flavors) == 0
} else := sprintf("flavor %s: nominalQuota %v + borrowingLimit %v", [concat("+", quota.flavors), quota.nominal, quota.borrowingLimit]) if {
	is_number(quota.borrowingLimit)
} else := sprintf("flavor %s: nominalQuota %v, no cohort to borrow from", [concat("+", quota.flavors), quota.nominal])

# partial(t): the template may be admitted with fewer pods than it runs (Kueue partial admission).
partial(t) if t.minReplicas < t.replicas

asked := sprintf("at least %d GPUs in total even at Kueue's partial-admission minimum", [input.object.minTotalGpus]) if {
	input.object.minTotalGpus < input.object.totalGpus
} else := sprintf("%d GPUs in total", [input.object.totalGpus])

pods(t) := sprintf("%d-%d pods", [t.minReplicas, t.replicas]) if partial(t)

else := sprintf("%d pods", [t.replicas])

deny contains lib.violation(name, field, msg) if {
	total := input.object.minTotalGpus
	total > 0
	allowed := input.cluster.queue.gpu.max
	is_number(allowed)
	total > allowed
	field := lib.replicas_field(gpu_templates[0])
	shape := concat(", ", [sprintf("%s: %s x %d GPUs", [t.group, pods(t), t.gpusPerPod]) | some t in gpu_templates])
	msg := sprintf(
		"the workload asks for %s (%s), but ClusterQueue %s behind LocalQueue %s can admit at most %v nvidia.com/gpu (%s), so Kueue would never admit it; allowed: at most %v GPUs in total; fix: use fewer workers or fewer GPUs per worker, or request more quota with a TauQuotaRequest",
		[asked, shape, input.cluster.queue.clusterQueue, input.cluster.queue.localQueue, allowed, describe_quota, allowed],
	)
}

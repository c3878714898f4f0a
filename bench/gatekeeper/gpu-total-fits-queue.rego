# gpu-total-fits-queue (policies/gpu-total-fits-queue): the workload's GPUs at Kueue's
# partial-admission minimum fit what its ClusterQueue can ever admit (nominalQuota +
# borrowingLimit of the profile's GPU flavor). The quota (parameters.queueMaxGpus, by namespace then
# GPU class) is read from the ClusterQueues when the Constraint is made: Gatekeeper's input has no
# Kueue objects.
package taugategputotalfitsqueue

import data.lib.taugate

violation[{"msg": msg, "details": {"field": "spec"}}] {
	p := taugate.profile(input.parameters)
	most := input.parameters.queueMaxGpus[input.review.object.metadata.namespace][p.gpuClass]
	least := sum([n | t := taugate.gpu_templates[_]; n := t.gpusPerPod * t.minReplicas])
	least > most
	msg := sprintf("gpu-total-fits-queue: asks for %d GPUs at least; allowed: %d, what the workspace's ClusterQueue can ever admit; fix: use fewer workers or GPUs per worker", [least, most])
}

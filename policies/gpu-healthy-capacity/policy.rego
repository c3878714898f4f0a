# gpu-healthy-capacity (warn): the workload needs more healthy GPU nodes than there are now.
#
# Nodes failing a Node Problem Detector GPU check (GpuXid, GpuEcc, ...), NotReady or cordoned
# must not take new GPU pods. kube-scheduler reads no NPD condition (only taints, cordons and
# Ready): a node with a GPU condition True keeps taking pods until the platform cordons or
# taints it (a remediation controller or the on-call; seen on the whole stack,
# tests/e2e/stack.py). When the healthy nodes of the profile's GPU class cannot hold all of
# the workload's GPU pods at once, it is admissible but will wait until nodes recover: the
# researcher is warned at submission instead of finding out after an hour of Pending.
# Pods per node = floor(largest healthy node's GPUs / GPUs per pod), nodes taken as alike.
package taugate.policies.gpu_healthy_capacity

import data.taugate.lib
import data.taugate.lib.gpu_templates

name := "gpu-healthy-capacity"

summary := input.cluster.gpuClasses[input.profile.gpuClass]

unhealthy := concat(", ", [sprintf("%s: %s", [node, concat("+", conds)]) | some node, conds in summary.problems])

health := sprintf("%d of %d %s nodes are healthy (%d healthy GPUs; unhealthy: %s)", [
	summary.healthyNodes, summary.nodes, summary.name, summary.healthyGpus, unhealthy,
]) if {
	count(summary.problems) > 0
} else := sprintf("%d of %d %s nodes are healthy (%d healthy GPUs)", [
	summary.healthyNodes, summary.nodes, summary.name, summary.healthyGpus,
])

# A pod that fits some node of the class but no healthy one.
warn contains lib.violation(name, lib.gpu_field(t), msg) if {
	input.object.maxGpusPerPod > 0
	s := input.cluster.gpuClasses[input.profile.gpuClass]
	input.object.maxGpusPerPod > s.maxHealthyGpusPerNode
	some t in gpu_templates
	t.gpusPerPod <= s.maxGpusPerNode
	t.gpusPerPod > s.maxHealthyGpusPerNode
	msg := sprintf(
		"%s asks for %d GPUs per pod, but right now no healthy %s node has that many allocatable GPUs (%s); the pods will stay Pending until nodes recover; allowed right now: at most %d GPUs per pod; fix: wait for the platform team to repair the nodes, or use fewer GPUs per pod",
		[lib.describe(t), t.gpusPerPod, s.name, health, s.maxHealthyGpusPerNode],
	)
}

# Every GPU pod fits a healthy node, but not all of them at once.
warn contains lib.violation(name, lib.replicas_field(gpu_templates[0]), msg) if {
	input.object.maxGpusPerPod > 0
	s := input.cluster.gpuClasses[input.profile.gpuClass]
	input.object.maxGpusPerPod <= s.maxHealthyGpusPerNode
	input.object.totalGpus > s.maxHealthyGpusPerNode # else the whole workload fits on one healthy node
	nodes := sum([ceil(t.replicas / floor(s.maxHealthyGpusPerNode / t.gpusPerPod)) | some t in gpu_templates])
	nodes > s.healthyNodes
	shape := concat(", ", [sprintf("%s: %d pods x %d GPUs, %d per node", [t.group, t.replicas, t.gpusPerPod, floor(s.maxHealthyGpusPerNode / t.gpusPerPod)]) | some t in gpu_templates])
	first := gpu_templates[0]
	fits := s.healthyNodes * floor(s.maxHealthyGpusPerNode / first.gpusPerPod)
	msg := sprintf(
		"the workload needs %d %s nodes at once (%s), but %s; %s; allowed right now: %d healthy nodes, at most %d pods of %d GPUs; fix: use fewer pods, or wait for %s",
		[nodes, s.name, shape, health, consequence(nodes, s), s.healthyNodes, fits, first.gpusPerPod, remedy(nodes, s)],
	)
}

consequence(nodes, s) := sprintf("GPU class %s has only %d nodes in all, so its pods cannot all run at the same time", [s.name, s.nodes]) if {
	nodes > s.nodes
} else := "it is admissible but will wait in the queue until enough nodes are healthy and free"

remedy(nodes, s) := "more nodes of the class" if {
	nodes > s.nodes
} else := "the nodes to recover"

# gpu-per-pod-fits-node: a pod must fit on one node of its GPU class.
#
# The Kubernetes scheduler places a pod on one node; a pod that asks for more nvidia.com/gpu
# than the largest allocatable count on any node of the workload profile's GPU class stays
# Pending forever (and, under Kueue, holds its quota while it does). GPUs per pod follow
# Kubernetes' pod request formula: native sidecars add to the main containers (KEP-753).
package taugate.policies.gpu_per_pod_fits_node

import data.taugate.lib
import data.taugate.lib.gpu_templates

name := "gpu-per-pod-fits-node"

# The profile names a GPU class that has nodes: compare with its largest node.
deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	input.object.maxGpusPerPod > 0
	summary := input.cluster.gpuClasses[input.profile.gpuClass]
	input.object.maxGpusPerPod > summary.maxGpusPerNode
	some t in gpu_templates
	t.gpusPerPod > summary.maxGpusPerNode
	msg := sprintf(
		"%s asks for %d GPUs per pod%s, but the largest %s node has %d allocatable GPUs, so no node of GPU class %s can ever hold the pod; allowed: at most %d GPUs per pod; fix: request at most %d GPUs per pod and use more workers instead",
		[lib.describe(t), t.gpusPerPod, lib.sidecar_note(t), summary.name, summary.maxGpusPerNode, summary.name, summary.maxGpusPerNode, summary.maxGpusPerNode],
	)
}

# The profile names a GPU class that no node has.
deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	input.object.maxGpusPerPod > 0
	cls := input.profile.gpuClass
	is_string(cls)
	not input.cluster.gpuClasses[cls]
	some t in gpu_templates
	msg := sprintf(
		"%s asks for %d GPUs per pod on GPU class %s (workload profile %s), but no node of that class exists; allowed: a GPU class with nodes (%s); fix: ask the platform team to fix the profile or choose another one",
		[lib.describe(t), t.gpusPerPod, cls, input.profile.name, concat(", ", object.keys(input.cluster.gpuClasses))],
	)
}

# A profile without a GPU class: compare with the largest GPU node of any class.
deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	input.object.maxGpusPerPod > 0
	object.get(input.profile, "gpuClass", null) == null
	largest := max(array.concat([c.maxGpusPerNode | some c in input.cluster.gpuClasses], [0]))
	some t in gpu_templates
	t.gpusPerPod > largest
	msg := sprintf(
		"%s asks for %d GPUs per pod, but the largest GPU node in the cluster has %d allocatable GPUs, so no node can ever hold the pod; allowed: at most %d GPUs per pod; fix: request at most %d GPUs per pod",
		[lib.describe(t), t.gpusPerPod, largest, largest, largest],
	)
}

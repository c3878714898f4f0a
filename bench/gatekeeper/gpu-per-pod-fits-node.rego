# gpu-per-pod-fits-node (policies/gpu-per-pod-fits-node): no pod asks for more GPUs than the
# largest node of the profile's GPU class has. The node summary (parameters.gpuClasses) is the
# one taugate computes from the Nodes (taugate/snapshot.py summarise_gpu_classes), frozen into the
# Constraint when it is made: Gatekeeper's input has no node summary.
package taugategpuperpodfitsnode

import data.lib.taugate

violation[{"msg": msg, "details": {"field": taugate.gpu_field(t)}}] {
	p := taugate.profile(input.parameters)
	summary := input.parameters.gpuClasses[p.gpuClass]
	t := taugate.gpu_templates[_]
	t.gpusPerPod > summary.maxGpusPerNode
	msg := sprintf("gpu-per-pod-fits-node: %s asks for %d GPUs per pod, but the largest %s node has %d; allowed: at most %d GPUs per pod; fix: request fewer GPUs per pod and use more workers", [taugate.describe(t), t.gpusPerPod, p.gpuClass, summary.maxGpusPerNode, summary.maxGpusPerNode])
}

violation[{"msg": msg, "details": {"field": taugate.gpu_field(t)}}] {
	p := taugate.profile(input.parameters)
	is_string(p.gpuClass)
	not input.parameters.gpuClasses[p.gpuClass]
	t := taugate.gpu_templates[_]
	msg := sprintf("gpu-per-pod-fits-node: %s asks for GPUs on class %s (workload profile %s), but no node of that class exists; fix: choose another profile", [taugate.describe(t), p.gpuClass, p.name])
}

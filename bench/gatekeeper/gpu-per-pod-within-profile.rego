# gpu-per-pod-within-profile (policies/gpu-per-pod-within-profile): GPUs per pod at most the
# workload profile's gpusPerWorker and maxGpusPerPod.
package taugategpuperpodwithinprofile

import data.lib.taugate

violation[{"msg": msg, "details": {"field": taugate.gpu_field(t)}}] {
	p := taugate.profile(input.parameters)
	t := taugate.gpu_templates[_]
	t.gpusPerPod > p.gpusPerWorker
	msg := sprintf("gpu-per-pod-within-profile: %s asks for %d GPUs per pod; allowed: %d per worker under workload profile %s; fix: set nvidia.com/gpu to %d, or use a profile with more GPUs per worker", [taugate.describe(t), t.gpusPerPod, p.gpusPerWorker, p.name, p.gpusPerWorker])
}

violation[{"msg": msg, "details": {"field": taugate.gpu_field(t)}}] {
	p := taugate.profile(input.parameters)
	cap := p.maxGpusPerPod
	is_number(cap)
	t := taugate.gpu_templates[_]
	t.gpusPerPod > cap
	t.gpusPerPod <= p.gpusPerWorker
	msg := sprintf("gpu-per-pod-within-profile: %s asks for %d GPUs per pod; allowed: at most %d per pod under workload profile %s (maxGpusPerPod); fix: request at most %d GPUs per pod", [taugate.describe(t), t.gpusPerPod, cap, p.name, cap])
}

# gpu-per-pod-within-profile: a pod holds no more GPUs than its workload profile allows.
#
# TauGrid workload profiles fix the GPUs of one worker (`gpusPerWorker`); taugate's optional
# `maxGpusPerPod` caps any pod below that. A pod above either is not the shape the platform
# team planned nodes, quota and placement for.
package taugate.policies.gpu_per_pod_within_profile

import data.taugate.lib

name := "gpu-per-pod-within-profile"

deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	allowed := input.profile.gpusPerWorker
	some t in lib.gpu_templates
	t.gpusPerPod > allowed
	msg := sprintf(
		"%s asks for %s per pod, but workload profile %s allows %s per worker (gpusPerWorker %d); fix: set nvidia.com/gpu to %d in requests and limits, or use a workload profile with more GPUs per worker (label tau.azure.com/workload-profile)",
		[lib.describe(t), lib.plural(t.gpusPerPod, "GPU"), input.profile.name, lib.plural(allowed, "GPU"), allowed, allowed],
	)
}

deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	cap := input.profile.maxGpusPerPod
	is_number(cap)
	some t in lib.gpu_templates
	t.gpusPerPod > cap
	t.gpusPerPod <= input.profile.gpusPerWorker
	msg := sprintf(
		"%s asks for %s per pod, but workload profile %s allows at most %s per pod (maxGpusPerPod %d); fix: request at most %d GPUs per pod",
		[lib.describe(t), lib.plural(t.gpusPerPod, "GPU"), input.profile.name, lib.plural(cap, "GPU"), cap, cap],
	)
}

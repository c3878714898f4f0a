# gpu-per-pod-within-profile: a pod holds no more GPUs than its workload profile allows.
#
# TauGrid workload profiles fix the GPUs of one worker (`gpusPerWorker`); taugate's optional
# `maxGpusPerPod` caps any pod below that. A pod above either is not the shape the platform
# team planned nodes, quota and placement for.
package taugate.policies.gpu_per_pod_within_profile

import data.taugate.lib
import data.taugate.lib.gpu_templates

name := "gpu-per-pod-within-profile"

deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	allowed := input.profile.gpusPerWorker
	input.object.maxGpusPerPod > allowed
	some t in gpu_templates
	t.gpusPerPod > allowed
	msg := sprintf(
		"%s asks for %s per pod%s; allowed: %s per worker under workload profile %s (gpusPerWorker %d); fix: set nvidia.com/gpu to %d in requests and limits, or use a workload profile with more GPUs per worker (label tau.azure.com/workload-profile)",
		[lib.describe(t), lib.plural(t.gpusPerPod, "GPU"), lib.sidecar_note(t), lib.plural(allowed, "GPU"), input.profile.name, allowed, allowed],
	)
}

deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	cap := input.profile.maxGpusPerPod
	is_number(cap)
	input.object.maxGpusPerPod > cap
	some t in gpu_templates
	t.gpusPerPod > cap
	t.gpusPerPod <= input.profile.gpusPerWorker
	msg := sprintf(
		"%s asks for %s per pod; allowed: at most %s per pod under workload profile %s (maxGpusPerPod %d); fix: request at most %d GPUs per pod",
		[lib.describe(t), lib.plural(t.gpusPerPod, "GPU"), lib.plural(cap, "GPU"), input.profile.name, cap, cap],
	)
}

# head-without-gpu: the Ray head should not hold GPUs.
#
# The Ray head runs the GCS, the dashboard and the job driver; Ray's own guidance for GPU
# clusters is to give the head `num-gpus: 0` so no training task lands on it. A GPU on the
# head sits idle while counting against the queue's nvidia.com/gpu quota. The result is a
# `deny` rule; policies/enforcement.yaml decides whether it denies or only warns.
package taugate.policies.head_without_gpu

import data.taugate.lib

name := "head-without-gpu"

deny contains lib.violation(name, lib.gpu_field(t), msg) if {
	input.object.maxGpusPerPod > 0
	some t in input.object.podTemplates
	t.role == "head"
	t.gpusPerPod > 0
	msg := sprintf(
		"the Ray head asks for %s, which sit idle while counting against the queue's GPU quota (the head coordinates; workers train); allowed: 0 GPUs on the head; fix: remove nvidia.com/gpu from the head's containers, set rayStartParams num-gpus: \"0\", and add the GPUs to a worker group",
		[lib.plural(t.gpusPerPod, "GPU")],
	)
}

# head-without-gpu (policies/head-without-gpu): the Ray head holds no GPUs (shipped as warn:
# the Constraint's enforcementAction is warn, as policies/enforcement.yaml has it).
package taugateheadwithoutgpu

import data.lib.taugate

violation[{"msg": msg, "details": {"field": taugate.gpu_field(t)}}] {
	t := taugate.pod_templates[_]
	t.role == "head"
	t.gpusPerPod > 0
	msg := sprintf("head-without-gpu: the Ray head asks for %d GPUs, which sit idle while counting against the queue's GPU quota; allowed: 0 GPUs on the head; fix: move the GPUs to a worker group", [t.gpusPerPod])
}

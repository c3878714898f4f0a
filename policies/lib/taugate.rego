# Shared helpers for the taugate policy library (package data.taugate.lib).
#
# Every policy imports this package as `data.taugate.lib` and builds its results with
# `lib.violation(name, field, msg)`, so all results have the contract shape
# {"msg": ..., "field": ..., "policy": ...}. The input document is described in
# policies/input.schema.json.
package taugate.lib

gpu_resource := "nvidia.com/gpu"

# violation builds one result of the contract: `field` is a Kubernetes field path,
# `msg` says what was asked, what is allowed and how to fix it.
violation(policy, field, msg) := {"policy": policy, "field": field, "msg": msg}

# Performance note (regorus, the embedded engine): referring to a rule of this package through
# the package alias (`lib.gpu_templates` after `import data.taugate.lib`) evaluates the whole
# package on every request. Import the rules you use by name (`import data.taugate.lib.gpu_templates`)
# and call functions through the alias (`lib.violation(...)`): both are cheap.

# Pod templates whose pods hold GPUs.
gpu_templates := [t | some t in input.object.podTemplates; t.gpusPerPod > 0]

# The resolved workload profile's GPU class (undefined for a profile without one).
profile_gpu_class := input.profile.gpuClass if {
	is_string(input.profile.gpuClass)
}

# The cluster summary of the profile's GPU class (undefined when no node has that class).
profile_class_summary := input.cluster.gpuClasses[profile_gpu_class]

# describe(t) names a pod template for a researcher: "worker group gpu-group", "the Ray head"...
describe(t) := sprintf("worker group %s", [t.group]) if t.role == "worker"

describe(t) := "the Ray head" if t.role == "head"

describe(t) := "the RayJob submitter" if t.role == "submitter"

describe(t) := "the Job's pod template" if t.role == "job"

describe(t) := "the Pod" if t.role == "pod"

describe(t) := sprintf("the %s's pod template", [t.group]) if t.role == "replica"

describe(t) := sprintf("replicated job %s", [t.group]) if t.role == "replicated-job"

describe(t) := sprintf("the %s replica", [t.group]) if t.role == "master"

describe(t) := "the leader" if t.role == "leader"

describe(t) := "the TrainJob's training nodes" if t.role == "node"

# gpu_field(t) is the field path of the GPU limit (else request) of the first container of t
# that holds GPUs, e.g. spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"].
gpu_field(t) := f if {
	fields := [sprintf("%s.%s[\"%s\"]", [resources_field(c), gpu_key(c), gpu_resource]) |
		some c in t.containers
		c.gpus > 0
	]
	count(fields) > 0
	f := fields[0]
} else := sprintf("%s.spec.containers", [t.field])

# resources_field(c) is the field path of container c's resources: c.resourcesField where the
# input gives it (a TrainJob's spec.trainer.resourcesPerNode), else c.field + ".resources".
resources_field(c) := c.resourcesField if {
	is_string(c.resourcesField)
} else := sprintf("%s.resources", [c.field])

gpu_key(c) := "limits" if {
	object.get(c.limits, gpu_resource, null) != null
} else := "requests"

# replicas_field(t) is where t's pod count is set (a worker group's replicas, a Job's
# parallelism), else the template itself.
replicas_field(t) := t.replicasField if {
	is_string(t.replicasField)
} else := t.field

# plural(n, word) is "1 GPU" / "2 GPUs".
plural(n, word) := sprintf("%v %s", [n, word]) if n == 1

plural(n, word) := sprintf("%v %ss", [n, word]) if n != 1

# sidecar_note(t) explains the GPUs native sidecars add to a pod (KEP-753: init containers with
# restartPolicy Always run beside the main containers, so their GPUs add to the pod's), else "".
sidecar_note(t) := sprintf(" (native sidecar %s runs beside the main containers, so its GPUs add to theirs, KEP-753)", [concat(", ", names)]) if {
	names := [sprintf("%s: %d", [c.name, c.gpus]) | some c in t.containers; object.get(c, "sidecar", false) == true; c.gpus > 0]
	count(names) > 0
} else := ""

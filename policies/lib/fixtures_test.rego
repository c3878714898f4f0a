# Test fixtures for policy_test.rego files (package data.taugate.lib.fixtures).
#
# A file whose name ends in _test.rego is loaded by `taugate policy test` and on reload checks,
# never into the serving engine. The fixtures mirror examples/cluster.yaml: H100 nodes with 8
# GPUs (4 nodes, aks-h100-3 failing GpuXid), A100 nodes with 4 GPUs (4 nodes), workspace
# vision (LocalQueue vision-queue -> ClusterQueue vision-cq, h100 flavor: nominal 24 +
# borrowingLimit 8, usage 8) and nlp (nlp-queue -> nlp-cq, a100: nominal 16 + 0).
package taugate.lib.fixtures

gpu_classes := {
	"h100": {
		"name": "h100", "maxGpusPerNode": 8, "maxHealthyGpusPerNode": 8, "nodes": 4,
		"healthyNodes": 3, "unhealthyNodes": 1, "healthyGpus": 24,
		"products": ["NVIDIA-H100-80GB-HBM3"], "problems": {"aks-h100-3": ["GpuXid"]},
	},
	"a100": {
		"name": "a100", "maxGpusPerNode": 4, "maxHealthyGpusPerNode": 4, "nodes": 4,
		"healthyNodes": 4, "unhealthyNodes": 0, "healthyGpus": 16,
		"products": ["NVIDIA-A100-80GB-PCIe"], "problems": {},
	},
}

queues := {
	"vision": {
		"localQueue": "vision-queue", "clusterQueue": "vision-cq",
		"quotas": [
			{"flavor": "cpu", "resource": "cpu", "nominal": 32, "borrowingLimit": null, "usage": 0, "cohort": "research"},
			{"flavor": "h100", "resource": "nvidia.com/gpu", "nominal": 24, "borrowingLimit": 8, "usage": 8, "cohort": "research"},
		],
		"gpu": {"flavors": ["h100"], "nominal": 24, "borrowingLimit": 8, "usage": 8, "max": 32},
		"mig": {},
	},
	"nlp": {
		"localQueue": "nlp-queue", "clusterQueue": "nlp-cq",
		"quotas": [
			{"flavor": "cpu", "resource": "cpu", "nominal": 32, "borrowingLimit": null, "usage": 0, "cohort": "research"},
			{"flavor": "a100", "resource": "nvidia.com/gpu", "nominal": 16, "borrowingLimit": 0, "usage": 4, "cohort": "research"},
		],
		"gpu": {"flavors": ["a100"], "nominal": 16, "borrowingLimit": 0, "usage": 4, "max": 16},
		"mig": {},
	},
}

gpu_toleration := {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

profiles := {
	"h100-1gpu": {"name": "h100-1gpu", "gpusPerWorker": 1, "workerCount": 4, "mode": "elastic", "gpuClass": "h100", "defaultLocalQueue": "vision-queue", "nodeSelector": {}, "tolerations": [gpu_toleration]},
	"h100-4gpu": {"name": "h100-4gpu", "gpusPerWorker": 4, "workerCount": 16, "mode": "elastic", "gpuClass": "h100", "defaultLocalQueue": "vision-queue", "nodeSelector": {}, "tolerations": [gpu_toleration]},
	"h100-8gpu": {"name": "h100-8gpu", "gpusPerWorker": 8, "workerCount": 2, "mode": "fixed", "gpuClass": "h100", "defaultLocalQueue": "vision-queue", "nodeSelector": {}, "tolerations": [gpu_toleration]},
	"a100-4gpu": {"name": "a100-4gpu", "gpusPerWorker": 4, "workerCount": 4, "mode": "elastic", "gpuClass": "a100", "defaultLocalQueue": "nlp-queue", "nodeSelector": {}, "tolerations": [gpu_toleration]},
	"cpu-small": {"name": "cpu-small", "gpusPerWorker": 0, "workerCount": 4, "mode": "elastic", "defaultLocalQueue": "vision-queue", "nodeSelector": {}, "tolerations": []},
}

# container(field, cpu, memory, gpus): one container with equal requests and limits;
# cpu or memory "" leaves that resource out.
container(field, cpu, memory, gpus) := {
	"name": "main", "kind": "containers", "field": field,
	"requests": res, "limits": res, "gpus": gpus,
} if {
	base := {k: v | some k, v in {"cpu": cpu, "memory": memory}; v != ""}
	res := object.union(base, {k: v | some k, v in {"nvidia.com/gpu": sprintf("%d", [gpus])}; gpus > 0})
}

# template(role, group, field, replicas, gpus): a pod template with one container that requests
# 8 CPUs and 64Gi, and `gpus` GPUs.
template(role, group, field, replicas, gpus) := {
	"role": role, "group": group, "field": field,
	"groupField": trim_suffix(field, ".template"),
	"replicasField": replicas_field(role, field),
	"replicas": replicas, "minReplicas": replicas, "maxReplicas": replicas, "gpusPerPod": gpus,
	"migPerPod": {}, "rayNumGpus": null,
	"nodeSelector": {}, "affinity": {}, "tolerations": [], "priorityClassName": null,
	"containers": [container(sprintf("%s.spec.containers[0]", [field]), "8", "64Gi", gpus)],
}

replicas_field(role, field) := sprintf("%s.replicas", [trim_suffix(field, ".template")]) if role == "worker"

replicas_field(role, field) := "spec.parallelism" if role == "job"

replicas_field(role, field) := null if role in {"head", "submitter"}

replicas_field(role, field) := sprintf("%s.replicas", [trim_suffix(field, ".template")]) if {
	not role in {"worker", "job", "head", "submitter"}
}

# head(gpus), worker(i, replicas, gpus): RayJob pod templates.
head(gpus) := template("head", "head", "spec.rayClusterSpec.headGroupSpec.template", 1, gpus)

worker(i, replicas, gpus) := template(
	"worker", sprintf("gpu-group-%d", [i]),
	sprintf("spec.rayClusterSpec.workerGroupSpecs[%d].template", [i]), replicas, gpus,
)

# job(parallelism, gpus): a batch/v1 Job's pod template.
job(parallelism, gpus) := template("job", "job", "spec.template", parallelism, gpus)

# input_for(workspace, profile, templates): a CREATE input for a RayJob in workspace
# "vision" or "nlp" with profile name `profile` and the given pod templates.
input_for(workspace, profile, templates) := {
	"operation": "CREATE",
	"userInfo": {"username": "alice@example.com", "groups": [sprintf("%s-researchers", [workspace])]},
	"namespace": workspace,
	"object": {
		"apiVersion": "ray.io/v1", "kind": "RayJob",
		"metadata": {"name": "train", "namespace": workspace, "labels": {}},
		"autoscaling": false,
		"totalGpus": sum([(t.gpusPerPod * t.replicas) | some t in templates]),
		"minTotalGpus": sum([(t.gpusPerPod * t.minReplicas) | some t in templates]),
		"mig": {},
		"maxGpusPerPod": max(array.concat([t.gpusPerPod | some t in templates], [0])),
		"workers": workers(templates),
		"podTemplates": templates,
	},
	"workspace": {"name": workspace, "namespace": workspace, "queue": queues[workspace].localQueue, "team": sprintf("%s-team", [workspace])},
	"profile": profiles[profile],
	"cluster": {"gpuClassLabel": "tau.azure.com/gpu-class", "gpuClasses": gpu_classes, "migResources": {}, "queue": queues[workspace]},
}

# workers(templates): what build_policy_input counts in input.object.workers.
# Every role but the Ray head and the RayJob submitter (taugate.pods.WORKER_ROLES).
workers(templates) := {
	"pods": sum([t.replicas | some t in templates; not t.role in {"head", "submitter"}]),
	"maxPods": sum([t.maxReplicas | some t in templates; not t.role in {"head", "submitter"}]),
	"gpuPods": sum([t.replicas | some t in templates; not t.role in {"head", "submitter"}; t.gpusPerPod > 0]),
	"maxGpuPods": sum([t.maxReplicas | some t in templates; not t.role in {"head", "submitter"}; t.gpusPerPod > 0]),
}

# rayjob(workers, gpus): a vision RayJob with a CPU head and one worker group.
rayjob(profile, replicas, gpus) := input_for("vision", profile, [head(0), worker(0, replicas, gpus)])

# The shared part of taugate's policy library as Gatekeeper sees a workload: Gatekeeper's input is the
# AdmissionReview's object (input.review.object) and the constraint's parameters, not taugate's
# precomputed policy input (policies/input.schema.json), so the pod templates, pods per template and
# GPUs per pod are derived here from the object, following the rules taugate/policy_input.py names:
# a Ray worker group counts max(KubeRay's clamp(replicas, minReplicas, maxReplicas), Kueue's
# replicas) x numOfHosts; a Job min(parallelism, completions) pods; GPUs per pod are the containers'
# nvidia.com/gpu (limit, else request) plus native sidecars' (KEP-753), or the largest regular init
# container's when that is larger.
package lib.taugate

obj := input.review.object

gpu_resource := "nvidia.com/gpu"

num(q) := n {
	is_number(q)
	n := q
} else := n {
	n := to_number(q)
} else := 0

container_gpus(c) := n {
	n := num(c.resources.limits[gpu_resource])
} else := n {
	n := num(c.resources.requests[gpu_resource])
} else := 0

is_sidecar(c) {
	c.restartPolicy == "Always"
}

gpus_per_pod(spec) := n {
	main := sum([container_gpus(c) | c := spec.containers[_]])
	sidecars := sum([container_gpus(c) | c := object.get(spec, "initContainers", [])[_]; is_sidecar(c)])
	inits := [container_gpus(c) | c := object.get(spec, "initContainers", [])[_]; not is_sidecar(c)]
	n := max(array.concat([main + sidecars], inits))
}

containers(spec, field) := [c |
	ct := spec.containers[i]
	c := {
		"name": ct.name, "field": sprintf("%s.spec.containers[%d]", [field, i]),
		"requests": object.get(object.get(ct, "resources", {}), "requests", {}),
		"limits": object.get(object.get(ct, "resources", {}), "limits", {}),
	}
]

template(role, group, field, tmpl, replicas, min_replicas, max_replicas) := t {
	spec := object.get(tmpl, "spec", {})
	t := {
		"role": role, "group": group, "field": field,
		"replicas": replicas, "minReplicas": min_replicas, "maxReplicas": max_replicas,
		"gpusPerPod": gpus_per_pod(spec), "containers": containers(spec, field),
		"nodeSelector": object.get(spec, "nodeSelector", {}),
		"affinity": object.get(spec, "affinity", {}),
		"podRequests": pod_requests(spec),
	}
}

# Pod-level resources (KEP-2837): the requests of spec.resources, a limit standing for a missing request.
pod_requests(spec) := object.union(object.get(object.get(spec, "resources", {}), "limits", {}), object.get(object.get(spec, "resources", {}), "requests", {}))

# The RayCluster spec of a RayJob or RayCluster and its field path.
ray_cluster := [obj.spec.rayClusterSpec, "spec.rayClusterSpec"] {
	obj.kind == "RayJob"
} else := [obj.spec, "spec"] {
	obj.kind == "RayCluster"
}

autoscaling {
	ray_cluster[0].enableInTreeAutoscaling == true
}

clamp(v, lo, hi) := min([max([v, lo]), hi])

pod_templates[t] {
	[cs, f] := ray_cluster
	t := template("head", "head", sprintf("%s.headGroupSpec.template", [f]), cs.headGroupSpec.template, 1, 1, 1)
}

pod_templates[t] {
	[cs, f] := ray_cluster
	g := cs.workerGroupSpecs[i]
	hosts := object.get(g, "numOfHosts", 1)
	r := object.get(g, "replicas", 1)
	lo := object.get(g, "minReplicas", 0)
	hi := object.get(g, "maxReplicas", 2147483647)
	pods := max([clamp(r, lo, hi), r]) * hosts
	most := hi * hosts
	t := template("worker", g.groupName, sprintf("%s.workerGroupSpecs[%d].template", [f, i]), g.template, pods, pods, most)
}

pod_templates[t] {
	obj.kind == "RayJob"
	t := template("submitter", "submitter", "spec.submitterPodTemplate", obj.spec.submitterPodTemplate, 1, 1, 1)
}

pod_templates[t] {
	obj.kind == "Job"
	p := object.get(obj.spec, "parallelism", 1)
	pods := min([p, object.get(obj.spec, "completions", p)])
	least := num(object.get(object.get(obj.metadata, "annotations", {}), "kueue.x-k8s.io/job-min-parallelism", pods))
	t := template("job", "job", "spec.template", obj.spec.template, pods, least, pods)
}

max_gpus_per_pod := max(array.concat([t.gpusPerPod | t := pod_templates[_]], [0]))

gpu_templates[t] {
	t := pod_templates[_]
	t.gpusPerPod > 0
}

# Workers: every template but the Ray head and the submitter (GPU ones when the profile has GPUs).
workers(p) := [t | t := pod_templates[_]; not t.role == "head"; not t.role == "submitter"; t.gpusPerPod > 0] {
	p.gpusPerWorker > 0
} else := [t | t := pod_templates[_]; not t.role == "head"; not t.role == "submitter"]

# The workload profile: the one the object's tau.azure.com/workload-profile label names, else the
# smallest of the workspace's (parameters.workspaceProfiles; parameters.profiles are in order of
# gpusPerWorker) whose gpusPerWorker holds the largest pod. taugate resolves it from the workspace's applicable profiles and the shape
# (taugate/profiles.py); Gatekeeper has no such resolution, so this is the nearest equivalent.
profile(params) := p {
	name := obj.metadata.labels["tau.azure.com/workload-profile"]
	p := params.profiles[_]
	p.name == name
} else := p {
	applicable := {n | n := params.workspaceProfiles[obj.metadata.namespace][_]}
	fitting := [q | q := params.profiles[_]; applicable[q.name]; q.gpusPerWorker >= max_gpus_per_pod]
	p := fitting[0]
}

describe(t) := sprintf("worker group %s", [t.group]) {
	t.role == "worker"
} else := "the Ray head" {
	t.role == "head"
} else := sprintf("the %s pod template", [t.role])

gpu_field(t) := sprintf("%s.spec.containers[*].resources.limits[\"nvidia.com/gpu\"]", [t.field])

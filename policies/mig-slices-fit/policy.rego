# mig-slices-fit: MIG slices, and every GPU device resource counted by name (shared GPUs, other
# vendors' GPUs: taugate/devices.py), are checked against the nodes and the queue that offer them.
#
# With the NVIDIA GPU operator's `mixed` MIG strategy a node advertises each slice size as its
# own extended resource (nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb, ...), never as
# nvidia.com/gpu. A pod asking for a slice size no node offers, or more slices than the
# largest node has, stays Pending forever (kube-scheduler NodeResourcesFit). Kueue admits a
# workload only when its ClusterQueue covers every resource it asks for ("resource %s
# unavailable in ClusterQueue", kueue pkg/scheduler/flavorassigner) and within nominalQuota +
# borrowingLimit. Slices per pod follow Kubernetes' pod request formula with native sidecars
# (KEP-753); input.object.mig and input.cluster.queue.mig hold the totals and the quota.
package taugate.policies.mig_slices_fit

import data.taugate.lib

name := "mig-slices-fit"

offered := concat(", ", object.keys(input.cluster.migResources)) if {
	count(input.cluster.migResources) > 0
} else := "none"

field(t, res) := f if {
	fields := [sprintf("%s.%s[\"%s\"]", [lib.resources_field(c), k, res]) |
		some c in t.containers
		some k in ["limits", "requests"]
		object.get(c[k], res, null) != null
	]
	f := fields[0]
} else := sprintf("%s.spec.containers", [t.field])

# No node offers the slice size.
deny contains lib.violation(name, field(t, res), msg) if {
	some t in input.object.podTemplates
	some res, n in t.migPerPod
	not input.cluster.migResources[res]
	msg := sprintf(
		"%s asks for %d %s per pod, but no node offers %s, so the pod can never be scheduled; allowed: the GPU device resources nodes offer (%s); fix: request one of those, or ask the platform team which GPU resources (MIG slice sizes, shared or other vendors' GPUs) the nodes offer",
		[lib.describe(t), n, res, res, offered],
	)
}

# More slices per pod than the largest node offering them has.
deny contains lib.violation(name, field(t, res), msg) if {
	some t in input.object.podTemplates
	some res, n in t.migPerPod
	s := input.cluster.migResources[res]
	n > s.maxPerNode
	msg := sprintf(
		"%s asks for %d %s per pod, but the largest node offering it has %d allocatable, so no node can ever hold the pod; allowed: at most %d per pod; fix: request at most %d %s per pod and use more pods instead",
		[lib.describe(t), n, res, s.maxPerNode, s.maxPerNode, s.maxPerNode, res],
	)
}

# The workspace's ClusterQueue has no quota for the slice size: Kueue never admits it.
deny contains lib.violation(name, field(t, res), msg) if {
	q := input.cluster.queue
	is_object(q)
	some t in input.object.podTemplates
	some res, _ in t.migPerPod
	object.get(q.mig, res, null) == null
	msg := sprintf(
		"%s asks for %s, but ClusterQueue %s behind LocalQueue %s has no quota for it (Kueue: \"resource %s unavailable in ClusterQueue\"), so Kueue would never admit the workload; allowed: the resources ClusterQueue %s covers (%s); fix: ask the platform team to add %s to the ClusterQueue's resource groups, or use whole GPUs",
		[lib.describe(t), res, q.clusterQueue, q.localQueue, res, q.clusterQueue, concat(", ", {x.resource | some x in q.quotas}), res],
	)
}

# More slices in total (at Kueue's minimum) than the queue can ever admit.
deny contains lib.violation(name, field(t, res), msg) if {
	some res, m in input.object.mig
	quota := input.cluster.queue.mig[res]
	is_number(quota.max)
	m.minTotal > quota.max
	t := [x | some x in input.object.podTemplates; object.get(x.migPerPod, res, 0) > 0][0]
	msg := sprintf(
		"the workload asks for %d %s in total, but ClusterQueue %s behind LocalQueue %s can admit at most %v (flavor %s: nominalQuota %v), so Kueue would never admit it; allowed: at most %v in total; fix: use fewer pods or fewer slices per pod, or request more quota with a TauQuotaRequest",
		[m.minTotal, res, input.cluster.queue.clusterQueue, input.cluster.queue.localQueue, quota.max, concat("+", quota.flavors), quota.nominal, quota.max],
	)
}

# requests-required: every container requests cpu and memory.
#
# Kueue charges a Workload's pods against the ClusterQueue quota by their resource requests
# (a missing request falls back to the limit, as Kubernetes does for pods); a container with
# neither counts as free, so a queue's cpu/memory quota stops meaning anything and the
# scheduler packs such pods onto full nodes. Regular containers only: init containers run
# before them and do not add up. Pod-level resources (KEP-2837, beta and on by default since
# Kubernetes 1.34) set the whole pod's request, which the scheduler and Kueue count instead, so a
# pod-level request covers its containers.
package taugate.policies.requests_required

import data.taugate.lib

name := "requests-required"

examples := {"cpu": "\"4\"", "memory": "\"16Gi\""}

deny contains lib.violation(name, field, msg) if {
	some t in input.object.podTemplates
	some c in t.containers
	some r in ["cpu", "memory"]
	not c.requests[r]
	not c.limits[r]
	not object.get(t, "podRequests", {})[r]
	c.kind == "containers"
	field := sprintf("%s.requests.%s", [lib.resources_field(c), r])
	msg := sprintf(
		"container %s of %s requests no %s, so Kueue counts it as free against the queue's %s quota and the scheduler may place it on a full node; allowed: every container requests cpu and memory; fix: set resources.requests.%s (for example %s)",
		[c.name, lib.describe(t), r, r, r, examples[r]],
	)
}

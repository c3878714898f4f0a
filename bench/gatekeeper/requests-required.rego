# requests-required (policies/requests-required): every container requests cpu and memory (a
# limit counts, as Kubernetes defaults the request to it; so does a pod-level request, KEP-2837);
# Kueue counts a container without them as free against the queue's quota.
package taugaterequestsrequired

import data.lib.taugate

violation[{"msg": msg, "details": {"field": field}}] {
	t := taugate.pod_templates[_]
	c := t.containers[_]
	r := ["cpu", "memory"][_]
	not c.requests[r]
	not c.limits[r]
	not t.podRequests[r]
	field := sprintf("%s.resources.requests.%s", [c.field, r])
	msg := sprintf("requests-required: container %s of %s requests no %s, so Kueue counts it as free against the queue's %s quota; allowed: every container requests cpu and memory; fix: set resources.requests.%s", [c.name, taugate.describe(t), r, r, r])
}

# workers-match-profile (policies/workers-match-profile): worker count equals workerCount (mode
# fixed) or stays within it (mode elastic, the autoscaler's maximum included).
package taugateworkersmatchprofile

import data.lib.taugate

now(p) := sum([t.replicas | t := taugate.workers(p)[_]])

violation[{"msg": msg, "details": {"field": "spec"}}] {
	p := taugate.profile(input.parameters)
	p.mode == "fixed"
	n := now(p)
	n > 0
	n != p.workerCount
	msg := sprintf("workers-match-profile: asks for %d workers; allowed: exactly %d under workload profile %s (mode fixed); fix: set the workers to %d", [n, p.workerCount, p.name, p.workerCount])
}

violation[{"msg": msg, "details": {"field": "spec"}}] {
	p := taugate.profile(input.parameters)
	p.mode == "elastic"
	n := now(p)
	n > p.workerCount
	msg := sprintf("workers-match-profile: asks for %d workers; allowed: at most %d under workload profile %s (mode elastic); fix: use at most %d workers", [n, p.workerCount, p.name, p.workerCount])
}

violation[{"msg": msg, "details": {"field": "spec"}}] {
	p := taugate.profile(input.parameters)
	taugate.autoscaling
	now(p) <= p.workerCount
	most := sum([t.maxReplicas | t := taugate.workers(p)[_]])
	most > p.workerCount
	msg := sprintf("workers-match-profile: lets the autoscaler grow to %d workers; allowed: at most %d under workload profile %s; fix: lower maxReplicas", [most, p.workerCount, p.name])
}

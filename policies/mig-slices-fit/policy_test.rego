package taugate.policies.mig_slices_fit

import data.taugate.lib.fixtures as fx

mig := "nvidia.com/mig-1g.10gb"

# mig_job(pods, slices): a vision Job whose pods ask only for `slices` MIG 1g.10gb slices, on a
# cluster with A100 nodes partitioned into 7 such slices and a queue holding 14 of them.
mig_job(pods, slices) := inp if {
	c := {"name": "main", "kind": "containers", "field": "spec.template.spec.containers[0]",
		"requests": {"cpu": "2", "memory": "8Gi", mig: sprintf("%d", [slices])},
		"limits": {"cpu": "2", "memory": "8Gi", mig: sprintf("%d", [slices])}, "gpus": 0}
	t := object.union(fx.job(pods, 0), {"migPerPod": {mig: slices}, "containers": [c]})
	base := fx.input_for("vision", "cpu-small", [t])
	inp := json.patch(base, [
		{"op": "replace", "path": "/object/mig", "value": {mig: {"total": pods * slices, "minTotal": pods * slices}}},
		{"op": "replace", "path": "/cluster/migResources", "value": {mig: {"name": mig, "maxPerNode": 7, "maxHealthyPerNode": 7, "nodes": 2, "healthyNodes": 2}}},
		{"op": "replace", "path": "/cluster/queue/mig", "value": {mig: {"flavors": ["a100-mig"], "nominal": 14, "borrowingLimit": 0, "usage": 0, "max": 14}}},
	])
}

test_slices_that_fit_a_node_and_the_queue_are_allowed if {
	count(deny) == 0 with input as mig_job(2, 7)
}

test_more_slices_than_any_node_has_is_denied_with_the_largest_node if {
	some v in deny with input as mig_job(1, 8)
	v.field == "spec.template.spec.containers[0].resources.limits[\"nvidia.com/mig-1g.10gb\"]"
	contains(v.msg, "asks for 8 nvidia.com/mig-1g.10gb per pod")
	contains(v.msg, "allowed: at most 7 per pod")
}

test_a_slice_size_no_node_offers_is_denied if {
	inp := json.patch(mig_job(1, 1), [{"op": "replace", "path": "/cluster/migResources", "value": {}}])
	some v in deny with input as inp
	contains(v.msg, "no node offers nvidia.com/mig-1g.10gb")
}

test_a_queue_without_quota_for_the_slice_is_denied_in_kueues_words if {
	inp := json.patch(mig_job(1, 1), [{"op": "replace", "path": "/cluster/queue/mig", "value": {}}])
	some v in deny with input as inp
	contains(v.msg, "resource nvidia.com/mig-1g.10gb unavailable in ClusterQueue")
}

test_more_slices_in_total_than_the_queue_admits_is_denied if {
	some v in deny with input as mig_job(3, 7)
	contains(v.msg, "asks for 21 nvidia.com/mig-1g.10gb in total")
	contains(v.msg, "at most 14")
}

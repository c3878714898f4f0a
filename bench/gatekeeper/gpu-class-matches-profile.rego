# gpu-class-matches-profile (policies/gpu-class-matches-profile): a pod template's nodeSelector or
# required node affinity names the profile's GPU class (label parameters.gpuClassLabel) and only
# GPU products that class has (the products from parameters.gpuClasses, frozen from the Nodes).
package taugategpuclassmatchesprofile

import data.lib.taugate

product_label := "nvidia.com/gpu.product"

class_label := input.parameters.gpuClassLabel

profile := taugate.profile(input.parameters)

products := {x | x := input.parameters.gpuClasses[profile.gpuClass].products[_]}

violation[{"msg": msg, "details": {"field": field}}] {
	t := taugate.pod_templates[_]
	asked := t.nodeSelector[class_label]
	is_string(profile.gpuClass)
	asked != profile.gpuClass
	field := sprintf("%s.spec.nodeSelector[\"%s\"]", [t.field, class_label])
	msg := sprintf("gpu-class-matches-profile: %s asks for GPU class %s; allowed: GPU class %s, where workload profile %s runs; fix: remove the selector or use a profile of class %s", [taugate.describe(t), asked, profile.gpuClass, profile.name, asked])
}

violation[{"msg": msg, "details": {"field": field}}] {
	t := taugate.pod_templates[_]
	asked := t.nodeSelector[product_label]
	is_string(profile.gpuClass)
	count(products) > 0
	not products[asked]
	field := sprintf("%s.spec.nodeSelector[\"%s\"]", [t.field, product_label])
	msg := sprintf("gpu-class-matches-profile: %s asks for GPU product %s; allowed: %v, the products of GPU class %s; fix: remove the selector", [taugate.describe(t), asked, products, profile.gpuClass])
}

conflicts(e, allowed) {
	e.operator == "In"
	count({v | v := e.values[_]; allowed[v]}) == 0
}

conflicts(e, allowed) {
	e.operator == "NotIn"
	count({v | allowed[v]; not in_values(e, v)}) == 0
}

conflicts(e, _) {
	e.operator == "DoesNotExist"
}

in_values(e, v) {
	e.values[_] == v
}

violation[{"msg": msg, "details": {"field": field}}] {
	t := taugate.pod_templates[_]
	term := t.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[i]
	e := term.matchExpressions[j]
	is_string(profile.gpuClass)
	e.key == class_label
	conflicts(e, {profile.gpuClass})
	field := sprintf("%s.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[%d].matchExpressions[%d]", [t.field, i, j])
	msg := sprintf("gpu-class-matches-profile: %s requires nodes with %s %s %v; allowed: GPU class %s, where workload profile %s runs; fix: remove this affinity term", [taugate.describe(t), e.key, e.operator, object.get(e, "values", []), profile.gpuClass, profile.name])
}

violation[{"msg": msg, "details": {"field": field}}] {
	t := taugate.pod_templates[_]
	term := t.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[i]
	e := term.matchExpressions[j]
	e.key == product_label
	is_string(profile.gpuClass)
	count(products) > 0
	conflicts(e, products)
	field := sprintf("%s.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[%d].matchExpressions[%d]", [t.field, i, j])
	msg := sprintf("gpu-class-matches-profile: %s requires nodes with %s %s %v; allowed: %v, the products of GPU class %s; fix: remove this affinity term", [taugate.describe(t), product_label, e.operator, object.get(e, "values", []), products, profile.gpuClass])
}

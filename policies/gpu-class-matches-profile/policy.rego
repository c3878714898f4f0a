# gpu-class-matches-profile: pod templates may not ask for another GPU class or GPU product
# than their workload profile's.
#
# The profile decides the GPU class (node label input.cluster.gpuClassLabel, e.g.
# tau.azure.com/gpu-class) and Kueue's ResourceFlavor charges quota for that class. A
# nodeSelector or a required node affinity that names another class, or a GPU Feature
# Discovery product (nvidia.com/gpu.product) that the class does not have, can never be
# scheduled together with the profile's placement.
package taugate.policies.gpu_class_matches_profile

import data.taugate.lib

name := "gpu-class-matches-profile"

product_label := "nvidia.com/gpu.product"

class_label := input.cluster.gpuClassLabel

# The GPU products of the profile's class (empty when unknown).
products := {p | some p in input.cluster.gpuClasses[input.profile.gpuClass].products}

# nodeSelector names another class.
deny contains lib.violation(name, field, msg) if {
	some t in input.object.podTemplates
	asked := t.nodeSelector[input.cluster.gpuClassLabel]
	asked != input.profile.gpuClass
	cls := input.profile.gpuClass
	is_string(cls)
	field := sprintf("%s.spec.nodeSelector[\"%s\"]", [t.field, class_label])
	msg := sprintf(
		"%s asks for GPU class %s (nodeSelector %s=%s); allowed: GPU class %s, where workload profile %s runs; fix: remove the selector (taugate sets %s=%s) or use a profile of class %s",
		[lib.describe(t), asked, class_label, asked, cls, input.profile.name, class_label, cls, asked],
	)
}

# nodeSelector names a GPU product the class does not have.
deny contains lib.violation(name, field, msg) if {
	some t in input.object.podTemplates
	asked := t.nodeSelector["nvidia.com/gpu.product"]
	cls := input.profile.gpuClass
	is_string(cls)
	count(products) > 0
	not asked in products
	field := sprintf("%s.spec.nodeSelector[\"%s\"]", [t.field, product_label])
	msg := sprintf(
		"%s asks for GPU product %s (nodeSelector %s); allowed: %s, the products of GPU class %s where workload profile %s runs; fix: remove the selector or set it to one of those products",
		[lib.describe(t), asked, product_label, concat(", ", products), cls, input.profile.name],
	)
}

# conflicts(e, allowed) holds when match expression e excludes every value in `allowed`.
conflicts(e, allowed) if {
	e.operator == "In"
	count({v | some v in e.values; v in allowed}) == 0
}

conflicts(e, allowed) if {
	e.operator == "NotIn"
	count({v | some v in allowed; not v in e.values}) == 0
}

conflicts(e, _) if e.operator == "DoesNotExist"

affinity_field(t, i, j) := sprintf(
	"%s.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[%d].matchExpressions[%d]",
	[t.field, i, j],
)

# A required node affinity expression on the class label excludes the profile's class.
deny contains lib.violation(name, affinity_field(t, i, j), msg) if {
	some t in input.object.podTemplates
	some i, term in t.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
	some j, e in term.matchExpressions
	e.key == input.cluster.gpuClassLabel
	cls := input.profile.gpuClass
	is_string(cls)
	conflicts(e, {cls})
	msg := sprintf(
		"%s requires nodes with %s %s %v; allowed: GPU class %s, where workload profile %s runs; fix: remove this affinity term (taugate places GPU pods on class %s) or use a profile of the class you need",
		[lib.describe(t), e.key, e.operator, object.get(e, "values", []), cls, input.profile.name, cls],
	)
}

# A required node affinity expression on the GPU product excludes every product of the class.
deny contains lib.violation(name, affinity_field(t, i, j), msg) if {
	some t in input.object.podTemplates
	some i, term in t.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
	some j, e in term.matchExpressions
	e.key == product_label
	cls := input.profile.gpuClass
	is_string(cls)
	count(products) > 0
	conflicts(e, products)
	msg := sprintf(
		"%s requires nodes with %s %s %v; allowed: %s, the products of GPU class %s where workload profile %s runs; fix: remove this affinity term or name one of those products",
		[lib.describe(t), product_label, e.operator, object.get(e, "values", []), concat(", ", products), cls, input.profile.name],
	)
}

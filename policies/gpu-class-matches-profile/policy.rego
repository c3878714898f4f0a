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
products := {p | some p in lib.profile_class_summary.products}

# nodeSelector names another class.
deny contains lib.violation(name, field, msg) if {
	cls := lib.profile_gpu_class
	some t in lib.templates
	asked := t.nodeSelector[class_label]
	asked != cls
	field := sprintf("%s.spec.nodeSelector[\"%s\"]", [t.field, class_label])
	msg := sprintf(
		"%s asks for GPU class %s (nodeSelector %s=%s), but workload profile %s runs on GPU class %s; fix: remove the selector (taugate sets %s=%s) or use a profile of class %s",
		[lib.describe(t), asked, class_label, asked, input.profile.name, cls, class_label, cls, asked],
	)
}

# nodeSelector names a GPU product the class does not have.
deny contains lib.violation(name, field, msg) if {
	cls := lib.profile_gpu_class
	count(products) > 0
	some t in lib.templates
	asked := t.nodeSelector[product_label]
	not asked in products
	field := sprintf("%s.spec.nodeSelector[\"%s\"]", [t.field, product_label])
	msg := sprintf(
		"%s asks for GPU product %s (nodeSelector %s), but workload profile %s runs on GPU class %s, whose nodes have %s; fix: remove the selector or set it to one of those products",
		[lib.describe(t), asked, product_label, input.profile.name, cls, concat(", ", products)],
	)
}

# Required node affinity: one matchExpression of one nodeSelectorTerm, with its field path.
expressions contains [t, field, e] if {
	some t in lib.templates
	terms := t.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
	some i, term in terms
	some j, e in term.matchExpressions
	field := sprintf(
		"%s.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[%d].matchExpressions[%d]",
		[t.field, i, j],
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

deny contains lib.violation(name, field, msg) if {
	cls := lib.profile_gpu_class
	some [t, field, e] in expressions
	e.key == class_label
	conflicts(e, {cls})
	msg := sprintf(
		"%s requires nodes with %s %s %v, but workload profile %s runs on GPU class %s; fix: remove this affinity term (taugate places GPU pods on class %s) or use a profile of the class you need",
		[lib.describe(t), class_label, e.operator, object.get(e, "values", []), input.profile.name, cls, cls],
	)
}

deny contains lib.violation(name, field, msg) if {
	cls := lib.profile_gpu_class
	count(products) > 0
	some [t, field, e] in expressions
	e.key == product_label
	conflicts(e, products)
	msg := sprintf(
		"%s requires nodes with %s %s %v, but workload profile %s runs on GPU class %s, whose nodes have %s; fix: remove this affinity term or name one of those products",
		[lib.describe(t), product_label, e.operator, object.get(e, "values", []), input.profile.name, cls, concat(", ", products)],
	)
}

package taugate.policies.pin_image_tags

review(image) := {"review": {"operation": "CREATE", "object": {"kind": "Job", "spec": {"template": {"spec": {
	"initContainers": [{"name": "fetch", "image": "busybox:1.36"}],
	"containers": [{"name": "trainer", "image": image}],
}}}}}}

test_a_released_tag_is_allowed if count(deny) == 0 with input as review("nvcr.io/nvidia/pytorch:24.05-py3")

test_a_digest_is_allowed if count(deny) == 0 with input as review("rayproject/ray@sha256:0123456789abcdef")

test_a_registry_port_is_not_a_tag if count(deny) == 1 with input as review("registry.local:5000/team/trainer")

test_latest_is_denied_naming_the_field if {
	some v in deny with input as review("rayproject/ray:latest")
	v.field == "spec.template.spec.containers[0].image"
	contains(v.msg, "rayproject/ray:latest")
}

test_no_tag_is_denied if count(deny) == 1 with input as review("python")

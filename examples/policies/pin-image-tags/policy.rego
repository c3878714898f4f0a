# pin-image-tags: every container runs an image pinned to a tag other than latest, or a digest.
#
# Kubernetes pulls an image without a tag as :latest and, for :latest, defaults imagePullPolicy
# to Always (k8s.io/kubernetes pkg/apis/core/v1/defaults.go SetDefaults_Container), so two pods
# of one run may start different code. The rule reads the whole object as the API server sent
# it (input.review.object), so it covers every container of every kind: Ray head and workers,
# the RayJob submitter, a Job's pods, init containers.
package taugate.policies.pin_image_tags

import data.taugate.lib

name := "pin-image-tags"

# field(path): a path from walk() as a Kubernetes field path: spec.template.spec.containers[0].image
field(path) := concat("", [step |
	some i, p in path
	step := part(i, p)
])

part(0, p) := p if is_string(p)

part(i, p) := sprintf(".%s", [p]) if {
	i > 0
	is_string(p)
}

part(_, p) := sprintf("[%d]", [p]) if is_number(p)

# tag(image): the tag after the last ":" of the last path segment (not a registry port).
tag(image) := t if {
	segments := split(image, "/")
	last := segments[count(segments) - 1]
	contains(last, ":")
	t := split(last, ":")[1]
}

pinned(image) if contains(image, "@sha256:")

pinned(image) if {
	not contains(image, "@")
	tag(image) != "latest"
}

deny contains lib.violation(name, field(path), msg) if {
	walk(input.review.object, [path, image])
	count(path) >= 3
	path[count(path) - 1] == "image"
	is_number(path[count(path) - 2])
	path[count(path) - 3] in {"containers", "initContainers", "ephemeralContainers"}
	is_string(image)
	not pinned(image)
	msg := sprintf("container image %q is not pinned: without a tag or with :latest, pods of one run may pull different code; allowed: an image with a tag other than latest, or a digest (@sha256:...); fix: set the image to a released tag, for example rayproject/ray:2.41.0", [image])
}

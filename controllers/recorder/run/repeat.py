"""What the evidence holds to repeat a run (pure): the image references of the admitted object's
pod templates, the digests its pods ran (``imageID``), and the workload profile as the
TauCluster's status resolved it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from taugate.access import as_dict, as_list
from taugate.kinds import kind_of


def template_images(obj: Mapping) -> list[dict]:
    """Every container of every pod template of ``obj`` (a registered kind; ``[]`` otherwise):
    ``{"template": <path of the template in the object>, "group", "container", "image"}`` plus
    ``"init": true`` for an init container, in template order. A malformed object gives what can
    be read."""
    kind = kind_of(dict(obj))
    if kind is None:
        return []
    try:
        templates = kind.pod_templates(dict(obj))
    except (TypeError, ValueError, AttributeError):
        return []
    out: list[dict] = []
    for t in templates:
        path = ".".join(str(p) for p in t.path)
        for list_name in ("initContainers", "containers"):
            for c in as_list(as_dict(t.spec).get(list_name)):
                if not isinstance(c, dict):
                    continue
                entry = {"template": path, "group": t.group, "container": c.get("name"), "image": c.get("image")}
                if list_name == "initContainers":
                    entry["init"] = True
                out.append({k: v for k, v in entry.items() if v is not None})
    return out


def pod_image_ids(pod: Mapping) -> dict[str, str]:
    """``{image: imageID}`` of ``pod``'s container statuses (init containers too) that report a
    digest (``imageID`` set by the kubelet once the image is pulled; empty before)."""
    status = as_dict(pod.get("status"))
    out: dict[str, str] = {}
    for list_name in ("initContainerStatuses", "containerStatuses"):
        for cs in as_list(status.get(list_name)):
            cs = as_dict(cs)
            image, image_id = cs.get("image"), cs.get("imageID")
            if isinstance(image, str) and image and isinstance(image_id, str) and image_id:
                out.setdefault(image, image_id)
    return out


def new_image_ids(pods: Sequence[Mapping], known: Mapping[str, str]) -> dict[str, str]:
    """The ``{image: imageID}`` of ``pods`` not in ``known`` yet (the ``images`` event's data;
    an image's first digest is kept)."""
    out: dict[str, str] = {}
    for p in pods:
        for image, image_id in pod_image_ids(p).items():
            if image not in known and image not in out:
                out[image] = image_id
    return out


def resolved_profile(cluster: Mapping | None, name: object, set_hash: object) -> dict | None:
    """The workload profile ``name`` as ``cluster``'s (the TauCluster's) status resolved it:
    ``{"name", "profile": <status.workloadProfiles.profiles entry>, "profileSetHash": <the
    status's>, "matchesAdmission": <that hash is the admission record's>}``; ``profile`` is None
    when the status does not list it. None without a profile name."""
    if not isinstance(name, str) or not name:
        return None
    wp = as_dict(as_dict(as_dict(cluster).get("status")).get("workloadProfiles"))
    found = next((p for p in as_list(wp.get("profiles")) if isinstance(p, dict) and p.get("name") == name), None)
    status_hash = wp.get("profileSetHash") if isinstance(wp.get("profileSetHash"), str) else None
    out: dict = {"name": name, "profile": found, "profileSetHash": status_hash,
                 "matchesAdmission": bool(status_hash) and status_hash == set_hash}
    if cluster is None:
        out["unavailable"] = "no TauCluster to read"
    return out

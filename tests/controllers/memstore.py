"""An in-memory object store that applies planned ``Action``s (test helper, pure Python).

It lets the pure reconcile functions be run to a fixed point without any API: plan, apply the
actions here with the API's semantics (create; JSON merge patch per RFC 7386 with ``None``
deleting a key and lists replaced whole; delete), observe again, plan again.
"""

from __future__ import annotations

import copy
from typing import Any

from taugate.controllers.resources import Action, Resource


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


class MemStore:
    """Objects by (kind, namespace, name)."""

    def __init__(self, objects: list[dict] = ()) -> None:
        self.objects: dict[tuple[str, str | None, str], dict] = {}
        for o in objects:
            self.put(o)

    @staticmethod
    def key_of(obj: dict) -> tuple[str, str | None, str]:
        m = obj.get("metadata") or {}
        return obj["kind"], m.get("namespace"), m["name"]

    def put(self, obj: dict) -> None:
        self.objects[self.key_of(obj)] = copy.deepcopy(obj)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        o = self.objects.get((kind, namespace, name))
        return copy.deepcopy(o) if o is not None else None

    def all(self, kind: str) -> list[dict]:
        return [copy.deepcopy(o) for (k, _, _), o in sorted(self.objects.items(), key=lambda i: str(i[0])) if k == kind]

    def apply(self, actions: list[Action]) -> None:
        for a in actions:
            res: Resource = a.resource
            ns = a.namespace if res.namespaced else None
            key = (res.kind, ns, a.name)
            if a.verb == "create":
                assert key not in self.objects, f"create of an existing {key}"
                self.objects[key] = dict(copy.deepcopy(a.body), kind=res.kind, apiVersion=res.api_version)
            elif a.verb == "patch":
                assert key in self.objects, f"patch of a missing {key}"
                self.objects[key] = merge(self.objects[key], a.body)
            elif a.verb == "delete":
                self.objects.pop(key, None)

    # The ``taugate.kube.Kube`` reading/writing interface, so the observe_*/reconcile_*
    # functions run against this store unchanged.
    def kube_get(self, res: Resource, name: str, namespace: str | None = None) -> dict | None:
        return self.get(res.kind, name, namespace if res.namespaced else None)

    def kube_list(self, res: Resource, namespace: str | None = None) -> list[dict]:
        return [o for o in self.all(res.kind)
                if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace]


class MemKube:
    """``taugate.kube.Kube``'s interface over a ``MemStore`` (counts writes like Kube)."""

    def __init__(self, store: MemStore, forbidden: set[str] = frozenset()) -> None:
        self.store = store
        self.writes = 0
        self.forbidden = set(forbidden)  # kinds whose writes the "API" refuses with HTTP 403 (RBAC)

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict | None:
        return self.store.kube_get(res, name, namespace)

    def list(self, res: Resource, namespace: str | None = None, labels: dict | None = None) -> list[dict]:
        return self.store.kube_list(res, namespace)

    def _write(self, action: Action) -> None:
        from taugate.kube import KubeError

        self.writes += 1
        if action.resource.kind in self.forbidden:
            raise KubeError(403, f"{action.resource.plural} is forbidden: User cannot {action.verb} resource")
        self.store.apply([action])

    def create(self, res: Resource, obj: dict, *, exist_ok: bool = True) -> None:
        from taugate.kube import KubeError

        meta = obj.get("metadata") or {}
        if self.store.kube_get(res, meta.get("name", ""), meta.get("namespace")) is not None:
            if exist_ok:
                return
            raise KubeError(409, f"{res.plural} {meta.get('name')!r} already exists")
        self._write(Action("create", res, meta.get("name", ""), meta.get("namespace"), obj))

    def patch(self, res: Resource, name: str, body: dict, namespace: str | None = None,
              subresource: str | None = None) -> None:
        self._write(Action("patch", res, name, namespace, body, subresource))

    def delete(self, res: Resource, name: str, namespace: str | None = None) -> None:
        self._write(Action("delete", res, name, namespace))

"""Kubernetes API I/O: ``Kube`` reads and writes plain JSON dicts as the API serves them, over the
``kubernetes`` client's ``ApiClient`` (configuration, authentication, TLS, connection pool). Writes
are JSON merge patches (RFC 7386), never PUT, so a field another controller owns is left alone.
``check_reachable`` is the commands' one-line preflight (kopf would retry for a minute).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
import yaml
from kubernetes.client import ApiClient, ApiException

from taugate.kubeaccess import (
    KubeConfigError,
    KubeError,
    KubeUnreachable,
    Resource,
    WatchExpired,
    connection_reason,
    kubeconfig_problem,
)

__all__ = ["CredentialsRefresh", "Kube", "KubeConfigError", "KubeError", "KubeUnreachable", "WatchExpired",
           "check_reachable", "load_configuration"]

log = logging.getLogger("taugate.kube")
Obj = dict[str, Any]  # a Kubernetes object (or a part of one) as the API serves it

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def load_configuration(*, in_cluster: bool | None = False, kubeconfig: str | None = None,
                       context: str | None = None) -> kubernetes.client.Configuration:
    """The pod's service account (``in_cluster``), else the kubeconfig (``kubeconfig``,
    ``$KUBECONFIG`` or ``~/.kube/config``) and ``context``; ``in_cluster=None`` picks the
    kubeconfig when one is named or exists. Raises ``KubeConfigError`` naming source and problem."""
    cfg = kubernetes.client.Configuration()
    if not in_cluster:
        # The kubernetes client reads $KUBECONFIG once, at import; read it now, and name the file
        # when it is missing (the client only says "No configuration found").
        if kubeconfig:
            spec, origin = kubeconfig, None
        elif os.environ.get("KUBECONFIG"):
            spec, origin = os.environ["KUBECONFIG"], "$KUBECONFIG"
        else:
            spec, origin = "~/.kube/config", "the default kubeconfig"
        problem = kubeconfig_problem(spec, origin)
        if problem and in_cluster is None and not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            in_cluster = True
        elif problem:
            raise KubeConfigError(problem)
        else:
            kubeconfig = kubeconfig or spec
    try:
        if in_cluster:
            kubernetes.config.load_incluster_config(client_configuration=cfg)
        else:
            kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg,
                                               persist_config=False)
    except kubernetes.config.ConfigException as e:
        source = "in-cluster service account" if in_cluster else (kubeconfig or "default kubeconfig")
        raise KubeConfigError(f"{source}: {str(e).splitlines()[0] if str(e) else e.__class__.__name__}") from None
    except FileNotFoundError as e:
        raise KubeConfigError(f"{kubeconfig or e.filename}: no such file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise KubeConfigError(f"{kubeconfig or 'default kubeconfig'}: invalid YAML{where}: "
                              f"{getattr(e, 'problem', None) or e.__class__.__name__}") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:  # malformed fields
        raise KubeConfigError(f"{kubeconfig or 'default kubeconfig'}: cannot load: {e.__class__.__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
    if not in_cluster:
        impersonated = _impersonation(str(kubeconfig), context)
        if impersonated:
            raise KubeConfigError(
                f"{kubeconfig}: the user of the context impersonates ({impersonated}), which taugate's client does "
                f"not do, so it would ask as the kubeconfig's own credentials instead; use a kubeconfig with the "
                f"credentials of the user to ask as")
    own = getattr(cfg, "refresh_api_key_hook", None)
    if own is not None:  # a token that changes, refreshed by the client's own hook (a closure)
        if not in_cluster and context is None:  # the context it was loaded from, not the file's next current one
            with contextlib.suppress(Exception):
                context = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)[1]["name"]
        hook: Any = CredentialsRefresh(own, bool(in_cluster), kubeconfig, context)
        cfg.refresh_api_key_hook = hook
    return cfg


class CredentialsRefresh:
    """A configuration's ``refresh_api_key_hook`` that can be pickled (the configuration starts the
    recorder's process, ``controllers/beside.py``). In its process it calls the kubernetes client's
    own hook, a closure: the in-cluster one re-reads the service account token once a minute, a
    kubeconfig's runs its exec plugin or refreshes its OIDC token when the token expires. Pickled,
    it keeps only where the configuration came from (the service account, or the kubeconfig and
    the context it was loaded from); its first call in the new process loads that again, once, for
    a hook of the client's own there, and takes nothing from it unless it is for the same API
    server. A refresh that fails keeps the token there is (logged; the API server's 401 says when
    it no longer works). Serialised: the client's hooks keep state without a lock."""

    def __init__(self, own: Callable[[Any], None] | None, in_cluster: bool, kubeconfig: str | None,
                 context: str | None) -> None:
        self.own = own
        self.in_cluster, self.kubeconfig, self.context = in_cluster, kubeconfig, context
        self._lock = threading.Lock()
        self._retry_at = 0.0  # after a failed load, not again for a minute (the hook runs per request)

    def __reduce__(self) -> tuple[Any, ...]:
        return CredentialsRefresh, (None, self.in_cluster, self.kubeconfig, self.context)

    def __call__(self, cfg: kubernetes.client.Configuration) -> None:
        with self._lock:
            try:
                if self.own is None:
                    if time.monotonic() < self._retry_at:
                        return
                    self._retry_at = time.monotonic() + 60.0
                    fresh = load_configuration(in_cluster=self.in_cluster, kubeconfig=self.kubeconfig,
                                               context=self.context)
                    if fresh.host != cfg.host:
                        raise KubeConfigError(f"it now names the API server {fresh.host}, not {cfg.host}")
                    loaded: Any = fresh.refresh_api_key_hook
                    self.own = loaded.own
                try:
                    self.own(cfg)
                finally:
                    again: Any = self
                    cfg.refresh_api_key_hook = again  # the client's hook sets itself there again each time
            except Exception as e:  # an exec plugin or an OIDC provider failing, a file gone
                source = "the service account" if self.in_cluster else f"{self.kubeconfig} ({self.context})"
                log.warning("cannot refresh the API token from %s (%s): the current one is kept", source,
                            f"{e.__class__.__name__}: {e}")


def _impersonation(kubeconfig: str, context: str | None) -> str | None:
    """The impersonation fields (``as``, ``as-groups``, ``as-uid``, ``as-user-extra``, as kubectl
    reads them from client-go's ``AuthInfo``) of the user of ``context`` (default: the current
    context) in ``kubeconfig`` (a ``:``-separated list, merged as kubectl merges it), or None."""
    from kubernetes.config.kube_config import KubeConfigMerger

    merged = KubeConfigMerger(kubeconfig).config

    def field(node: Any, key: str) -> Any:
        return node.safe_get(key) if hasattr(node, "safe_get") else (node or {}).get(key)

    wanted = context or field(merged, "current-context")
    ctx = next((c for c in field(merged, "contexts") or [] if field(c, "name") == wanted), None)
    user_name = field(field(ctx, "context"), "user")
    user = next((field(u, "user") for u in field(merged, "users") or [] if field(u, "name") == user_name), None)
    found = [f"{k}: {field(user, k)}" for k in ("as", "as-groups", "as-uid", "as-user-extra") if field(user, k)]
    return ", ".join(found) or None


PREFLIGHT_TIMEOUT = 5.0


def check_reachable(cfg: kubernetes.client.Configuration, timeout: float = PREFLIGHT_TIMEOUT) -> Obj:
    """One ``GET /version`` with ``timeout`` seconds and no retries; the version document or ``{}``.

    Raises ``KubeUnreachable`` when the server is not reached, ``KubeError`` (401) when it rejects
    the credentials; any other answer means the server is there (``/version`` is readable by every
    client: Kubernetes RBAC ``system:public-info-viewer``)."""
    probe = copy.deepcopy(cfg)
    probe.retries = 0
    kube = Kube.from_configuration(probe, request_timeout=(timeout, timeout))
    try:
        try:
            data = kube._json("GET", "/version")
        except KubeUnreachable:
            raise
        except KubeError as e:
            if e.status == 401:
                raise KubeError(401, f"the Kubernetes API at {cfg.host} rejected the credentials: {e}") from None
            return {}
    finally:
        kube.close()
    return data if isinstance(data, dict) else {}


def _error_message(status: int, body: bytes | str | None, fallback: str, *, whole: bool = False) -> str:
    try:
        data = json.loads(body or b"")
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"]) if whole else str(data["message"]).splitlines()[0]
    except (ValueError, TypeError):
        pass
    return fallback


def warnings_of(headers: list[str]) -> list[str]:
    """The texts of HTTP ``Warning`` headers as the API server sends them (RFC 7234 section 5.5:
    ``299 - "text"``, one header per warning, ``"`` and ``\\`` escaped), as kubectl prints them."""
    out = []
    for header in headers:
        code, _, rest = header.partition(" ")
        _, _, quoted = rest.partition(" ")
        if code.isdigit() and quoted.startswith('"') and quoted.endswith('"') and len(quoted) >= 2:
            out.append(re.sub(r'\\(.)', r"\1", quoted[1:-1]))
        else:
            out.append(header)
    return out


class WatchFeed(Protocol):
    """Where ``Kube.follow`` delivers what it reads: ``listed`` (a whole list, replacing what was
    known), ``changed`` (one ADDED, MODIFIED or DELETED object), ``up`` (current again; the
    streaming response of a new watch, or None after a list: its ``shutdown()`` ends the watch at
    once) and ``down`` (the watch dropped; ``follow`` lists or resumes next)."""

    def listed(self, items: list[Obj]) -> None: ...

    def changed(self, event_type: str, obj: Obj) -> None: ...

    def up(self, response: Any) -> None: ...

    def down(self) -> None: ...


DryRun = tuple[Obj, list[str]]
"""The object the API server would store, and its warnings."""


class Kube:
    """Plain-dict CRUD and watch over ``kubernetes.client.ApiClient``.

    ``request_timeout``: (connect, read) seconds. ``writes`` counts create, patch and delete requests.
    """

    def __init__(self, api_client: ApiClient, *, request_timeout: tuple[float, float] = (5.0, 30.0)):
        self.api = api_client
        self.request_timeout = request_timeout
        self.writes = 0
        self._lock = threading.Lock()

    @classmethod
    def from_configuration(cls, cfg: kubernetes.client.Configuration, **kwargs: Any) -> Kube:
        return cls(ApiClient(cfg), **kwargs)

    def close(self) -> None:
        self.api.close()

    def _call(self, method: str, path: str, *, query: list[tuple[str, Any]] | None = None,
              body: Any = None, content_type: str = "application/json",
              timeout: tuple[float, float] | None = None, whole_message: bool = False,
              accept: str = "application/json") -> Any:
        """One request; returns the raw ``RESTResponse`` (body not yet read). An error's message is
        the first line of the API's Status message, or all of it with ``whole_message``."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            method_, url, hdrs, data, _ = self.api.param_serialize(
                method=method, resource_path=path, query_params=query or [], header_params=headers,
                body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(method_, url, header_params=hdrs, body=data,
                                     _request_timeout=timeout or self.request_timeout)
        except ApiException as e:
            raise KubeError(e.status or 0,
                            _error_message(e.status or 0, e.body, f"{method} {path}: {e.reason}")) from None
        except urllib3.exceptions.HTTPError as e:  # refused, timed out, DNS, TLS
            raise KubeUnreachable(self.api.configuration.host, connection_reason(e)) from None
        except Exception as e:
            first = str(e).splitlines()[0] if str(e) else ""
            raise KubeError(0, f"{method} {path}: {e.__class__.__name__}: {first}") from None
        if resp.status >= 400:
            body_bytes = resp.read()
            raise (WatchExpired if resp.status == 410 else KubeError)(
                resp.status, _error_message(resp.status, body_bytes,
                                            f"{method} {path}: HTTP {resp.status} {resp.reason}", whole=whole_message),
                tuple(warnings_of(resp.getheaders().get_all("Warning") or [])))
        return resp

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self._call(method, path, **kwargs)
        data = resp.read()
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            raise KubeError(resp.status, f"{method} {path}: the answer is not JSON") from None

    def _count_write(self) -> None:
        with self._lock:
            self.writes += 1

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """None when the object does not exist (HTTP 404)."""
        try:
            obj = self._json("GET", res.path(namespace, name))
        except KubeError as e:
            if e.status == 404:
                return None
            raise
        return obj if isinstance(obj, dict) else None

    def list_with_version(self, res: Resource, namespace: str | None = None) -> tuple[list[Obj], str | None]:
        """The objects and the list's resourceVersion."""
        data = self._json("GET", res.path(namespace)) or {}
        items = [dict(i, apiVersion=i.get("apiVersion") or res.api_version, kind=i.get("kind") or res.kind)
                 for i in data.get("items") or [] if isinstance(i, dict)]
        return items, (data.get("metadata") or {}).get("resourceVersion")

    def list_pages(self, res: Resource, namespace: str | None = None, *, limit: int = 500) -> Iterator[list[Obj]]:
        """The API's chunked list (``limit`` and ``continue``, apimachinery ``ListOptions``), as
        Gatekeeper's audit pages its lists (``--audit-chunk-size``). Raises ``WatchExpired`` on
        HTTP 410 when the token expired (list again)."""
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", limit)] + ([("continue", token)] if token else [])
            data = self._json("GET", res.path(namespace), query=query) or {}
            yield [dict(i, apiVersion=i.get("apiVersion") or res.api_version, kind=i.get("kind") or res.kind)
                   for i in data.get("items") or [] if isinstance(i, dict)]
            token = (data.get("metadata") or {}).get("continue") or None
            if not token:
                return

    def list(self, res: Resource, namespace: str | None = None,
             labels: dict[str, str] | None = None) -> list[Obj]:
        """``labels`` are filtered here too, so a server that ignores ``labelSelector`` gives the
        same answer."""
        if labels:
            sel = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            data = self._json("GET", res.path(namespace), query=[("labelSelector", sel)]) or {}
            items = [dict(i, apiVersion=i.get("apiVersion") or res.api_version, kind=i.get("kind") or res.kind)
                     for i in data.get("items") or [] if isinstance(i, dict)]
        else:
            items, _ = self.list_with_version(res, namespace)
        if labels:
            items = [i for i in items
                     if all(((i.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in labels.items())]
        if namespace and res.namespaced:
            items = [i for i in items if (i.get("metadata") or {}).get("namespace") in (None, namespace)]
        return items

    def create(self, res: Resource, obj: Obj, *, exist_ok: bool = True) -> Obj | None:
        """With ``exist_ok``, an existing object (HTTP 409) is no error: it is returned instead
        (a later reconcile reconciles it)."""
        ns = (obj.get("metadata") or {}).get("namespace") if res.namespaced else None
        body = dict(obj, apiVersion=res.api_version, kind=res.kind)
        self._count_write()
        try:
            return self._json("POST", res.path(ns), body=body)
        except KubeError as e:
            if e.status == 409 and exist_ok:
                return self.get(res, (obj.get("metadata") or {}).get("name", ""), ns)
            raise

    def patch(self, res: Resource, name: str, body: Obj, namespace: str | None = None,
              subresource: str | None = None) -> Obj | None:
        """JSON merge patch (RFC 7386)."""
        self._count_write()
        return self._json("PATCH", res.path(namespace, name, subresource), body=body, content_type=MERGE_PATCH)

    def json_patch(self, res: Resource, name: str, ops: Sequence[Obj], namespace: str | None = None) -> Obj | None:
        """JSON patch (RFC 6902): all ``ops`` or none (a failed ``test`` op is a 422 that changes
        nothing)."""
        self._count_write()
        return self._json("PATCH", res.path(namespace, name), body=ops, content_type=JSON_PATCH)

    def pod_log(self, namespace: str, name: str, *, container: str | None = None, tail_lines: int,
                previous: bool = False) -> str:
        """The last ``tail_lines`` lines (``container``, or the pod's only or default one; its
        previous instance's with ``previous``)."""
        query: list[tuple[str, Any]] = [("tailLines", tail_lines)] + ([("container", container)] if container else [])
        if previous:
            query.append(("previous", "true"))
        resp = self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log", query=query,
                          timeout=(self.request_timeout[0], 15.0), accept="text/plain, application/json")
        return resp.read().decode("utf-8", "replace")

    def dry_run(self, res: Resource, obj: Obj, *, field_manager: str = "taugate-admit") -> DryRun:
        """A server-side dry run (``dryRun=All``: authentication, RBAC, every admission webhook and
        policy run, apimachinery ``DryRun``), as ``kubectl apply --server-side --force-conflicts
        --dry-run=server`` sends a named object and ``kubectl create --dry-run=server`` one with
        only a ``generateName``. Raises ``KubeError`` (a denial: HTTP 403 or 422 with its message)."""
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") if res.namespaced else None
        body = dict(obj, apiVersion=res.api_version, kind=res.kind)
        query = [("dryRun", "All"), ("fieldManager", field_manager)]
        if meta.get("name"):
            resp = self._call("PATCH", res.path(ns, meta["name"]), query=[*query, ("force", "true")],
                              body=json.dumps(body), content_type=APPLY_PATCH, whole_message=True)
        else:
            resp = self._call("POST", res.path(ns), query=query, body=body, whole_message=True)
        data = json.loads(resp.read() or b"{}")
        return (data if isinstance(data, dict) else {}), warnings_of(resp.getheaders().get_all("Warning") or [])

    def delete(self, res: Resource, name: str, namespace: str | None = None) -> bool:
        """Background propagation; False when the object was already gone."""
        self._count_write()
        try:
            self._json("DELETE", res.path(namespace, name),
                       body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    def follow(self, res: Resource, feed: WatchFeed, stopping: threading.Event, *, timeout_seconds: int = 300,
               optional: bool = False) -> None:
        """Keep ``feed`` current with ``res`` (all namespaces) until ``stopping`` is set: list, then
        watch from the list's resourceVersion; when the server ends a watch (``timeout_seconds``),
        resume from the last resourceVersion seen; on HTTP 410 Gone list again (apimachinery's
        "resourceVersion too old", as client-go's reflector does); on any other error wait 1 s,
        doubling to 30 s, and list again. ``optional``: an API the cluster may not serve (HTTP 404
        on the first list) gives an empty list and ends. Blocks: run it on its own thread."""
        backoff, rv, need_list, served = 1.0, None, True, True
        while served and not stopping.is_set():
            try:
                if need_list:
                    items, rv = self.list_with_version(res)
                    feed.listed(items)
                    feed.up(None)
                    need_list = False
                for event in self.watch(res, resource_version=rv, timeout_seconds=timeout_seconds, on_open=feed.up):
                    if stopping.is_set():
                        break
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        feed.changed(event["type"], obj)
                backoff = 1.0
            except WatchExpired:
                need_list = True
            except KubeError as e:
                if stopping.is_set():
                    break
                if e.status == 404 and optional and need_list:
                    log.info("%s is not served by this cluster: no %s objects", res, res.kind)
                    feed.listed([])
                    feed.up(None)
                    served = False
                    continue
                log.warning("watch of %s failed (%s); relisting in %.0f s", res, e, backoff)
                need_list = True
                stopping.wait(backoff)
                backoff = min(30.0, backoff * 2)
            finally:
                if served and not stopping.is_set():
                    feed.down()

    def watch(self, res: Resource, *, resource_version: str | None = None, timeout_seconds: int = 300,
              on_open: Callable[[Any], None] | None = None) -> Iterator[Obj]:
        """Watch events (``{"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": ...}``) of ``res``
        in all namespaces until the server ends the watch after ``timeout_seconds`` (the iterator
        then ends normally).

        ``on_open(response)`` receives the streaming urllib3 response, so another thread can end
        the watch at once with ``response.shutdown()``. Raises ``WatchExpired`` on HTTP 410 (also
        when it arrives as an ERROR event) and ``KubeError`` on other errors."""
        query: list[tuple[str, Any]] = [("watch", "true"), ("allowWatchBookmarks", "true"),
                                        ("timeoutSeconds", str(int(timeout_seconds)))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        resp = self._call("GET", res.path(), query=query,
                          timeout=(self.request_timeout[0], float(timeout_seconds) + 15.0))
        raw = resp.response
        if on_open is not None:
            on_open(raw)
        buf = b""
        try:
            for chunk in raw.stream(16 * 1024, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    event = self._decode_event(line)
                    if event is not None:
                        yield event
            event = self._decode_event(buf)
            if event is not None:
                yield event
        except (KubeError, GeneratorExit):
            raise
        except Exception as e:  # connection closed / shut down / read timeout
            raise KubeError(0, f"watch {res}: {e.__class__.__name__}") from None
        finally:
            raw.release_conn()

    @staticmethod
    def _decode_event(line: bytes) -> Obj | None:
        line = line.strip()
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError:
            return None
        if not isinstance(event, dict):
            return None
        if event.get("type") == "ERROR":
            obj = event.get("object") or {}
            code = int(obj.get("code") or 0)
            raise (WatchExpired if code == 410 else KubeError)(code, str(obj.get("message") or "watch error"))
        return event

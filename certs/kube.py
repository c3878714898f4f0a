"""The webhook's certificates in the cluster: the TLS Secret and the configurations' ``caBundle``
(``taugate certs sync``, run by the chart's hook Jobs and renewal CronJob). One idempotent step per
run, with at most one trust change: a new CA is published ``renew_before`` its expiry and served
only ``switch_after`` later (``tau.azure.com/ca-published-at``), once kubelet has synced the Secret
(within about a minute) and the API server has the new ``caBundle``. The Secret is merge-patched
with its ``resourceVersion``, so a concurrent writer fails (409) instead of losing an update.
"""

from __future__ import annotations

import base64
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from taugate import labels
from taugate.certs import bundle
from taugate.certs.bundle import CertSet, CertStatus
from taugate.certs.pki import DEFAULT_SERVING_DAYS, CertError, service_dns_names
from taugate.kube import Kube
from taugate.kubeaccess import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, Resource

DEFAULT_RENEW_BEFORE = _dt.timedelta(days=30)
DEFAULT_SWITCH_AFTER = _dt.timedelta(minutes=10)


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _stamp(t: _dt.datetime) -> str:
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_stamp(text: str | None) -> _dt.datetime | None:
    if not text:
        return None
    try:
        return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class Plan:
    """What one sync run should store: ``certs`` (the set), ``published_at`` (None outside a
    rotation), ``actions`` (what changed, or why nothing did), ``changed``."""

    certs: CertSet
    published_at: _dt.datetime | None
    actions: tuple[str, ...]
    changed: bool


def plan(current: CertSet | None, *, published_at: _dt.datetime | None, service: str, namespace: str,
         days: int = DEFAULT_SERVING_DAYS, renew_before: _dt.timedelta = DEFAULT_RENEW_BEFORE,
         switch_after: _dt.timedelta = DEFAULT_SWITCH_AFTER, now: _dt.datetime | None = None,
         where=str) -> Plan:
    """Decide one sync step (pure). The rules, in order: no set: create one; a rotation pending
    for ``switch_after``: switch; the CA due within ``renew_before``: publish; the serving
    certificate due or not naming the Service: reissue (then ``sync`` always sets every webhook's
    ``caBundle``). New certificates are valid ``days`` days. ``CertError`` (naming the item through
    ``where``) when ``current`` is unusable: a broken Secret is never silently replaced, since
    replacing the CA breaks every client that trusts it."""
    now = now or _now()
    hosts = service_dns_names(service, namespace)
    if current is None:
        cs = bundle.create(service=service, namespace=namespace, extra_hosts=(), ca_days=days, days=days, now=now)
        return Plan(cs, None, ("created a CA and a serving certificate for " + hosts[2],), True)
    st = bundle.check(current, where)
    if st.pending is not None:
        if published_at is not None and now - published_at < switch_after:
            ready = _stamp(published_at + switch_after)
            return Plan(current, published_at, (f"rotation pending: the new CA was published at "
                                                f"{_stamp(published_at)}; the serving certificate switches "
                                                f"from {ready}",), False)
        cs = bundle.switch(current, days=days, now=now, where=where)
        return Plan(cs, None, ("switched the serving certificate to the new CA",), True)
    if st.issuer.not_valid_after_utc - now < renew_before:
        cs = bundle.publish(current, ca_days=days, now=now, where=where)
        return Plan(cs, now, (f"published a new CA next to the one expiring "
                              f"{_stamp(st.issuer.not_valid_after_utc)}",), True)
    missing = [h for h in hosts if h not in st.hosts]
    if missing or st.serving.not_valid_after_utc - now < renew_before:
        cs = bundle.reissue(current, hosts, days=days, now=now, where=where)
        why = f"it did not name {', '.join(missing)}" if missing else \
            f"it expires {_stamp(st.serving.not_valid_after_utc)}"
        return Plan(cs, None, (f"issued a new serving certificate from the current CA ({why})",), True)
    return Plan(current, published_at, (f"certificates valid until {_stamp(st.expires)}; nothing to renew",), False)


@dataclass
class SyncResult:
    """``actions``: one line per change or decision; ``status``: the stored set, checked;
    ``ca_bundle``: its ``ca.crt`` (PEM)."""

    actions: list[str] = field(default_factory=list)
    status: CertStatus | None = None
    ca_bundle: bytes = b""


def _decode(secret: dict, where) -> tuple[dict[str, bytes | None], _dt.datetime | None]:
    items: dict[str, bytes | None] = {}
    for name in bundle.ITEMS:
        value = (secret.get("data") or {}).get(name)
        try:
            items[name] = base64.b64decode(value, validate=True) if value else None
        except ValueError:
            raise CertError(f"{where(name)}: not base64") from None
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    return items, _parse_stamp(annotations.get(labels.CA_PUBLISHED_AT))


def _encode(cs: CertSet) -> dict[str, bytes | str]:
    return {k: base64.b64encode(v).decode() for k, v in cs.items().items()}


def sync(kube: Kube, *, secret: str, namespace: str, service: str,
         days: int = DEFAULT_SERVING_DAYS, renew_before: _dt.timedelta = DEFAULT_RENEW_BEFORE,
         switch_after: _dt.timedelta = DEFAULT_SWITCH_AFTER, mutating: str | None = None,
         validating: str | None = None, now: _dt.datetime | None = None) -> SyncResult:
    """One sync run against the API server behind ``kube``.

    Raises ``CertError`` when the Secret holds an unusable set (nothing is written), and
    ``taugate.kube.KubeError`` for API errors (403, 409 on a concurrent create or update, ...)."""

    def where(item: str) -> str:
        return f"Secret {namespace}/{secret} key {item}"

    result = SyncResult()
    stored = kube.get(SECRETS, secret, namespace)
    current, published_at = None, None
    if stored is not None:
        items, published_at = _decode(stored, where)
        current = CertSet.from_items(items, where)
    p = plan(current, published_at=published_at, service=service, namespace=namespace, days=days,
             renew_before=renew_before, switch_after=switch_after, now=now, where=where)
    result.actions += p.actions
    if stored is None:
        kube.create(SECRETS, {"type": "kubernetes.io/tls", "data": _encode(p.certs), "metadata": {
            "name": secret, "namespace": namespace, "labels": {labels.MANAGED_BY: labels.MANAGED_BY_VALUE}}},
            exist_ok=False)  # another sync's CA: never overwritten, never trusted in its place
    elif p.changed:
        data: dict[str, Any] = _encode(p.certs)
        for item in bundle.ITEMS:
            data.setdefault(item, None)  # merge patch: null removes ca-next.key
        published = _stamp(p.published_at) if p.published_at else None
        meta: dict[str, Any] = {"annotations": {labels.CA_PUBLISHED_AT: published}}
        rv = (stored.get("metadata") or {}).get("resourceVersion")
        if rv:
            meta["resourceVersion"] = rv
        kube.patch(SECRETS, secret, {"metadata": meta, "data": data}, namespace)
    result.status = bundle.check(p.certs, where)
    result.ca_bundle = p.certs.ca_bundle
    for res, name in ((MUTATING_WEBHOOK_CONFIGURATIONS, mutating), (VALIDATING_WEBHOOK_CONFIGURATIONS, validating)):
        if name:
            result.actions.append(_sync_ca_bundle(kube, res, name, p.certs.ca_bundle))
    return result


def _sync_ca_bundle(kube: Kube, res: Resource, name: str, ca_bundle: bytes) -> str:
    config = kube.get(res, name)
    if config is None:
        return f"{res.kind} {name}: not found (yet); caBundle not set"
    value = base64.b64encode(ca_bundle).decode()
    ops: list[dict] = []
    for i, wh in enumerate(config.get("webhooks") or []):
        if ((wh.get("clientConfig") or {}).get("caBundle")) != value:
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": wh.get("name")})
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value})
    if not ops:
        return f"{res.kind} {name}: caBundle up to date"
    kube.json_patch(res, name, ops)
    return f"{res.kind} {name}: caBundle set on {len(ops) // 2} webhook(s)"

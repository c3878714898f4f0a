"""The operator's part of the API server's own policy (``taugate/admission_policy.py``): install the
ValidatingAdmissionPolicy and its binding as generated from the operator's settings, put them back
when edited or deleted, remove them when ``Settings.admission_policy`` is off (only when labelled as
taugate's); keep the policy's parameter, the TauProfilePlacement made from the TauCluster
(``keep_parameters``, called by the TauCluster's reconcile before it writes the status the webhook
admits by)."""

from __future__ import annotations

import logging
from typing import Any

from taugate import admission_policy, labels
from taugate.controllers.conditions import merge_patch
from taugate.controllers.resources import TAU_PROFILE_PLACEMENTS
from taugate.kube import Kube
from taugate.kubeaccess import VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS, Resource
from taugate.models import TauCluster
from taugate.settings import Settings

log = logging.getLogger("taugate.operator")


def _ours(obj: dict[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(labels.MANAGED_BY) == labels.MANAGED_BY_VALUE


def _holds(have: Any, want: Any) -> bool:
    """``have`` holds everything ``want`` says (the API server adds defaults: ``matchPolicy``,
    ``objectSelector``, a rule's ``scope``); lists item by item, of the same length."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _holds(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(_holds, have, want))
    return bool(have == want)


def _keep(kube: Kube, res: Resource, want: dict[str, Any]) -> str:
    """Create ``want``, or put back its spec and labels; what was done, in a word."""
    name = want["metadata"]["name"]
    have = kube.get(res, name)
    if have is None:
        kube.create(res, want, exist_ok=False)
        return "created"
    if _holds(have.get("spec"), want["spec"]) and _ours(have):
        return "unchanged"
    meta = have.get("metadata") or {}
    kube.json_patch(res, name, [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        {"op": "replace", "path": "/spec", "value": want["spec"]},
        {"op": "add", "path": "/metadata/labels",
         "value": {**(meta.get("labels") or {}), **want["metadata"]["labels"]}},
    ])
    return "updated"


def keep_parameters(kube: Kube, settings: Settings, cluster: TauCluster | None) -> str:
    """Create the policy's parameter from ``cluster`` or put its spec back (``created``,
    ``updated``, ``unchanged``); with no TauCluster, delete it (``deleted``, ``absent``), so the
    policy refuses what it judges, as the webhook does; ``off`` when ``Settings.admission_policy``
    is. Raises ``taugate.kube.KubeError``: the TauCluster's reconcile then writes no status and is
    retried, so the webhook never admits by a profile set the API server's policy does not have yet."""
    if not settings.admission_policy:
        return "off"
    have = kube.get(TAU_PROFILE_PLACEMENTS, admission_policy.NAME)
    if cluster is None:
        done = "absent" if have is None else \
            "deleted" if _ours(have) and kube.delete(TAU_PROFILE_PLACEMENTS, admission_policy.NAME) else "absent"
    else:
        want = admission_policy.parameters(cluster)
        if have is None:
            kube.create(TAU_PROFILE_PLACEMENTS, want, exist_ok=False)
            done = "created"
        else:
            patch = merge_patch(have.get("spec") or {}, want["spec"])
            if patch is None and _ours(have):
                return "unchanged"
            # made whole from the TauCluster, never from what is stored: no precondition needed
            kube.patch(TAU_PROFILE_PLACEMENTS, admission_policy.NAME,
                       {"metadata": {"labels": want["metadata"]["labels"]}, **({"spec": patch} if patch else {})})
            done = "updated"
    if done != "absent":
        log.info("admission policy %s: its parameter TauProfilePlacement %s", admission_policy.NAME, done)
    return done


def reconcile_admission_policy(kube: Kube, settings: Settings) -> dict[str, str]:
    """What was done to the policy and to the binding (``created``, ``updated``, ``unchanged``,
    ``deleted``, ``absent``, ``not taugate's``), and when off to its parameter (written by
    ``keep_parameters`` when on). The policy goes first on install and last on removal, so the
    binding never names a missing policy."""
    pairs = list(zip((VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS),
                     admission_policy.documents(settings), strict=True))
    done: dict[str, str] = {}
    if settings.admission_policy:
        for res, want in pairs:
            done[res.kind] = _keep(kube, res, want)
    else:  # the binding, the policy, then its parameter
        for res in (VALIDATING_ADMISSION_POLICY_BINDINGS, VALIDATING_ADMISSION_POLICIES, TAU_PROFILE_PLACEMENTS):
            have = kube.get(res, admission_policy.NAME)
            if have is None:
                done[res.kind] = "absent"
            elif not _ours(have):
                done[res.kind] = "not taugate's"
            else:
                done[res.kind] = "deleted" if kube.delete(res, admission_policy.NAME) else "absent"
    if any(v not in ("unchanged", "absent") for v in done.values()):  # "not taugate's" is worth a line
        log.info("admission policy %s: %s", admission_policy.NAME,
                 ", ".join(f"{kind} {what}" for kind, what in done.items()))
    return done

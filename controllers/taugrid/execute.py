"""Carrying out the reconcilers' planned ``Action``s through ``taugate.kube.Kube``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from taugate.controllers.resources import Action
from taugate.kube import Kube, KubeError
from taugate.kubeaccess import Resource

log = logging.getLogger("taugate.kube")


def execute(kube: Kube, action: Action) -> None:
    """Carry out one planned ``Action``."""
    log.info("%s", action.describe())
    if action.verb == "create":
        kube.create(action.resource, action.body or {})
    elif action.verb == "patch":
        kube.patch(action.resource, action.name, action.body or {}, action.namespace, action.subresource)
    elif action.verb == "delete":
        kube.delete(action.resource, action.name, action.namespace)
    else:  # pragma: no cover - Action.verb is a Literal
        raise ValueError(f"unknown action verb {action.verb!r}")


def execute_plan(kube: Kube, plan: Any, optional: Resource, replan: Callable[[], Any]) -> Any:
    """Carry out ``plan.actions`` in order and return the plan carried
    out. When the API forbids (403) an action on the ``optional`` resource (a permission the
    install may leave out on purpose: labelling Nodes, patching ClusterQueues), carry out
    ``replan()`` instead, the plan made without such actions, and return that one (every action
    is an idempotent create-or-patch, so repeating those already done is harmless). Raises
    ``KubeError`` otherwise."""
    try:
        for action in plan.actions:
            execute(kube, action)
    except KubeError as e:
        if e.status != 403 or action.resource != optional:
            raise
        log.warning("%s left unchanged, the API forbids it: %s", optional.plural, e)
        plan = replan()
        for action in plan.actions:
            execute(kube, action)
    return plan

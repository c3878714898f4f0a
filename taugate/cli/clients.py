"""What commands reach a cluster and judge workloads with: the controllers' API client, the
webhook's watch-based cluster state and its policy auditor."""

from __future__ import annotations

from taugate.kube import Kube, load_configuration
from taugate.settings import Settings
from taugate.webhook.audit import PolicyAuditor
from taugate.webhook.policy.engine import PolicyError
from taugate.webhook.state_watch import WatchStateProvider


def watch_state_provider(settings: Settings, kubeconfig: str | None = None) -> WatchStateProvider:
    """A watch-based ``StateProvider``: the pod's service account, or ``kubeconfig`` when given.
    Raises ``taugate.kubeaccess.KubeConfigError`` (a ``ValueError``) without a usable configuration."""
    cfg = load_configuration(in_cluster=kubeconfig is None, kubeconfig=kubeconfig)
    return WatchStateProvider(Kube.from_configuration(cfg), settings)


def cluster_reader(kubeconfig: str | None = None, context: str | None = None) -> Kube:
    """The API client a command reads a live cluster with (``kubeconfig`` or ``$KUBECONFIG`` or
    ``~/.kube/config``). Raises ``taugate.kubeaccess.KubeConfigError`` (a ``ValueError``)."""
    return Kube.from_configuration(load_configuration(kubeconfig=kubeconfig, context=context))


def policy_auditor(policy_dir: str, settings: Settings) -> PolicyAuditor:
    """The webhook's ``PolicyAuditor`` over the policy folder ``policy_dir``, reloading when its
    files change (as the webhook does). Raises ``ValueError`` (one line) when the set does not load."""
    try:
        return PolicyAuditor.load(policy_dir, settings)
    except PolicyError as e:
        raise ValueError(f"--audit-policies: {e}") from None

"""``Kube.follow`` against the real API server when a watch's resourceVersion is too old: the
server ends it with HTTP 410 Gone ("too old resource version", apimachinery
``errors.NewResourceExpired``, sent by the watch cache as an ERROR event), and ``follow`` lists
again at once and watches from the new list, as client-go's reflector does
(``k8s.io/client-go/tools/cache/reflector.go``: ``isExpiredError`` -> relist). The webhook's cluster
state and the operator's watches rely on it after an API server restart or a long disconnection.

A real fleet reaches a too-old resourceVersion by being away longer than the watch cache's window;
the test gets there at once by handing ``follow`` a first list whose resourceVersion is "1", with
the objects the server really listed. The resource is Kueue's LocalQueue, which the webhook follows:
a custom resource's watch cache starts when its CRD is established, so "1" is older than anything
it holds (``k8s.io/apiserver`` ``pkg/storage/cacher/watch_cache_history.go`` ``GetIntervalLocked``;
a built-in resource's cache starts with the API server, where "1" can still be served). Everything
after that is the server's and ``follow``'s own."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from taugate.kube import Kube, WatchExpired, load_configuration
from taugate.kubeaccess import Resource
from taugate.state_objects import LOCAL_QUEUES
from tests.e2e.controlplane import wait_until

NAMESPACE = "watch-expiry"


def _local_queue(name: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"clusterQueue": "watch-expiry"}}


class _Recorder:
    """A ``WatchFeed`` that keeps what ``follow`` delivers, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.response: Any = None
        """The open watch's streaming response (``shutdown()`` ends it at once)."""
        self.watching = threading.Event()
        """Set when the watch opened after the second list is open."""
        self._lock = threading.Lock()

    def _add(self, kind: str, value: Any) -> None:
        with self._lock:
            self.calls.append((kind, value))

    def listed(self, items: list[dict]) -> None:
        self._add("listed", sorted(i["metadata"]["name"] for i in items
                                   if i["metadata"].get("namespace") == NAMESPACE))

    def changed(self, event_type: str, obj: dict) -> None:
        if obj["metadata"].get("namespace") == NAMESPACE:
            self._add(event_type, obj["metadata"]["name"])

    def up(self, response: Any) -> None:
        self._add("up", "watch" if response is not None else "list")
        if response is not None:
            self.response = response
        if sum(kind == "listed" for kind, _ in self.calls) == 2 and response is not None:
            self.watching.set()  # the watch from the second list is open

    def down(self) -> None:
        self._add("down", None)

    def snapshot(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self.calls)


@pytest.fixture(scope="module")
def kube(platform):
    """A client of the platform's API server, and the namespace with one LocalQueue, "before"."""
    cp = platform.cp
    cp.kubectl("create", "namespace", NAMESPACE)
    cp.apply_objects([_local_queue("before")])
    k = Kube.from_configuration(load_configuration(kubeconfig=str(cp.kubeconfig)))
    try:
        yield k
    finally:
        k.close()
        cp.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def test_a_watch_from_a_resource_version_the_api_server_no_longer_holds_raises_watch_expired(kube):
    opened = []
    with pytest.raises(WatchExpired) as expired:
        for _ in kube.watch(LOCAL_QUEUES, resource_version="1", timeout_seconds=10, on_open=opened.append):
            pass
    assert expired.value.status == 410
    assert "too old resource version: 1 " in str(expired.value)
    assert len(opened) == 1, "the server answers 200 and ends the stream with an ERROR event"


def test_follow_lists_again_at_once_when_its_watch_is_too_old_and_then_sees_new_objects(kube, platform, caplog):
    real_list = kube.list_with_version
    handed_an_old_version = threading.Event()

    def first_list_from_long_ago(res: Resource, namespace: str | None = None):
        items, version = real_list(res, namespace)
        if handed_an_old_version.is_set():
            return items, version
        handed_an_old_version.set()
        return items, "1"

    kube.list_with_version = first_list_from_long_ago  # type: ignore[method-assign]
    feed, stopping = _Recorder(), threading.Event()
    follower = threading.Thread(target=kube.follow, args=(LOCAL_QUEUES, feed, stopping), daemon=True)
    caplog.set_level(logging.WARNING, logger="taugate.kube")
    follower.start()
    try:
        feed.watching.wait(30)
        assert feed.watching.is_set(), f"follow never opened a watch: {feed.snapshot()}"
        platform.cp.apply_objects([_local_queue("after")])
        wait_until("the new LocalQueue's ADDED event", lambda: ("ADDED", "after") in feed.snapshot(), 30)
    finally:
        stopping.set()
        if feed.response is not None:
            feed.response.shutdown()
        follower.join(30)
    assert not follower.is_alive(), "follow did not end when stopped"
    calls = feed.snapshot()
    # The expired watch opened and ended with the server's ERROR event, follow listed again (the
    # same objects), opened a watch from the new list, and the next create arrived on it.
    assert calls[:7] == [("listed", ["before"]), ("up", "list"), ("up", "watch"), ("down", None),
                         ("listed", ["before"]), ("up", "list"), ("up", "watch")], calls
    assert [c for c in calls[7:] if c[0] != "MODIFIED"] == [("ADDED", "after")], calls
    # 410 is the expected end of an old watch: no warning and no back-off before the relist.
    assert not [r for r in caplog.records if "relisting in" in r.getMessage()]

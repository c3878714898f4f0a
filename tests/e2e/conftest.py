"""Session fixtures of the end-to-end tier: one real control plane (built from Go modules by
``tests/e2e/build.sh``, cached by version) and taugate installed on it (``tests/e2e/platform``).

Both are torn down at the end of the session, also when a test fails or the run is interrupted
(the fixtures' ``finally``); every process also dies with the test process (PR_SET_PDEATHSIG).
A control plane that cannot be built or started fails the tests that need it, with the reason:
this tier never skips.
"""

from __future__ import annotations

import pytest

from tests.e2e import stack
from tests.e2e.controlplane import ControlPlane, build
from tests.e2e.platform import Platform, install
from tests.e2e.stack import Stack


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory) -> ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler, running."""
    cp = ControlPlane(build("etcd", "kubernetes"), tmp_path_factory.mktemp("controlplane"))
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def platform(control_plane, tmp_path_factory) -> Platform:
    """taugate's CRDs, chart, operator, webhook and the example platform on the control plane."""
    plat = None
    try:
        plat = install(control_plane, tmp_path_factory.mktemp("taugate"))
        yield plat
    finally:
        if plat is not None:
            plat.stop()


@pytest.fixture
def kubectl(platform):
    """The built kubectl as the admin, against the platform's control plane."""
    return platform.cp.kubectl


@pytest.fixture(scope="session")
def whole_stack(tmp_path_factory) -> Stack:
    """A second control plane with node-lifecycle on and the API server's audit log, running
    Kueue, the KubeRay operator, kwok and taugate recording (``tests/e2e/stack``); separate from
    ``control_plane`` so the tests of the taugate-only tier see the cluster they expect."""
    cp = ControlPlane(build(*stack.COMPONENTS), tmp_path_factory.mktemp("stack-controlplane"))
    s = None
    try:
        cp.start(node_lifecycle=True, audit_policy=stack.AUDIT_POLICY)
        s = stack.start(cp, tmp_path_factory.mktemp("stack"))
        yield s
    finally:
        if s is not None:
            s.stop()
        cp.stop()

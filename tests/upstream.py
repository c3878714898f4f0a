"""Upstream inputs of the tests, read from the Go modules the project pins.

Each upstream project is pinned once, in the small Go module ``tests/e2e/gomod/<component>/``
(``go.mod`` + ``go.sum``, the same pins the end-to-end build uses). ``module_dir`` reads the
pinned module path and version from that ``go.mod`` (a ``replace`` wins over the ``require``, as
for the Go command) and asks ``go mod download -json MODULE@VERSION`` where the module is: its
directory in the module cache, downloaded from the Go module proxy on first use and checked
against the committed ``go.sum``. Nothing is copied into the repository.

Raises ``UpstreamUnavailable`` when ``go`` is missing or the download fails: the tests need these
inputs and never skip without them.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

GOMOD = Path(__file__).resolve().parent / "e2e" / "gomod"

MAIN_MODULE = {
    "kuberay": "github.com/ray-project/kuberay/ray-operator",
    "kueue": "sigs.k8s.io/kueue",
    "kubernetes": "k8s.io/kubernetes",
    "kwok": "sigs.k8s.io/kwok",
    "jobset": "sigs.k8s.io/jobset",
    "lws": "sigs.k8s.io/lws",
    "kubeflow": "github.com/kubeflow/training-operator",
    "trainer": "github.com/kubeflow/trainer/v2",
    "kyverno": "github.com/kyverno/kyverno",
}
"""The module each component's ``go.mod`` pins, when the caller names none."""


class UpstreamUnavailable(RuntimeError):
    """An upstream module the tests read could not be found or downloaded."""


def _go(args: list[str], cwd: Path) -> str:
    go = shutil.which("go")
    if go is None:
        raise UpstreamUnavailable(
            "the tests read upstream inputs (KubeRay, Kueue, k8s.io/api) from Go modules, and `go` is not "
            "on PATH: install Go (https://go.dev/dl/, the version in tests/e2e/gomod/*/go.mod or newer)")
    env = {**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=mod"}
    proc = subprocess.run([go, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and not proc.stdout.strip():
        raise UpstreamUnavailable(f"`go {' '.join(args)}` in {cwd} failed: {proc.stderr.strip()}")
    return proc.stdout


def pinned(component: str, module: str | None = None) -> tuple[str, str]:
    """``(module path, version)`` pinned in ``tests/e2e/gomod/<component>/go.mod``.

    ``module`` defaults to ``MAIN_MODULE[component]``; a ``replace`` of the module to a version
    (``k8s.io/api => k8s.io/api v0.37.2``) wins over its ``require``. Raises
    ``UpstreamUnavailable`` if the component has no go.mod or the module is not pinned there."""
    directory = GOMOD / component
    if not (directory / "go.mod").is_file():
        raise UpstreamUnavailable(f"no Go module pins component {component!r}: {directory / 'go.mod'} is missing")
    module = module or MAIN_MODULE[component]
    mod = json.loads(_go(["mod", "edit", "-json"], directory))
    for rep in mod.get("Replace") or []:
        if rep["Old"]["Path"] == module and rep["New"].get("Version"):
            return rep["New"]["Path"], rep["New"]["Version"]
    for req in mod.get("Require") or []:
        if req["Path"] == module:
            return module, req["Version"]
    raise UpstreamUnavailable(f"{directory / 'go.mod'} does not require {module}")


@functools.cache
def module_dir(component: str, module: str | None = None) -> Path:
    """The directory of the module pinned for ``component`` (see ``pinned``), downloaded on first
    use and checked against the component's ``go.sum``; one ``go`` call per module and process.
    Raises ``UpstreamUnavailable`` if ``go`` is missing or the module cannot be downloaded."""
    path, version = pinned(component, module)
    out = _go(["mod", "download", "-json", f"{path}@{version}"], GOMOD / component)
    info = json.loads(out)
    if info.get("Error") or not info.get("Dir"):
        raise UpstreamUnavailable(f"cannot download {path}@{version} (pinned in tests/e2e/gomod/{component}/go.mod): "
                                  f"{info.get('Error', 'no directory reported')}")
    return Path(info["Dir"])

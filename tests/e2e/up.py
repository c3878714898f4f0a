"""Start the end-to-end platform by hand and keep it up, to look around with kubectl:

    python -m tests.e2e.up [--minutes N] [--bare | --stack]

prints the admin kubeconfig and the log directory, then waits (default 30 minutes, or until
Ctrl-C) and stops every process. ``--bare`` starts the control plane only (no taugate);
``--stack`` starts the whole stack of ``tests/e2e/stack.py`` (Kueue, KubeRay, kwok, taugate
recording).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.e2e import stack
from tests.e2e.controlplane import ControlPlane, build
from tests.e2e.platform import install


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--bare", action="store_true", help="the control plane only")
    ap.add_argument("--stack", action="store_true", help="Kueue, KubeRay and kwok too, taugate recording")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="taugate-e2e-"))
    cp = ControlPlane(build(*(stack.COMPONENTS if args.stack else ("etcd", "kubernetes"))), workdir / "controlplane")
    plat = None
    try:
        cp.start(node_lifecycle=args.stack, audit_policy=stack.AUDIT_POLICY if args.stack else None)
        print(f"control plane up: export KUBECONFIG={cp.kubeconfig}", flush=True)
        if args.stack:
            try:
                plat = stack.start(cp, workdir / "stack")
                print(f"the whole stack is up; taugate webhook on https://127.0.0.1:{plat.platform.webhook_port}",
                      flush=True)
            except Exception as e:
                print(f"the stack failed to start (the control plane stays up): {e}", flush=True)
        elif not args.bare:
            try:
                plat = install(cp, workdir / "taugate")
                print(f"taugate installed; webhook on https://127.0.0.1:{plat.webhook_port}", flush=True)
            except Exception as e:  # keep the control plane up to look at what went wrong
                print(f"taugate install failed (the control plane stays up): {e}", flush=True)
        print(f"logs in {workdir}; up for {args.minutes:g} minutes (Ctrl-C stops)", flush=True)
        time.sleep(args.minutes * 60)
    except KeyboardInterrupt:
        pass
    finally:
        if plat:
            plat.stop()
        cp.stop()


if __name__ == "__main__":
    main()

"""Start the end-to-end platform by hand and keep it up, to look around with kubectl:

    python -m tests.e2e.up [--minutes N] [--bare]

prints the admin kubeconfig and the log directory, then waits (default 30 minutes, or until
Ctrl-C) and stops every process. ``--bare`` starts the control plane only (no taugate).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.e2e.controlplane import ControlPlane, build
from tests.e2e.platform import install


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--bare", action="store_true", help="the control plane only")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="taugate-e2e-"))
    cp = ControlPlane(build("etcd", "kubernetes"), workdir / "controlplane")
    plat = None
    try:
        cp.start()
        print(f"control plane up: export KUBECONFIG={cp.kubeconfig}", flush=True)
        if not args.bare:
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

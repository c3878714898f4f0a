"""What a Kubeflow / OpenShift AI user types in a notebook, run with the CodeFlare SDK's own Python
(``tests/e2e/codeflare_sdk.sh``; this file imports nothing of taugate or its tests).

    python codeflare_driver.py cluster NAME [--gpus N] [--workers W]   # ClusterConfiguration + Cluster.apply()
    python codeflare_driver.py rayjob NAME [--gpus N] [--workers W]    # RayJob(cluster_config=...).submit()
    python codeflare_driver.py rayjob NAME --cluster CLUSTER           # RayJob(cluster_name=...).submit()

against the cluster of ``$KUBECONFIG`` (the SDK's own kubeconfig discovery), in ``--namespace``
(default ``vision``). Everything the SDK prints goes to stdout/stderr as it would in the notebook;
the exit code is 0 when the SDK returned, 1 with the exception's text when it raised.
"""

from __future__ import annotations

import argparse
import sys
import traceback


def _config(args: argparse.Namespace, name: str | None):
    """The SDK's defaults (its own Ray image, head 1-2 CPU / 5-8 GB, workers 1 CPU / 3-6 GB) but
    for the workers and their GPUs, as the SDK's guided demos write it."""
    from codeflare_sdk import ClusterConfiguration

    return ClusterConfiguration(
        name=name, namespace=args.namespace, num_workers=args.workers,
        worker_extended_resource_requests={"nvidia.com/gpu": args.gpus} if args.gpus else {})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("cluster", "rayjob"))
    ap.add_argument("name")
    ap.add_argument("--namespace", default="vision")
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cluster", help="an existing RayCluster to run the RayJob on")
    args = ap.parse_args()
    try:
        if args.what == "cluster":
            from codeflare_sdk import Cluster

            # timeout=0: no wait for the CA Secret that OpenShift AI's KubeRay creates for mTLS.
            Cluster(_config(args, args.name)).apply(timeout=0)
        else:
            from codeflare_sdk import RayJob

            where = {"cluster_name": args.cluster} if args.cluster else {"cluster_config": _config(args, None)}
            job = RayJob(job_name=args.name, entrypoint="python -c 'import ray; ray.init()'",
                         namespace=args.namespace, **where)
            print(f"submitted: {job.submit()}")
    except Exception as e:  # what the notebook would show
        traceback.print_exc()
        print(f"raised: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m services.watcher``: the only service that touches the cluster."""

from __future__ import annotations

import os

from services.watcher.backend import Backend
from services.watcher.local.backend import LocalBackend, stop_grace_from_env
from shared.metrics import sample_consumer_lag
from shared.service import Runtime, run_service


async def main(runtime: Runtime) -> None:
    # The durable consumer `watcher`, whichever backend and replica reads it.
    runtime.spawn(sample_consumer_lag(runtime, consumer="watcher"), name="watcher.lag")
    backend_name = os.environ.get("BERTH_WATCHER_BACKEND", "local")
    if backend_name == "kubernetes":
        # Imported here: the local backend must not need a kubeconfig to start.
        from services.watcher.kube.start import run_kubernetes

        await run_kubernetes(runtime)  # it stands by too, serving the webhook meanwhile
        return
    if backend_name != "local":
        raise SystemExit(f"unknown BERTH_WATCHER_BACKEND={backend_name!r} (local or kubernetes)")
    # A standby watches nothing and touches nothing; once it leads, it starts as a restarted
    # watcher would (the local backend stops what its predecessor ran and requeues it).
    if not await runtime.stand_by():
        return
    backend: Backend = LocalBackend(runtime, stop_grace=stop_grace_from_env())
    await backend.observe()


if __name__ == "__main__":
    run_service("watcher", main)

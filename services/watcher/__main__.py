"""``python -m services.watcher``: the only service that touches the cluster."""

from __future__ import annotations

import os

from services.watcher.local_backend import LocalBackend, stop_grace_from_env
from shared.service import Runtime, run_service


async def main(runtime: Runtime) -> None:
    backend_name = os.environ.get("BERTH_WATCHER_BACKEND", "local")
    if backend_name != "local":
        raise SystemExit(f"BERTH_WATCHER_BACKEND={backend_name!r} is not available yet (use local)")
    await LocalBackend(runtime, stop_grace=stop_grace_from_env()).run()


if __name__ == "__main__":
    run_service("watcher", main)

"""The local backend's log API: ``berth.api.watcher.logs`` (core NATS request/reply).

Request ``{"namespace": ..., "name": ..., "offsets": {"<file>": <byte offset>}}``; the reply
gives every log file of that workload (all its generations, all its pods, oldest first) with
the text after each offset: ``{"files": [{"file": "1-main-0.log", "data": "...",
"offset": 123}]}``. A caller that follows sends back the offsets it got. At most
``CHUNK`` bytes per file per reply, so no reply outgrows NATS's message size limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from services.watcher.local.processes import workload_log_dir
from shared.bus import API_SUBJECT, Bus, Served
from shared.logging import get_logger
from shared.names import name_problem

__all__ = ["CHUNK", "LogsRequest", "names_are_valid", "serve_logs"]

log = get_logger("watcher.logs")
CHUNK = 256 * 1024


class LogsRequest(msgspec.Struct):
    namespace: str
    name: str
    offsets: dict[str, int] = {}


def _generation(path: Path) -> tuple[int, str]:
    head = path.name.split("-", 1)[0]
    return (int(head) if head.isdigit() else 0, path.name)


def names_are_valid(request: LogsRequest) -> bool:
    """Kubernetes names only: never a path outside the log root, never a label selector."""
    namespace_problem = name_problem(request.namespace, "namespace")
    return namespace_problem is None and name_problem(request.name, "name") is None


def read_logs(root: Path, request: LogsRequest) -> dict[str, Any]:
    if not names_are_valid(request):
        return {"error": "invalid namespace or name"}  # never a path outside the log root
    folder = workload_log_dir(root, request.namespace, request.name)  # checked: inside root
    files = []
    for path in sorted(folder.glob("*.log"), key=_generation):
        offset = max(0, request.offsets.get(path.name, 0))
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(CHUNK)
        files.append(
            {"file": path.name, "data": data.decode(errors="replace"), "offset": offset + len(data)}
        )
    return {"files": files}


async def serve_logs(bus: Bus, root: Path) -> Served:
    async def answer(_: str, data: bytes) -> dict[str, Any]:
        try:
            return read_logs(root, msgspec.json.decode(data, type=LogsRequest))
        except OSError as error:
            log.warning("logs_unreadable", error=str(error))
            return {"error": f"cannot read logs: {error.strerror}"}

    # Served by the active replica only (it subscribes once it leads); the queue group
    # keeps a deposed one that has not exited yet from answering too.
    return await bus.serve_requests(f"{API_SUBJECT}.watcher.logs", answer, queue="watcher")

"""`berth up` with ``BERTH_BUS_COPIES=none``: the per-workload subjects stay empty, and the
CLI still shows every event of a workload's life, read from the batches (docs/events.md,
"Fewer copies")."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from berth_cli.launcher import start_stack as start_live_stack
from shared.bus import STREAM, Bus
from tests.conftest import (
    ADMIN_CREDENTIALS,
    CLI_CREDENTIALS,
    FIXTURES,
    STACK_ENV,
    berth,
    bus_auth,
    signed_in,
)
from tests.e2e import eventually, job_manifest, submit_manifest
from tests.stack_pool import StackPool

LIFE = ["WorkloadSubmitted", "WorkloadAdmitted", "WorkloadStarted", "WorkloadFinished"]


async def _stored(url: str) -> dict[str, int]:
    """Messages stored per subject root: per-workload (wl, cq) and batches (b)."""
    bus = await Bus.connect(url, source="test", auth=bus_auth(url), retry=False)
    try:
        counts = {}
        for root in ("wl", "cq", "b"):
            info = await bus.js.stream_info(STREAM, subjects_filter=f"berth.{root}.>")
            counts[root] = sum((info.state.subjects or {}).values())
        return counts
    finally:
        await bus.close()


def test_without_copies_the_cli_shows_a_workloads_life(
    stack_pool: StackPool, tmp_path: Path
) -> None:
    stack_pool.settle()  # no two `berth up` start at once (tests/stack_pool.py)
    env = {**STACK_ENV, "BERTH_BUS_COPIES": "none"}
    running = signed_in(start_live_stack(tmp_path / "berth", env=env))
    url = running.url
    try:
        berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=url)
        submit_manifest(url, tmp_path, job_manifest("quiet", cpu=1, simulated_runtime="200ms"))

        def life() -> list[str] | None:
            shown = berth("events", "-o", "json", "--all", url=url).stdout.splitlines()
            types = [json.loads(line)["type"] for line in shown]
            return types if "WorkloadFinished" in types else None

        types = eventually(life)
        assert [t for t in types if t in LIFE] == LIFE, types
        stored = asyncio.run(_stored(url))
        assert stored["wl"] == stored["cq"] == 0 and stored["b"] >= 4, stored

        table = berth("events", "--type", "admitted", "--cluster-queue", "cluster-queue", url=url)
        assert [row.split()[1:4] for row in table.stdout.splitlines()[1:]] == [
            ["WorkloadAdmitted", "default/quiet", "cluster-queue"]
        ], "one ClusterQueue's decisions, picked out of the batches"
        assert berth("events", "-n", "elsewhere", url=url).stdout == (
            "No events found in elsewhere namespace.\n"
        )
        described = berth("describe", "workload", "quiet", url=url).stdout
        events = described.split("Events:", 1)[1]
        for kind in ("Submitted", "QuotaReserved", "Started", "Finished"):
            assert kind in events, described
    finally:
        stack_pool.release(running)  # stopped in the background
        CLI_CREDENTIALS.pop(url, None)
        ADMIN_CREDENTIALS.pop(url, None)
        os.environ.pop("BERTH_CREDS", None)

"""Chaos: kill -9 each service's active replica, then a NATS node, while workloads flow.

`berth up --replicas 2 --nats-cluster 3`, a steady stream of simulated-runtime Jobs into two
ClusterQueues of one cohort with two priority classes (so preemptions happen), driven by
the failover benchmark's harness (bench/failover.py) at a smaller scale. No timing is
asserted (`make bench-failover` is the measurement); the audit of the event log is: nothing
lost, nothing admitted twice, quota never over-committed, and the stack still admits after
everything. The harness waits with generous limits (60 s per step) and never asserts on a
fixed sleep: its sleeps only let the stream run between kills.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.failover import ROLES, Scenario, render, run_failover
from berth_cli.launcher import LiveStack, start_stack
from tests.stack_pool import StackPool

# ~4 Jobs per second while the kills go on (80-150 of them), 0.3-1.5 s of simulated run each.
SCENARIO = Scenario(
    rate=4.0, runtime_ms=(300, 1500), settle_s=1.0, drain_limit_s=40.0, nats_kills=1
)


@pytest.fixture
def chaos_stack(tmp_path: Path, stack_pool: StackPool) -> Iterator[LiveStack]:
    stack = start_stack(
        tmp_path / "berth", replicas=2, nats_cluster=3, env={"BERTH_POD_GRACE_SECONDS": "2"}
    )
    try:
        yield stack
    finally:
        stack_pool.release(stack)  # stopped in the background


@pytest.mark.timeout(240)  # a loaded machine; ~45 s when idle
def test_kill_every_active_replica_and_a_nats_node_under_load(chaos_stack: LiveStack) -> None:
    started = time.monotonic()
    result = run_failover(chaos_stack, SCENARIO)
    print(f"\n{render(result, SCENARIO)}\nchaos run: {time.monotonic() - started:.1f}s")

    assert [kill.target for kill in result.kills] == [*ROLES, "nats"]
    for kill in result.kills:  # each role was taken over by a replica with a higher term
        assert kill.successor and kill.active_after is not None, kill
    audit = result.audit
    # The stream flowed through the kills (4 Jobs/s; at least ~2.5 s per kill even when fast).
    assert audit.created >= 40, audit.created
    assert audit.preemptions > 0, "the scenario must exercise preemption"
    assert audit.lost == [], audit.lost
    assert audit.admitted_twice == [], audit.admitted_twice
    assert audit.over_committed == [], audit.over_committed
    # After every kill, a new Job is still admitted.
    assert result.after_admitted_s is not None, "nothing admitted after the kills"
    # Stronger than "not lost": once the stream stops, every Job finishes (the quota frees
    # up). Seen failing in the benchmark when a NATS kill moved the watcher's lease: the new
    # watcher neither finished nor evicted what the old one ran, and its quota stayed held.
    assert audit.still_known == [], f"still queued or admitted at the end: {audit.still_known}"

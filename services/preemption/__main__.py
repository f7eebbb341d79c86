"""``python -m services.preemption``: picks victims when a workload does not fit.

First cut: it follows pending decisions on its durable consumer and logs each one it would
consider. Victim search arrives with the preemption issue; until then it evicts nothing.
"""

from __future__ import annotations

from shared.events import AnyEvent, WorkloadPending
from shared.logging import get_logger
from shared.service import Runtime, run_service

log = get_logger("preemption")


async def main(runtime: Runtime) -> None:
    subscription = await runtime.bus.durable_subscription("preemption", ["berth.cq.*.pending.>"])
    runtime.set_ready()

    async def observe(events: list[AnyEvent]) -> None:
        for event in events:
            if isinstance(event, WorkloadPending):
                log.info(
                    "pending_observed",
                    workload=event.workload.key,
                    queue=event.cluster_queue,
                    reason=event.reason,
                    decision="none: victim search not implemented yet",
                )

    await runtime.bus.consume(subscription, observe, stopping=runtime.stopping)


if __name__ == "__main__":
    run_service("preemption", main)

"""``python -m services.recovery``: owns managed jobs and brings preempted ones back.

First cut: it follows evictions and finishes on its durable consumer and logs them. Managed
jobs (`berth jobs launch`), requeueing and the ageing boost arrive with the recovery issue.
"""

from __future__ import annotations

from shared.events import AnyEvent, WorkloadEvicted, WorkloadFinished
from shared.logging import get_logger
from shared.service import Runtime, run_service

log = get_logger("recovery")


async def main(runtime: Runtime) -> None:
    subscription = await runtime.bus.durable_subscription(
        "recovery", ["berth.wl.evicted.>", "berth.wl.finished.>"]
    )
    runtime.set_ready()

    async def observe(events: list[AnyEvent]) -> None:
        for event in events:
            if isinstance(event, WorkloadEvicted | WorkloadFinished):
                log.info(
                    "workload_observed",
                    workload=event.workload.key,
                    kind=type(event).__name__,
                    decision="none: managed jobs not implemented yet",
                )

    await runtime.bus.consume(subscription, observe, stopping=runtime.stopping)


if __name__ == "__main__":
    run_service("recovery", main)

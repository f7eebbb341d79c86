"""``python -m services.preemption``: picks the smallest set of victims that makes room."""

from __future__ import annotations

from services.preemption.service import PreemptionService
from shared.service import Runtime, run_service


async def main(runtime: Runtime) -> None:
    await PreemptionService(runtime).run()


if __name__ == "__main__":
    run_service("preemption", main)

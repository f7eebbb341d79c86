"""``python -m services.recovery``: owns managed jobs and brings preempted ones back."""

from __future__ import annotations

from services.recovery.service import RecoveryService
from shared.service import Runtime, run_service


async def main(runtime: Runtime) -> None:
    await RecoveryService(runtime).run()


if __name__ == "__main__":
    run_service("recovery", main)

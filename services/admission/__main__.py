"""``python -m services.admission``: the quota authority."""

from __future__ import annotations

from services.admission.service import AdmissionService
from shared.service import Runtime, run_service


async def main(runtime: Runtime) -> None:
    await AdmissionService(runtime).run()


if __name__ == "__main__":
    run_service("admission", main)

"""What the in-process admission benchmarks give the admission service in place of a bus and a
runtime (bench/million_pending.py, bench/admission_fold.py): each send acknowledged at once,
the outbox's settler run as a task, and a turn awaited with its sends settled within the
event loop that ran it (services/admission/outbox.py awaits the acks behind the loop)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from services.admission.service import AdmissionService
from shared.service import Runtime

__all__ = ["Acked", "runtime_for", "turn"]


class Acked:
    """A send whose acks are all in."""

    async def settle(self) -> None:
        return None


def runtime_for(bus: Any) -> Runtime:
    """The runtime as the service reads it here: ``bus`` (its ``send_many`` returning
    :class:`Acked`), and a task spawner for the outbox's settler."""
    return cast(
        Runtime, SimpleNamespace(bus=bus, spawn=lambda coro, name: asyncio.ensure_future(coro))
    )


async def turn(service: AdmissionService) -> None:
    """One turn of the deciding leader (the gate decisions due, a pass, what falls due after
    it), its sends settled before the event loop ends."""
    await service._decide()
    await service.outbox.settled()

"""What every watcher backend does, whichever "cluster" it drives.

Two backends satisfy :class:`Backend`: the embedded local one
(:mod:`services.watcher.local.backend`) and the Kubernetes one
(:mod:`services.watcher.kube.backend`). The watcher consumes one set of subjects
(:data:`COMMAND_SUBJECTS`) whichever is active, and :func:`carry_out` is the single rule
that routes a decision or command to the verb that carries it out. So a command sent on the
bus (recovery's managed-job attempts, the CLI's ``berth submit``) works the same on a laptop
and on a cluster.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from shared.events import (
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    EvictionRequested,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadAdmitted,
)

__all__ = ["COMMAND_SUBJECTS", "Backend", "carry_out"]

# Decisions of admission and preemption, and the commands of recovery and the CLI.
COMMAND_SUBJECTS = [
    "berth.cq.*.admitted.>",
    "berth.cq.*.evict.>",
    "berth.cmd.create.>",
    "berth.cmd.delete.>",
    "berth.cmd.submit.>",
    "berth.cmd.remove.>",
]


@runtime_checkable
class Backend(Protocol):
    """The watcher's contract with a cluster. Every verb is idempotent: a redelivered
    command or decision finds its work done and changes nothing."""

    async def create(self, command: CreateWorkload | SubmitWorkload) -> None:
        """Create the workload object (suspended, or gated, until admission says so)."""

    async def delete(self, command: DeleteWorkload | RemoveWorkload) -> None:
        """Delete the object and stop what runs of it; the watch reports it deleted."""

    async def admit(self, decision: WorkloadAdmitted) -> None:
        """Start the workload on its flavors; report ``WorkloadStarted``."""

    async def evict(self, decision: EvictionRequested) -> None:
        """Stop the admitted generation; report ``WorkloadEvicted``."""

    async def observe(self) -> None:
        """List-watch what exists and runs, report it, and carry out what arrives on
        :data:`COMMAND_SUBJECTS` until the runtime stops; ready once the first lists are in."""


async def carry_out(backend: Backend, event: AnyEvent) -> bool:
    """Route one event to the backend verb for it; False for an event that is not a command
    or decision for the watcher (the consumer's subjects should never deliver one).

    Creation comes from recovery (a managed job's attempt) or the CLI (``berth submit``);
    deletion from recovery (a cancel) or the CLI (``berth delete workload``): each pair is
    one verb, because the backend does the same thing for either sender.
    """
    match event:
        case WorkloadAdmitted():
            await backend.admit(event)
        case EvictionRequested():
            await backend.evict(event)
        case CreateWorkload() | SubmitWorkload():
            await backend.create(event)
        case DeleteWorkload() | RemoveWorkload():
            await backend.delete(event)
        case _:
            return False
    return True

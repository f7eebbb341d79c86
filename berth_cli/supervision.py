"""How `berth up` keeps what it started alive, and makes sure nothing outlives it.

Two rules, each in one small function: when a crashed process is started again
(:func:`restart_delay`, :func:`crash_streak`), and how a child learns that `berth up` died
(:func:`die_with_parent`).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "MAX_RESTART_DELAY_S",
    "STABLE_RUN_S",
    "Restarts",
    "crash_streak",
    "die_with_parent",
    "restart_delay",
]

STABLE_RUN_S = 60.0
MAX_RESTART_DELAY_S = 30.0


def crash_streak(previous: int, ran_for_s: float) -> int:
    """How many times in a row a process has now crashed.

    A run of at least :data:`STABLE_RUN_S` seconds ends the streak: the crash after it counts
    as the first, so a service that crashes once a day always comes back after the shortest
    delay, while one that crashes on start-up backs off.
    """
    return 1 if ran_for_s >= STABLE_RUN_S else previous + 1


def restart_delay(streak: int, *, awaited: bool = False) -> float:
    """Seconds to wait before restarting a process that crashed ``streak`` times in a row:
    1, 2, 4, 8, 16, then 30 for good (a crash loop must not spin, a one-off crash must not
    keep the stack down for long). A process the others wait for (``awaited``: NATS) comes
    back at once after a first crash, then after 1, 2, 4... seconds: every second it is away,
    every service is idle and its leases run down."""
    backoffs = streak - 1 if awaited else streak
    return 0.0 if backoffs <= 0 else min(2.0 ** (backoffs - 1), MAX_RESTART_DELAY_S)


@dataclass
class Restarts:
    """The restart bookkeeping of one supervised process (times from ``time.monotonic``)."""

    awaited: bool = False  # NATS: see restart_delay
    started_at: float = 0.0
    streak: int = 0
    count: int = 0  # restarts over the stack's life, for the operator
    due_at: float | None = None  # set while a crashed process waits for its restart

    def crashed(self, now: float) -> float:
        """Record a crash seen at ``now``; returns the delay before the restart."""
        self.streak = crash_streak(self.streak, now - self.started_at)
        delay = restart_delay(self.streak, awaited=self.awaited)
        self.due_at = now + delay
        return delay

    def due(self, now: float) -> bool:
        return self.due_at is not None and now >= self.due_at

    def started(self, now: float) -> None:
        self.started_at = now
        if self.due_at is not None:
            self.count += 1
        self.due_at = None


# prctl(2) option: the signal a child gets when the thread that forked it dies.
_PR_SET_PDEATHSIG = 1
# Loaded now, so the forked child only makes the call; None where there is no prctl (not Linux).
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``signum`` when its parent dies, even by
    SIGKILL (Linux's PR_SET_PDEATHSIG), so a killed `berth up` leaves nothing behind.

    The signal is tied to the *thread* that forked the child: start children from a thread
    that lives as long as they should (`berth up` starts them all from its main thread). If
    the parent died between the fork and the call, the child exits at once. Elsewhere than
    Linux it does nothing; the services' own watch on their supervisor's pid remains.
    """
    parent = os.getpid()

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec

"""One `berth up` per data directory: the claim it holds while it runs.

Two stacks on one data directory would run two nats-servers on one JetStream store and two
watchers on one set of runs: the second watcher takes the first one's runs for its own
predecessor's, restarts them and the first stack's jobs fail. So `berth up` claims the data
directory before it starts anything, and a second one is refused, naming the first's pid.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["CLAIM_FILE", "DataDirClaim", "DataDirInUse"]

CLAIM_FILE = "berth-up.pid"


class DataDirInUse(RuntimeError):
    """Another `berth up` holds the data directory."""


class DataDirClaim:
    """An exclusive ``flock`` on ``<data_dir>/berth-up.pid``, which holds the claimant's pid.

    Why a lock and not the pid file alone: the kernel drops a lock when its holder dies, even
    by SIGKILL, so a crashed stack never leaves a claim behind that a user must delete; the pid
    inside is only there to name the holder. The stack's children never hold it past the stack:
    the descriptor is close-on-exec (as Python opens every descriptor), and the children are
    started with every other descriptor closed."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / CLAIM_FILE
        self._descriptor: int | None = None

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def take(self) -> None:
        """Claim the data directory (it must exist), or raise :class:`DataDirInUse`; taking a
        claim already held does nothing."""
        if self._descriptor is not None:
            return
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 32).decode(errors="replace").strip() or "unknown"
            os.close(descriptor)
            raise DataDirInUse(
                f"{self.path.parent} is in use by another `berth up` (pid {holder}); stop it"
                " first, or give --data-dir another directory"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        self._descriptor = descriptor

    def release(self) -> None:
        """Give the claim up (the file stays: the next claimant rewrites it)."""
        if self._descriptor is None:
            return
        os.ftruncate(self._descriptor, 0)
        os.close(self._descriptor)  # closing the only descriptor drops the lock
        self._descriptor = None

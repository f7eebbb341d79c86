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

    Why a lock and not the pid file alone: the kernel drops a lock when the last descriptor of
    it closes, even by SIGKILL, so a crashed stack never leaves a claim behind that a user must
    delete; the pid inside is only there to name the holder. The stack's children (NATS, the
    services) are given the descriptor (``pass_fds``): killed with SIGKILL, `berth up` tells
    them to stop and they drain for seconds, and the directory stays claimed until the last
    of them has exited, so a new stack never starts a second nats-server on a store still in
    use. Nothing else inherits it (close-on-exec, as Python opens every descriptor)."""

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
        try:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise RuntimeError(f"cannot claim {self.path.parent}: {error.strerror}") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 32).decode(errors="replace").strip() or "unknown"
            os.close(descriptor)
            raise DataDirInUse(
                f"{self.path.parent} is in use by another `berth up` (pid {holder}, or what"
                " it started, still stopping); stop it first, or give --data-dir another"
                " directory"
            ) from None
        except OSError as error:  # no locks on this filesystem (an NFS mount without them)
            os.close(descriptor)
            raise RuntimeError(
                f"cannot lock {self.path}: {error.strerror}; give --data-dir a directory on a"
                " local filesystem"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        self._descriptor = descriptor

    @property
    def descriptor(self) -> int | None:
        """The claim's descriptor, for the stack's children to hold too (``pass_fds``)."""
        return self._descriptor

    def release(self) -> None:
        """Give the claim up (the file stays: the next claimant rewrites it)."""
        if self._descriptor is None:
            return
        os.ftruncate(self._descriptor, 0)
        os.close(self._descriptor)  # closing the only descriptor drops the lock
        self._descriptor = None

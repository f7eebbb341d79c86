"""`berth up` claims its data directory (berth_cli/data_dir_claim.py): a second stack on it is
refused, naming the first's pid, and a claim never outlives its holder, even by SIGKILL."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from berth_cli.data_dir_claim import CLAIM_FILE, DataDirClaim, DataDirInUse

# A holder in a process of its own: takes the claim, says so, then waits to be stopped.
HOLDER = """
import sys, time
from pathlib import Path
from berth_cli.data_dir_claim import DataDirClaim
claim = DataDirClaim(Path(sys.argv[1]))
claim.take()
print("held", flush=True)
time.sleep(60)
"""


@contextmanager
def holder(data_dir: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.wait()


def _end(process: subprocess.Popen[str], how: str) -> None:
    """End the holder: ``kill`` (SIGKILL: no code of its runs) or ``term`` (its default
    handler: it dies without releasing either)."""
    process.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
    process.wait()


# (reason, how the other holder ends before we take it: None while it still runs)
CASES = [
    ("a live holder keeps the directory: the second is refused", None),
    ("a holder killed by SIGKILL leaves no claim behind", "kill"),
    ("a holder ended by SIGTERM leaves no claim behind", "term"),
]


@pytest.mark.parametrize(("why", "ended"), CASES, ids=[case[0] for case in CASES])
def test_a_claim_lasts_as_long_as_its_holder(tmp_path: Path, why: str, ended: str | None) -> None:
    with holder(tmp_path) as other:
        claim = DataDirClaim(tmp_path)
        if ended is None:
            with pytest.raises(DataDirInUse) as refused:
                claim.take()
            assert f"in use by another `berth up` (pid {other.pid}," in str(refused.value), why
            assert not claim.held, why
            return
        _end(other, ended)
        claim.take()
        assert claim.held, why
        assert (tmp_path / CLAIM_FILE).read_text() == f"{os.getpid()}\n", why
        claim.release()


def test_a_released_claim_is_free_and_taking_twice_is_one_claim(tmp_path: Path) -> None:
    first = DataDirClaim(tmp_path)
    first.take()
    first.take()  # the same holder again: nothing changes, no second descriptor
    with pytest.raises(DataDirInUse):
        DataDirClaim(tmp_path).take()
    first.release()
    assert (tmp_path / CLAIM_FILE).read_text() == ""  # no stale pid names a past holder
    second = DataDirClaim(tmp_path)
    second.take()
    second.release()


# A holder whose child holds the claim too, as `berth up`'s NATS and services do.
HOLDER_WITH_CHILD = """
import subprocess, sys, time
from pathlib import Path
from berth_cli.data_dir_claim import DataDirClaim
claim = DataDirClaim(Path(sys.argv[1]))
claim.take()
child = subprocess.Popen(["sleep", "60"], pass_fds=(claim.descriptor,))
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_child_given_the_claim_keeps_it_past_its_killed_parent(tmp_path: Path) -> None:
    """`berth up` killed by SIGKILL: its children drain for seconds; until the last has
    exited, no new stack may start on the directory (a second NATS on a store in use)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", HOLDER_WITH_CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        _end(parent, "kill")
        with pytest.raises(DataDirInUse):
            DataDirClaim(tmp_path).take()
    finally:
        os.kill(child, signal.SIGKILL)
    claim = DataDirClaim(tmp_path)
    for _ in range(100):  # the child is reaped by init: its descriptor closes as it dies
        try:
            claim.take()
            break
        except DataDirInUse:
            time.sleep(0.05)
    assert claim.held
    claim.release()


def test_a_filesystem_without_locks_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An NFS mount without locks: a clear error naming the file and what to do, and no
    descriptor left open."""

    def no_locks(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(RuntimeError) as refused:
        DataDirClaim(tmp_path).take()
    assert str(refused.value) == (
        f"cannot lock {tmp_path / CLAIM_FILE}: {os.strerror(errno.ENOLCK)}; give --data-dir a"
        " directory on a local filesystem"
    )
    assert len(os.listdir("/proc/self/fd")) == before

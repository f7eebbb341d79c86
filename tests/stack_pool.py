"""Fresh `berth up` stacks for the ``stack`` fixture, started ahead, stopped behind.

Every test that asks for ``stack`` still gets a stack of its own that no other test touched:
started for it alone, stopped after it. Only the waiting moves: the next stack test's stack
starts while the current one runs (and waits, idle, through any tests between them), and a
used stack stops in the background while the next test runs, so a test waits neither the
start (~1.5 s idle, ~4 s on a loaded machine: five Python processes importing) nor the stop
(~1 s: the services drain).

The spare starts at the lowest CPU priority (nice 19), so its imports take only what the
running test leaves idle and do not slow the test beside it (several tests wait on windows of
a few seconds); it is put back to normal priority, every thread of every process, before a
test uses it or waits for it. Only a process that may raise priorities again (root, as CI
runs) starts spares; otherwise each stack starts when its test asks, as before.

Two `berth up` never start at once in this session (each takes the services' default ports
when they look free, so two starting together could both pick the same): the next stack
starts only once the current one is ready, and :meth:`StackPool.settle` waits for a starting
spare before any test that does not take it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from berth_cli.launcher import LiveStack

__all__ = ["MAY_RAISE_PRIORITY", "SPARE_NICE", "StackPool", "StartingStack"]

SPARE_NICE = 19
MAY_RAISE_PRIORITY = hasattr(os, "geteuid") and os.geteuid() == 0


class StartingStack:
    """One `berth up` launched from the caller's thread (its environment is the caller's at
    that instant), waited for on a thread of its own."""

    def __init__(self, data_dir: Path, env: Mapping[str, str], *, nice: int = 0) -> None:
        self.stack = LiveStack(data_dir, env=dict(env))
        if nice:  # before it spawns anything (it imports first): its children inherit it
            _renice(self.stack.process.pid, nice)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._wait, name="stack-start", daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        try:
            self.stack.wait_ready()
        except BaseException as error:  # handed to whoever takes this stack
            self.error = error
            self.stack.stop()

    def hurry(self) -> None:
        """Back to full priority, and wait until it is ready (or failed)."""
        _renice(self.stack.process.pid, 0)  # what it spawns from now on runs at full priority
        self.thread.join()
        for pid in self.stack.pids.values():
            _renice(pid, 0)

    def ready(self) -> LiveStack:
        self.hurry()
        if self.error is not None:
            raise self.error
        return self.stack


def _renice(pid: int, nice: int) -> None:
    """Set every thread of process ``pid`` to ``nice`` (Linux's nice is per thread; one
    started meanwhile by a thread not yet set is found by the next pass)."""
    for _ in range(5):
        try:
            threads = [int(task) for task in os.listdir(f"/proc/{pid}/task")]
        except OSError:  # gone, or no /proc
            return
        left = 0
        for thread in threads:
            try:
                if os.getpriority(os.PRIO_PROCESS, thread) != nice:
                    os.setpriority(os.PRIO_PROCESS, thread, nice)
                    left += 1
            except ProcessLookupError:  # that thread ended meanwhile
                pass
        if not left:
            return


class StackPool:
    """Stacks made in ``new_dir()`` folders with ``env``, one at a time; see the module doc."""

    def __init__(self, new_dir: Callable[[], Path], env: Mapping[str, str]) -> None:
        self.new_dir = new_dir
        self.env = dict(env)
        self.spare: StartingStack | None = None
        self.stopping: list[threading.Thread] = []

    def take(self, *, another_wanted: bool) -> LiveStack:
        """A ready stack nobody used; with ``another_wanted``, the next one starts now."""
        starting, self.spare = self.spare, None
        running = (starting or StartingStack(self.new_dir(), self.env)).ready()
        if another_wanted and MAY_RAISE_PRIORITY:
            self.spare = StartingStack(self.new_dir(), self.env, nice=SPARE_NICE)
        return running

    def settle(self) -> None:
        """Wait until no stack of this pool is starting (the spare is ready or failed)."""
        if self.spare is not None:
            self.spare.hurry()

    def release(self, running: LiveStack) -> None:
        """Stop a used stack in the background."""
        stopping = threading.Thread(target=running.stop, name="stack-stop", daemon=True)
        stopping.start()
        self.stopping.append(stopping)

    def close(self) -> None:
        """Stop the unused spare and wait for every stop."""
        if self.spare is not None:
            self.spare.hurry()
            self.spare.stack.stop()
            self.spare = None
        for stopping in self.stopping:
            stopping.join()
        self.stopping.clear()

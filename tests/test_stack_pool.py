"""The ``stack`` fixture's pool (tests/stack_pool.py): a spare started at low priority is a
fresh stack of its own, at normal priority in every thread once a test takes it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from berth_cli.launcher import LiveStack
from tests.conftest import STACK_ENV
from tests.stack_pool import MAY_RAISE_PRIORITY, SPARE_NICE, StackPool


def _nice_of_every_thread(stack: LiveStack) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for name, pid in {"berth up": stack.process.pid, **stack.pids}.items():
        tasks = os.listdir(f"/proc/{pid}/task")
        found[name] = {os.getpriority(os.PRIO_PROCESS, int(task)) for task in tasks}
    return found


@pytest.mark.skipif(not MAY_RAISE_PRIORITY, reason="spares start only where priority is restored")
def test_a_spare_is_its_own_stack_and_runs_at_normal_priority_once_taken(tmp_path: Path) -> None:
    folders = iter([tmp_path / "first", tmp_path / "second"])
    pool = StackPool(lambda: next(folders), STACK_ENV)
    taken: list[LiveStack] = []
    try:
        taken.append(pool.take(another_wanted=True))
        assert pool.spare is not None
        starting = pool.spare.stack.process.pid
        assert os.getpriority(os.PRIO_PROCESS, starting) == SPARE_NICE  # it waits its turn
        taken.append(pool.take(another_wanted=False))
        first, second = taken
        assert second.process.pid == starting and pool.spare is None
        assert first.url != second.url and first.data_dir != second.data_dir
        assert set(second.pids) == set(first.pids)  # the whole stack: NATS, services, console
        assert all(nice == {0} for nice in _nice_of_every_thread(second).values()), (
            _nice_of_every_thread(second)
        )
    finally:
        for running in taken:
            pool.release(running)
        pool.close()
    assert all(running.process.poll() is not None for running in taken)

"""bench/failover.py's last audit: a workload that finishes between the read of admission's
list and the read of the log is not counted lost (audit_at_end reads the list first)."""

from __future__ import annotations

import pytest

from bench.failover_audit import audit_at_end
from shared.events import AnyEvent, LeaderElected
from tests.test_preemption_fold_kinds import submitted
from tests.test_preemption_holds import finished

CREATED = {"a": "a", "b": "b"}  # uid -> name (the tests' refs use the name as uid)


def log(*finishes: str) -> list[AnyEvent]:
    return [submitted("a"), submitted("b"), *(finished(name) for name in finishes)]


# b's only finish comes from a deposed watcher (term 0, after term 1's marker): void.
VOID_FINISH = [*log("a"), LeaderElected(source="watcher", term=1, role="watcher", holder="w-2")]
VOID_FINISH.append(finished("b"))


@pytest.mark.parametrize(
    ("reads", "listed", "lost", "still_known", "reason"),
    [
        (
            [log("a"), log("a", "b")],
            set(),
            [],
            [],
            "b finished while admission's list was read: the second read of the log has it",
        ),
        ([log("a"), log("a")], {"default/b"}, [], ["default/b"], "b still queued: listed"),
        ([log("a"), log("a")], set(), ["default/b"], [], "b neither finished nor listed: lost"),
        ([log("a", "b")], set(), [], [], "all finished: the list is not read"),
        (
            [VOID_FINISH, VOID_FINISH],
            {"default/b"},
            [],
            ["default/b"],
            "b's only finish is void (the fence, as the audit reads the log): the list is read",
        ),
    ],
)
async def test_the_list_is_read_before_the_log_it_is_checked_against(
    reads: list[list[AnyEvent]],
    listed: set[str],
    lost: list[str],
    still_known: list[str],
    reason: str,
) -> None:
    order: list[str] = []

    async def read() -> list[AnyEvent]:
        order.append("log")
        return reads[order.count("log") - 1]

    def known() -> set[str]:
        order.append("list")
        return listed

    _, audited = await audit_at_end(read, CREATED, known)
    assert (audited.lost, audited.still_known) == (lost, still_known), reason
    assert order == (["log"] if len(reads) == 1 else ["log", "list", "log"]), reason


async def test_a_log_already_found_all_finished_is_audited_without_reading_again() -> None:
    """The drive's last poll found every Job finished: that log is audited, neither the log
    nor admission's list read again."""
    order: list[str] = []

    async def read() -> list[AnyEvent]:
        order.append("log")
        return log("a")

    def known() -> set[str]:
        order.append("list")
        return set()

    events, audited = await audit_at_end(read, CREATED, known, log("a", "b"))
    assert order == [], "nothing read again"
    assert (audited.finished, audited.lost, len(events)) == (2, [], 4)

"""The opt-in borrowing rule's bookkeeping: who waits for room, at which rank."""

from services.admission.waiting import Rank, WaitingForRoom


def by_priority(priority: int) -> Rank:
    return Rank(0.0, -priority)  # the rank without wait targets


def test_best_waiting_priority_per_root() -> None:
    waiting = WaitingForRoom()
    assert waiting.best("c") is None
    waiting.add("big-1", "c", by_priority(200))
    waiting.add("big-2", "c", by_priority(200))
    waiting.add("mid", "c", by_priority(100))
    waiting.add("other", "d", by_priority(50))
    assert (waiting.best("c"), waiting.best("d")) == (by_priority(200), by_priority(50))
    # One of two at the top leaves: the best is unchanged, nobody may borrow yet.
    assert waiting.remove("big-1") is None
    assert waiting.remove("mid") is None
    # The last at the top leaves: the root is returned, its yielders get a retry.
    assert waiting.remove("big-2") == "c"
    assert waiting.best("c") is None
    assert waiting.remove("unknown") is None


def test_add_again_moves_a_workload_to_its_new_rank() -> None:
    waiting = WaitingForRoom()
    waiting.add("w", "c", by_priority(10))
    waiting.add("w", "c", by_priority(30))  # boosted
    assert waiting.best("c") == by_priority(30)
    assert waiting.remove("w") == "c"
    assert waiting.best("c") is None


def test_with_deadlines_the_earliest_deadline_is_best_whatever_its_priority() -> None:
    waiting = WaitingForRoom()
    waiting.add("old-small", "c", Rank(24.0, -50))
    waiting.add("new-large", "c", Rank(31.0, -200))
    assert waiting.best("c") == (24.0, -50)
    assert waiting.remove("new-large") is None  # not the best: nobody's wait changes
    assert waiting.remove("old-small") == "c"


def test_stale_entries_do_not_pile_up() -> None:
    waiting = WaitingForRoom()
    waiting.add("keeper", "c", Rank(0.0, -1))
    for round_ in range(1000):
        waiting.add(f"w{round_}", "c", Rank(float(round_), 0))
        waiting.remove(f"w{round_}")
    assert waiting.best("c") == (0.0, -1)
    assert len(waiting._heaps["c"]) < 200  # rebuilt, not 1001 entries

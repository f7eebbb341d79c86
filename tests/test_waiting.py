"""The opt-in borrowing rule's bookkeeping: who waits for room, at which priority."""

from services.admission.waiting import WaitingForRoom


def test_highest_waiting_priority_per_root() -> None:
    waiting = WaitingForRoom()
    assert waiting.highest("c") is None
    waiting.add("big-1", "c", 200)
    waiting.add("big-2", "c", 200)
    waiting.add("mid", "c", 100)
    waiting.add("other", "d", 50)
    assert (waiting.highest("c"), waiting.highest("d")) == (200, 50)
    # One of two at the top leaves: the highest is unchanged, nobody may borrow yet.
    assert waiting.remove("big-1") is None
    assert waiting.remove("mid") is None
    # The last at the top leaves: the root is returned, its yielders get a retry.
    assert waiting.remove("big-2") == "c"
    assert waiting.highest("c") is None
    assert waiting.remove("unknown") is None


def test_add_again_moves_a_workload_to_its_new_priority() -> None:
    waiting = WaitingForRoom()
    waiting.add("w", "c", 10)
    waiting.add("w", "c", 30)  # boosted
    assert waiting.highest("c") == 30
    assert waiting.remove("w") == "c"
    assert waiting.highest("c") is None

"""When the deciding leader runs its next scheduling pass (:class:`PassPacing`).

A pass retries the parked heads of every cohort whose usage changed, however few events
changed it: under a steady stream of finishes and submissions, passes run back to back and
each tries the same hundreds of heads again for a handful of new events. Spacing passes by
their own cost lets the events of that time be folded first and decided in one pass. The
rule is :func:`pass_spacing`; a pass that takes a millisecond is followed within a few, so
a small cluster sees no delay.
"""

from __future__ import annotations

__all__ = ["MAX_PASS_SPACING_S", "PASS_SPACING_FACTOR", "PassPacing", "pass_spacing"]

# Folding between passes, per unit of the last pass's own duration.
PASS_SPACING_FACTOR = 3.0
# The longest wait between passes: the longest backoff of Kueue's scheduler loop.
MAX_PASS_SPACING_S = 0.1


def pass_spacing(last_pass_s: float) -> float:
    """How long after a scheduling pass ended the next may start: ``PASS_SPACING_FACTOR``
    times that pass's duration, at most ``MAX_PASS_SPACING_S``.

    So scheduling passes of up to ``MAX_PASS_SPACING_S / PASS_SPACING_FACTOR`` take at most
    a quarter of the leader's time while events keep coming (the duration counted is the
    pass's alone, not making and publishing its events), the work each retries (the parked
    heads of changed cohorts) is paid once per spacing, not once per event that arrived,
    and no event waits more than the cap (plus one pass) for its decision. The cost of a
    pass sets the pace, not a setting: a cluster whose passes are cheap is decided as soon
    as anything arrives."""
    return min(MAX_PASS_SPACING_S, PASS_SPACING_FACTOR * max(0.0, last_pass_s))


class PassPacing:
    """Whether a pass is owed (events arrived since the last) and due (its spacing past).

    Times are ``time.monotonic()`` seconds, passed in: the service reads the clock once."""

    def __init__(self) -> None:
        self.owed = False
        self.not_before = 0.0  # the next pass's earliest start

    def arrived(self) -> None:
        """Events were folded: a pass is owed."""
        self.owed = True

    def take(self, now: float) -> bool:
        """Whether a pass runs now: one is owed and its spacing has passed. If so, nothing
        is owed any more, whether or not the pass then decides anything (a config burst
        still settling, pods not ready): the next events owe the next one."""
        if not (self.owed and now >= self.not_before):
            return False
        self.owed = False
        return True

    def wait(self, now: float, idle: float) -> float:
        """How long the service may wait for events before it must look again: until the
        owed pass is due, else ``idle``."""
        if not self.owed:
            return idle
        return min(idle, max(0.0, self.not_before - now))

    def ran(self, ended: float, seconds: float) -> None:
        """A pass ran for ``seconds`` and ended at ``ended``, however it was started (a
        takeover, a backoff's end): it decided on everything folded, so nothing is owed,
        and the next starts no sooner than its spacing after it."""
        self.owed = False
        self.not_before = ended + pass_spacing(seconds)

    def clear(self) -> None:
        """Nothing is owed: this replica does not decide (a standby, a suspended leader).
        A replica that comes to decide runs a pass at once, owed or not."""
        self.owed = False

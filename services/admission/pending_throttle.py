"""Coalesces a pending workload's updates on the bus.

Kueue's pending messages carry numbers ("3 more needed"), so a backlog re-judged after every
release in its cohort gets a new message each time: in the Kueue benchmark a large share of
all events, each stored by NATS and read by three services. A change that matters (the
ClusterQueue, the reason, whether preemption may help, what is contested) is published at
once; a new message alone waits until ``interval`` has passed since the workload's last
publish, and then the latest one goes out. Nothing is lost: the newest message always lands.
A report that says what the workload's last published one said (a message that changed and
changed back within the interval) is no news: it is not sent, and it ends a hold meanwhile.

A workload's first report waits ``interval`` too, unless preemption may help (the preemption
service acts on it): a workload admitted within that second was never worth a broadcast (in
the large-scale benchmark, one Pending per workload made admission, reading its own echoes,
fall far behind the stream). ``berth get`` shows the reason at once either way.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Generator
from operator import itemgetter

import msgspec
from msgspec.structs import astuple

from services.admission.interning import kept_once
from shared.events import WorkloadPending, WorkloadRef, new_event_id

__all__ = ["PendingThrottle", "Said", "said"]

Material = tuple[str, str, bool, tuple[tuple[str, str, int], ...]]
# A report published: its material, when, its message and priority (the rest of what it
# says but its time).
Published = tuple[Material, float, str, int]
# What offer reads of a report but its id and workload: its material and its saying (said).
Said = tuple[Material, WorkloadPending]

# One tuple per distinct material, shared by the workloads reported alike (a pass reports
# hundreds of thousands with a few thousand distinct ones).
_MATERIALS: dict[Material, Material] = {}

# What a report says beside its id and its workload: the fields by position, lists as tuples.
_SAYS = itemgetter(
    *(
        i
        for i, name in enumerate(WorkloadPending.__struct_fields__)
        if name not in ("id", "workload")
    )
)
# One held report per distinct saying (id "", the first such workload's identity), shared
# by every workload held with it.
_SAYINGS: dict[tuple[object, ...], WorkloadPending] = {}


def _saying(event: WorkloadPending) -> WorkloadPending:
    """What ``event`` says, kept once: a report with every field of it but the id (empty)
    and the workload (the first such workload's: only the other fields count)."""
    key = tuple([tuple(v) if type(v) is list else v for v in _SAYS(astuple(event))])
    return kept_once(_SAYINGS, key, lambda: msgspec.structs.replace(event, id=""))


def _material(event: WorkloadPending) -> Material:
    """What makes a report's change matter (the module docstring: published at once): its
    ClusterQueue, reason, whether preemption may help and what is contested, kept once. A
    report whose material is unchanged and whose message alone differs waits its interval."""
    contested = tuple((c.flavor, c.resource, c.amount) for c in event.contested)
    material = (event.cluster_queue, event.reason, event.preemption_may_help, contested)
    return kept_once(_MATERIALS, material, lambda: material)


def said(event: WorkloadPending) -> Said:
    """What :meth:`PendingThrottle.offer` reads of ``event`` but its id and workload: the
    same for every report alike in all else, so a pass finds it once for them all."""
    return _material(event), _saying(event)


class PendingThrottle:
    """Held reports are kept lean, as a pass can hold most of a million: what a report says,
    kept once for every workload held with the same saying, without an event id (a held
    event is given a new one when it goes out: it was never published with the first); due
    in batches, one list per release time of the workloads held until then."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._published: dict[str, Published] = {}  # uid -> its report published last
        self._held: dict[str, WorkloadPending] = {}  # uid -> what its newest report says
        # (when they may go out, the workloads), a heap; one batch per time (_batches).
        self._due: list[tuple[float, list[WorkloadRef]]] = []
        self._batches: dict[float, list[WorkloadRef]] = {}
        # uid -> how many of its batch entries are left from holds ended since (see due).
        self._stale: dict[str, int] = {}
        # (now, now + interval): one float for a pass's first reports (NaN equals no now).
        self._last = (float("nan"), 0.0)

    def offer(self, event: WorkloadPending, now: float, alike: Said | None = None) -> bool:
        """True: publish ``event`` now. False: it is held, and :meth:`due_pieces` will
        return it; or it says what the workload's last published report said, and is
        dropped. ``alike``: :func:`said` of a report alike in all but its id and workload,
        if the caller has it (else found here)."""
        uid = event.workload.uid
        material = _material(event) if alike is None else alike[0]
        saying = None if alike is None else alike[1]
        last = self._published.get(uid)
        if (
            last is not None
            and last[0] == material
            and last[2] == event.message
            and last[3] == event.priority
        ):
            self._end_hold(uid)  # it says what was published last: no news (a held one ends)
            return False
        if last is None and not event.preemption_may_help:
            if self._last[0] != now:
                self._last = (now, now + self.interval)
            return self._hold(uid, event, self._last[1], saying)  # a first report waits
        if last is not None and last[0] == material and now - last[1] < self.interval:
            return self._hold(uid, event, last[1] + self.interval, saying)
        self._published[uid] = (material, now, event.message, event.priority)
        self._end_hold(uid)
        return True

    def _hold(
        self, uid: str, event: WorkloadPending, until: float, saying: WorkloadPending | None
    ) -> bool:
        if uid not in self._held:  # held already: a newer message keeps the time set
            batch = self._batches.get(until)
            if batch is None:
                batch = self._batches[until] = []
                heapq.heappush(self._due, (until, batch))
            batch.append(event.workload)
        self._held[uid] = _saying(event) if saying is None else saying
        return False

    def _end_hold(self, uid: str) -> None:
        if self._held.pop(uid, None) is not None:  # its batch entry is stale now
            self._stale[uid] = self._stale.get(uid, 0) + 1

    def due(self, now: float) -> list[WorkloadPending]:
        """Held events whose interval has passed, each with a new id; they count as
        published now (:meth:`due_pieces` in one list, for tests: the service releases them
        in pieces)."""
        return [event for piece in self.due_pieces(now, sys.maxsize) for event in piece]

    def due_pieces(self, now: float, size: int) -> Generator[list[WorkloadPending], None, None]:
        """:meth:`due` in pieces of at most ``size`` events, each made when it is reached,
        so that a pass's worth of first reports released at once (most of a million) is
        never all in memory together; each counts as published once made.

        A workload's entries come out in the order they were made (a later hold never
        goes out earlier: the clock only moves on), so its first entries are those of the
        holds that ended (published or forgotten), counted in ``_stale``: they are skipped,
        and the one left is its live hold's. A batch left before its end (the caller
        stopped) is put back with what it had left."""
        piece: list[WorkloadPending] = []
        # Reports released together share their stamp: one Published per saying (kept with
        # the saying, so that no other saying takes its id meanwhile).
        stamps: dict[int, tuple[WorkloadPending, Published]] = {}
        while self._due and self._due[0][0] <= now:
            when, batch = heapq.heappop(self._due)
            del self._batches[when]
            taken = 0  # of the batch's entries
            try:
                while taken < len(batch):
                    ref = batch[taken]
                    taken += 1
                    uid = ref.uid
                    stale = self._stale.get(uid)
                    if stale is not None:
                        if stale == 1:
                            del self._stale[uid]
                        else:
                            self._stale[uid] = stale - 1
                        continue
                    held = self._held.pop(uid, None)
                    if held is None:  # never: an entry without a hold is counted stale
                        continue
                    kept = stamps.get(id(held))
                    if kept is None:
                        published = (_material(held), now, held.message, held.priority)
                        kept = stamps[id(held)] = (held, published)
                    self._published[uid] = kept[1]
                    piece.append(msgspec.structs.replace(held, id=new_event_id(), workload=ref))
                    if len(piece) >= size:
                        yield piece
                        piece = []
            finally:
                if taken < len(batch):  # stopped midway: the rest is due as it was
                    rest = batch[taken:]
                    later = self._batches.get(when)  # held since, due at the same time
                    if later is not None:
                        later[:0] = rest
                    else:
                        self._batches[when] = rest
                        heapq.heappush(self._due, (when, rest))
        if piece:
            yield piece

    def forget(self, uid: str) -> None:
        """The workload is no longer pending (admitted, finished, deleted)."""
        self._published.pop(uid, None)
        self._end_hold(uid)

"""Per-ClusterQueue pending queues: ordering, StrictFIFO blocking, BestEffortFIFO parking.

Order is Kueue's: effective priority descending, then queue time, then uid; with wait targets
(services/admission/deadlines.py) the deadline comes before all three. Each queue is a
binary heap with lazy deletion: a record's ``key`` is the identity of its live heap entry, so
changing or removing a record only replaces ``key`` and stale entries are dropped when they
surface. Nothing is ever re-sorted wholesale.

Like Kueue, a BestEffortFIFO workload that did not fit is *parked* (moved aside) and is not
retried until something that could help happens (quota released in its cohort, config
change); a StrictFIFO queue whose head did not fit is *blocked* until then.

Parked workloads are grouped by shape (their pod sets). When something changes, only the first
of each group is tried again; the next one of a group is released only once one of that
shape has been admitted. Same-shaped workloads behind one that does not fit would not fit
either, so a backlog of a thousand identical jobs costs one try per change, not a thousand
(they keep their last pending message meanwhile, as Kueue's non-head workloads do).
Without fair sharing or yielding, a pass *offers* those first ones instead of moving them
(``offer_parked``): one that would fail again exactly as it did stays where it is.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Final

import msgspec

from services.admission.flavors import pod_sets_shape
from services.admission.interning import TABLE_LIMIT, kept_once
from services.admission.model import QueuedWorkload
from services.admission.waiting import Rank
from shared.events import FlavorAssignment, PodSet, WorkloadRef
from shared.quota import FlavorResource

if TYPE_CHECKING:
    from services.admission.settled import Reader

__all__ = [
    "ADMITTED",
    "FINISHED",
    "PENDING",
    "ClusterQueueQueue",
    "OrderKey",
    "Record",
    "State",
    "order_key",
    "placeholder_workload",
    "standing",
]


class State(Enum):
    """Where a workload is in the core's books."""

    PENDING = "pending"
    ADMITTED = "admitted"
    FINISHED = "finished"


# The members as module constants: a global is one dict lookup, an Enum member an attribute
# lookup on its class that goes through the enum's metaclass.
PENDING, ADMITTED, FINISHED = State.PENDING, State.ADMITTED, State.FINISHED


# A queued workload's place in its ClusterQueue, smaller first; the identity of the object is
# the identity of the record's live heap entry (see the module docstring). Its fields, by name:
RANK: Final = 0  # -2 nominated, -1 reserved, 0 anyone else
DEADLINE: Final = 1  # 0 without wait targets (and for a reservation)
MINUS_PRIORITY: Final = 2  # -effective priority (0 for a reservation: its clock decides)
CLOCK: Final = 3  # queue time; a reservation's ageing clock (``since``)
UID: Final = 4
# A plain tuple, not a NamedTuple: the garbage collector stops tracking an exact tuple of
# numbers and strings, not a subclass's, and every long-lived key that stays tracked is walked
# again by each full collection.
OrderKey = tuple[int, float, int, float, str]


def order_key(
    priority: int,
    queue_time: float,
    uid: str,
    *,
    deadline: float = 0.0,
    reserved: bool = False,
    nominated: bool = False,
    since: float = 0.0,
) -> OrderKey:
    """Nominated, then reserved workloads go first; then the earliest deadline (all 0 without
    wait targets), then Kueue's order. Reservations among themselves go by ageing clock
    (``since``), earliest first, whatever their priorities: the starvation bound counts on
    that order, which never changes (docs/ageing.md)."""
    if reserved and not nominated:
        return (-1, 0.0, 0, since, uid)
    rank = 2 if nominated else 1 if reserved else 0
    return (-rank, deadline, _minus(priority), queue_time, uid)


# One int per distinct negated priority, shared by the keys: Python keeps only -5..256 once,
# and an int made anew for each key is 28 bytes of it.
_MINUS: dict[int, int] = {}


def _minus(priority: int) -> int:
    minus = _MINUS.get(priority)  # the hit without kept_once's call: it is every key
    if minus is None:
        minus = kept_once(_MINUS, priority, lambda: -priority)
    return minus


def standing(key: OrderKey) -> Rank:
    """Where a queued workload stands against another, reservations and nominations aside
    (the deadline is 0 without wait targets)."""
    return Rank(key[DEADLINE], key[MINUS_PRIORITY])


# One bytes object per distinct shape, shared by the records of that shape (the table starts
# over at TABLE_LIMIT, as services/admission/interning.py's do).
_SHAPES: dict[bytes, bytes] = {}
# The shape of each pod sets list lately seen, by the list's id, the list kept with it (so no
# other object takes that id while the entry stands); starts over at TABLE_LIMIT.
_SHAPE_OF: dict[int, tuple[list[PodSet], bytes]] = {}


def shape_of(pod_sets: list[PodSet]) -> bytes:
    """The shape of ``pod_sets`` (``pod_sets_shape``, one bytes object per distinct shape),
    encoded once per list object, not once per workload: the service interns pod sets
    (services/admission/interning.py), so the workloads of a shape share one list. A list
    is never changed once it is a workload's (a record's shape is computed once anyway), so
    the list it was computed for has that shape still; another list, even an equal one, is
    encoded anew."""
    found = _SHAPE_OF.get(id(pod_sets))
    if found is not None and found[0] is pod_sets:
        return found[1]
    encoded = pod_sets_shape(pod_sets)
    shape = kept_once(_SHAPES, encoded, lambda: encoded)
    if len(_SHAPE_OF) >= TABLE_LIMIT:
        _SHAPE_OF.clear()
    _SHAPE_OF[id(pod_sets)] = (pod_sets, shape)
    return shape


# The pod sets of every placeholder's workload (see Record.placeholder): never a submitted one's.
_NO_POD_SETS: Final[list[PodSet]] = []


def placeholder_workload(ref: WorkloadRef) -> QueuedWorkload:
    """The workload of a restored admission until its submit is seen (Record.placeholder)."""
    return QueuedWorkload(ref=ref, local_queue="", pod_sets=_NO_POD_SETS, queue_time=0.0)


class Record(msgspec.Struct, gc=False, eq=False):
    """The scheduler's state for one workload. Never tracked by the garbage collector (a
    million of them would make every full collection walk them): it refers to no object
    that refers back to it."""

    wl: QueuedWorkload
    state: State = PENDING
    cq: str = ""  # resolved (pending) or admitting (admitted) ClusterQueue
    base: int | None = None  # resolved base priority
    key: OrderKey | None = None  # live heap entry; None when not queued
    parked: bool = False
    emitted: tuple[str, str, bool] | None = None  # last (reason, message, may_help)
    generation: int = 0
    # Empty and shared until admitted: no list of its own per pending record.
    assignments: Sequence[FlavorAssignment] = ()
    usage: dict[FlavorResource, int] | None = None
    shape_key: bytes | None = None  # see shape

    @property
    def shape(self) -> bytes:
        """The pod sets as a hashable key (computed once): what the flavor assigner reads."""
        if self.shape_key is None:
            self.shape_key = shape_of(self.wl.pod_sets)
        return self.shape_key

    @property
    def placeholder(self) -> bool:
        """A restored admission whose submit has not been seen yet: its workload is
        ``placeholder_workload``'s (told by its pod sets' identity, so that no field of a
        million records holds a flag that is almost never set)."""
        return self.wl.pod_sets is _NO_POD_SETS

    def replace_workload(self, wl: QueuedWorkload) -> None:
        self.wl = wl
        self.shape_key = None

    @property
    def effective_priority(self) -> int:
        return (self.base or 0) + self.wl.boost

    @property
    def lq_name(self) -> str:
        return self.wl.local_queue or "default"


class ClusterQueueQueue:
    """The pending workloads of one ClusterQueue."""

    __slots__ = (
        "_first",
        "_first_key",
        "_offers",
        "_taken",
        "blocked",
        "heap",
        "name",
        "offered",
        "parked",
        "readers",
        "readers_start",
        "records",
        "size",
        "strict",
    )

    def __init__(self, strict: bool, records: dict[str, Record]) -> None:
        self.strict = strict
        self.name = ""  # its ClusterQueue's (Placement._new_queue sets it)
        self.heap: list[OrderKey] = []
        # Set aside by BestEffortFIFO: shape -> heap of their keys (lazy deletion too).
        self.parked: dict[bytes, list[OrderKey]] = {}
        self.records = records  # shared uid -> Record map, to tell live entries from stale
        self.blocked = False  # StrictFIFO head did not fit; wait for a change
        self.size = 0  # queued records, parked included
        # During a pass (see offer_parked): the parked records that count as queued again,
        # largest key first; empty between passes.
        self.offered: list[Record] = []
        self._first: Record | None = None  # the head last found (see head)
        self._first_key: OrderKey | None = None  # its key then (see head)
        self._offers: list[Record] | None = None  # see offer_parked
        # The offered record last taken, its key then, and the offers it was taken from
        # (see _parked_back); None once anything else moves a parked record.
        self._taken: tuple[Record, OrderKey, list[Record]] | None = None
        # The settled readers of its records' shapes (assigning.py: _reader, _queue_readers).
        self.readers: dict[bytes, Reader] = {}
        self.readers_start = 0  # the settled tables' start they belong to (SettledFailures.starts)

    def _live(self, key: OrderKey) -> Record | None:
        record = self.records.get(key[UID])
        if record is None or record.key is not key or record.parked:
            return None
        return record

    def push(self, record: Record) -> None:
        """Queue a record (its ``key`` must be set); unblocks a StrictFIFO queue it heads."""
        assert record.key is not None
        record.parked = False
        heapq.heappush(self.heap, record.key)
        self.size += 1
        if self.blocked and self.heap[0] is record.key:
            self.blocked = False

    def remove(self, record: Record) -> None:
        """Forget a record; its heap entry goes stale (lazy deletion)."""
        if record.key is None:
            return
        if record.parked:
            self._offers = self._taken = None
        if self.blocked and self.heap and self.heap[0] is record.key:
            self.blocked = False  # the blocking head is gone: the next one deserves a try
        record.key = None
        record.parked = False
        self.size -= 1

    def head(self) -> Record | None:
        """The first live record of the heap. The one last found is known without looking
        it up while its key is still the top and it is not parked: a record leaves
        ``records`` only unqueued (its key None), so that is ``_live``'s answer. And while
        the top is still the very key it had when found, but it is parked or has another
        key or none (just set aside or admitted: what a pass does to every head), that entry
        is stale without a look either: a key object is made for one record only (each
        queuing makes a new one), so no record but that one can be live at it."""
        heap = self.heap
        first = self._first
        if first is not None and heap:
            top = heap[0]
            if first.key is top and not first.parked:
                return first
            if top is self._first_key:
                heapq.heappop(heap)
        while heap:
            top = heap[0]
            record = self._live(top)
            if record is not None:
                self._first, self._first_key = record, top
                return record
            heapq.heappop(heap)
        return None

    def park(self, record: Record) -> None:
        """Set a BestEffortFIFO head aside until something changes."""
        key = record.key
        assert key is not None
        record.parked = True
        shape = record.shape_key or record.shape  # the property's call spared
        group = self.parked.get(shape)
        if group is None:
            group = self.parked[shape] = []
        if self._parked_back(record, group):
            group[0] = key  # the entry it left, of the same value: the heap stays a heap
        else:
            self._offers = None
            heapq.heappush(group, key)

    def _parked_back(self, record: Record, group: list[OrderKey]) -> bool:
        """Whether ``record``, being parked, is the offered record last taken
        (``take_offered``) coming back as it was, nothing else parked, unparked or removed
        parked in its queue since: then every shape's first parked record is what it was
        when the offers were made, and the offers are those again, as a new list (settled.py:
        ``quiet`` knows offers by their list object, and this one's record may have a new
        message). It comes back at the top of its shape's group, where its entry was: an
        offered record is its group's top (``_first_parked``), and only a key of the same
        value is pushed in between (an entry going before it would be another record's)."""
        taken, self._taken = self._taken, None
        if taken is None or taken[0] is not record or taken[1] != record.key:
            return False
        if not group or group[0] is not taken[1]:
            return False
        self._offers = taken[2].copy()
        return True

    def requeue_parked(self) -> None:
        """Something changed (quota freed, config): the first parked record of each shape
        gets another chance."""
        self.blocked = False
        for shape in list(self.parked):
            self.release_one(shape)

    def release_one(self, shape: bytes) -> None:
        """Queue again the first parked record of ``shape`` (one of that shape got in); an
        offered record counts as queued already (it is moved, and the next one released)."""
        group = self.parked.get(shape)
        while group:
            key = heapq.heappop(group)
            record = self.records.get(key[UID])
            if record is None or record.key is not key or not record.parked:
                continue  # removed, re-placed or released since
            self._unpark(record)
            if not self._withdraw(record):
                break  # else it was queued already (offered): release the next one too
        if group is not None and not group:
            del self.parked[shape]

    def _withdraw(self, record: Record) -> bool:
        """Take ``record`` off the offers; whether it was offered."""
        for index, offered in enumerate(self.offered):
            if offered is record:
                del self.offered[index]
                return True
        return False

    def _unpark(self, record: Record) -> None:
        """Move a parked record back into the queue (its group entry goes stale)."""
        key = record.key
        assert key is not None
        record.parked = False
        self._offers = self._taken = None
        # A fresh entry: the old one was popped (or is stale) when it was parked.
        record.key = (key[RANK], key[DEADLINE], key[MINUS_PRIORITY], key[CLOCK], key[UID])
        heapq.heappush(self.heap, record.key)

    # --- offers: requeue_parked without moving what fails again unchanged -------------------

    def offer_parked(self) -> None:
        """``requeue_parked`` for a pass that may set a record aside again as it is: the first
        parked record of each shape is *offered* (it counts as queued; ``candidate`` returns
        it in order) but stays where it is until ``take_offered`` moves it. A record left
        parked is exactly as ``requeue_parked`` then ``park`` would leave it; what is still
        offered at the end of the pass is moved by ``release_offered``.

        The offers are those of the last pass while no record was parked, unparked or
        removed parked since (``offers``: the same list object then)."""
        self.blocked = False
        self._taken = None
        if self._offers is None:
            self._offers = self._first_parked()
        self.offered = self._offers.copy()

    @property
    def offers(self) -> list[Record] | None:
        """The offers ``offer_parked`` made, while they are the same (None: changed since)."""
        return self._offers

    def _first_parked(self) -> list[Record]:
        """The first parked record of each shape, largest key first (stale entries at a
        group's top are dropped on the way)."""
        offered: list[tuple[OrderKey, Record]] = []
        records = self.records
        emptied: list[bytes] = []
        for shape, group in self.parked.items():
            while group:
                key = group[0]
                record = records.get(key[UID])
                if record is not None and record.key is key and record.parked:
                    offered.append((key, record))
                    break
                heapq.heappop(group)
            else:
                emptied.append(shape)
        for shape in emptied:
            del self.parked[shape]
        offered.sort(reverse=True)  # by key: keys are unique (their uid)
        return [record for _, record in offered]

    def candidate(self) -> Record | None:
        """The next record to try: the head, or the first offered record if it goes before
        (an offered record is still ``parked``)."""
        head = self.head()
        offered = self.offered
        if offered:
            record = offered[-1]
            assert record.key is not None
            if head is None or head.key is None or record.key < head.key:
                return record
        return head

    def take_offered(self, record: Record) -> None:
        """The offered ``record`` (``candidate``'s) is tried: it is queued again (if it is
        parked back as it was, the offers stand: ``_parked_back``)."""
        offers, key = self._offers, record.key
        self.offered.pop()
        self._unpark(record)
        if offers is not None and key is not None:
            self._taken = (record, key, offers)

    def skip_offered(self) -> None:
        """The offered record ``candidate`` returned stays parked, as it was."""
        self.offered.pop()

    def release_offered(self) -> None:
        """The end of the pass: what is still offered is queued again, as requeue_parked
        would have left it; and the record last taken is forgotten (``_parked_back`` is for
        one parked back in the pass that took it: a pass cut short by an exception may leave
        it taken and never parked)."""
        for record in self.offered:
            self._unpark(record)
        self.offered = []
        self._taken = None

    def parked_records(self) -> list[Record]:
        """The records set aside now, each once (a stale entry is skipped): O(parked)."""
        found: dict[str, Record] = {}
        for group in self.parked.values():
            for key in group:
                record = self.records.get(key[UID])
                if record is not None and record.parked and record.key is key:
                    found[key[UID]] = record
        return list(found.values())

    def pending(self) -> list[Record]:
        """Every queued record, in order (for visibility; O(n log n))."""
        seen: set[str] = set()
        result: list[Record] = []
        for key in self.heap:
            record = self.records.get(key[UID])
            if record is not None and record.key is key and key[UID] not in seen:
                seen.add(key[UID])
                result.append(record)
        for group in self.parked.values():
            for key in group:
                record = self.records.get(key[UID])
                if record is not None and record.parked and record.key is key:
                    if key[UID] not in seen:
                        seen.add(key[UID])
                        result.append(record)
        result.sort(key=lambda record: record.key or ())
        return result

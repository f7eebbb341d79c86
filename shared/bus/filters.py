"""What nats-server sends each consumer (:func:`consumer_filters`), and how a consumer reads a
stream written one message per event before batches (an older Berth, or
``BERTH_BUS_BATCHES=0``): one that starts before the first batch reads those per-workload
messages too, until it has passed them (docs/events.md "Batches").

Why: with batches a consumer is sent the batch subjects of the families it wants, not their
per-workload subjects (those hold only copies of batched events). A consumer that kept to the
batch subjects from the start would skip every event stored before them: admission's replay
would forget the quota held by earlier admissions, the watcher the admissions it had not yet
carried out.
"""

from __future__ import annotations

from collections.abc import Sequence

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.bus.batches import COPY_HEADER, BatchView
from shared.bus.errors import NotFound, translated
from shared.bus.settings import STREAM
from shared.fencing import LEASE_SUBJECTS
from shared.subjects import (
    BATCH_PREFIX,
    BATCHED_FAMILIES,
    FAMILY_PATTERNS,
    batched_filters,
    server_filters,
)

__all__ = ["BatchReads", "consumer_filters", "transition_filters", "unbatched_until"]

# Where a batched family's events were stored one message each: one look-up per root whose
# families are all batched (berth.wl.>, berth.cq.>, berth.job.>), else per family.
_ROOTS = {FAMILY_PATTERNS[family].split(".")[1] for family in BATCHED_FAMILIES}
_PROBES = sorted(
    {
        f"berth.{root}.>"
        if all(f in BATCHED_FAMILIES for f in FAMILY_PATTERNS if f.startswith(f"{root}."))
        else FAMILY_PATTERNS[family]
        for root in _ROOTS
        for family in BATCHED_FAMILIES
        if family.startswith(f"{root}.")
    }
)


async def unbatched_until(js: JetStreamContext, *, resume: int) -> int | None:
    """The stream sequence of the first batch at or after ``resume`` (the end of the stream
    if there is none yet), if a batched family has a message of its own before it, from
    ``resume`` on; else None: a consumer resuming at ``resume`` has nothing unbatched to
    read. A batch's copies are stored just before it: a family whose first message from
    ``resume`` is a copy was written with batches from there on."""
    with translated():
        last = (await js.stream_info(STREAM)).state.last_seq
    if last < resume:
        return None
    first_batch = await _first(js, f"{BATCH_PREFIX}>", resume)
    until = last + 1 if first_batch is None else first_batch[0]
    for probe in _PROBES:
        found = await _first(js, probe, resume)
        if found is not None and found[0] < until and not found[1]:
            return until
    return None


async def _first(js: JetStreamContext, subject: str, resume: int) -> tuple[int, bool] | None:
    """The sequence of the first message on ``subject`` from ``resume``, and whether it is
    a batch's per-workload copy."""
    try:
        with translated():
            message = await js.get_msg(STREAM, seq=resume, subject=subject, next=True)
    except NotFound:
        return None
    return message.seq or 0, COPY_HEADER in (message.headers or {})


def consumer_filters(subjects: Sequence[str], *, batching: bool) -> list[str]:
    """A consumer's ``filter_subjects``: its subjects and the lease markers, which travel with
    the events they fence (shared/fencing.py). With ``batching``, the batch subjects of the
    batched families it wants instead of their per-workload copies
    (:func:`shared.subjects.batched_filters`): the consumer expands them (``Consuming._decode``).

    Why the server filters and not the service: a message sent only to be dropped costs the
    service its framing, a delivery and a Python callback, most of what reading it costs. The
    server pays for it instead (it looks up each message's subject against the filters):
    bench/filtered_replay.py measures that, and bench/kueue_scheduler.py prints what each
    service is sent and decodes per subject.
    """
    if batching:
        return batched_filters([*subjects, LEASE_SUBJECTS])[0]
    return server_filters([*subjects, LEASE_SUBJECTS])


def transition_filters(subjects: Sequence[str]) -> list[str]:
    """A consumer's filters while it reads what was stored before the first batch: its
    subjects as they are (the events stored one message each), their batch subjects and the
    lease markers. It drops the per-workload copies among them by their header."""
    batched, _ = batched_filters([*subjects, LEASE_SUBJECTS])
    return server_filters([*subjects, LEASE_SUBJECTS, *batched])


class BatchReads:
    """Per consumer (by id of its pull subscription): what it keeps of the batches it is
    sent, and, while it reads what was stored before them, where that ends and its
    subjects."""

    def __init__(self) -> None:
        self.views: dict[int, BatchView] = {}
        self.unbatched: dict[int, tuple[int, list[str]]] = {}

    def passed(self, key: int, messages: Sequence[Msg]) -> list[str] | None:
        """The consumer's subjects, once ``messages`` took it past its unbatched ones (and
        then no more); None while it has not, or never had any."""
        pending = self.unbatched.get(key)
        if pending is None or not messages:
            return None
        until, subjects = pending
        if messages[-1].metadata.sequence.stream < until - 1:
            return None
        del self.unbatched[key]
        return subjects

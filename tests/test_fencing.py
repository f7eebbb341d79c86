"""The fence (shared/fencing.py): the rule case by case, then on a real stream through the Bus."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.bus import STREAM, Bus
from shared.bus.batches import record_of
from shared.bus.fences import fence_before
from shared.events import (
    AnyEvent,
    LeaderElected,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from shared.fencing import FENCED, Fence, Verdict, fenced_log
from tests.conftest import bus_auth

KEEP, MARKER, VOID = Verdict.KEEP, Verdict.MARKER, Verdict.VOID


def marker(role: str, term: int) -> LeaderElected:
    return LeaderElected(source=role, role=role, holder=f"{role}-x", term=term)


def event(source: str, term: int, name: str = "w") -> AnyEvent:
    return WorkloadSubmitted(
        source=source,
        term=term,
        workload=WorkloadRef("default", name, f"uid-{name}"),
        kind="Job",
        queue_name="q",
        pod_sets=[],
        created=now(),
    )


# (reason, events in stream order, the verdict on each)
CASES: list[tuple[str, list[AnyEvent], list[Verdict]]] = [
    (
        "before any marker nothing is void (an older Berth stamped no term)",
        [event("admission", 0)],
        [KEEP],
    ),
    (
        "the leader's own events stand after its marker",
        [marker("admission", 1), event("admission", 1)],
        [MARKER, KEEP],
    ),
    (
        "a deposed leader's decision after its successor's marker is void",
        [marker("admission", 1), marker("admission", 2), event("admission", 1)],
        [MARKER, MARKER, VOID],
    ),
    (
        "decisions stored before the successor's marker stand: the successor folded them",
        [marker("admission", 1), event("admission", 1), marker("admission", 2)],
        [MARKER, KEEP, MARKER],
    ),
    (
        "fences are per role: an admission marker does not fence the watcher",
        [marker("admission", 2), event("watcher", 1)],
        [MARKER, KEEP],
    ),
    (
        "sources that hold no lease (the CLI, tools) are never fenced",
        [marker("admission", 2), event("cli", 0), event("test", 0)],
        [MARKER, KEEP, KEEP],
    ),
    (
        "a slow candidate's late marker never lowers the fence",
        [marker("admission", 3), marker("admission", 2), event("admission", 2)],
        [MARKER, MARKER, VOID],
    ),
    (
        "a later term stands even before its own marker arrives",
        [marker("admission", 1), event("admission", 2)],
        [MARKER, KEEP],
    ),
    (
        "an unstamped event of a leased role after a marker is void",
        [marker("recovery", 1), event("recovery", 0)],
        [MARKER, VOID],
    ),
    (
        "a marker of a role that holds no lease fences nothing, even below its term",
        [marker("cli", 3), event("cli", 0)],
        [MARKER, KEEP],
    ),
    (
        "a marker of a term already passed still moves nothing and reaches no handler",
        [marker("watcher", 2), event("watcher", 2), marker("watcher", 2)],
        [MARKER, KEEP, MARKER],
    ),
]


@pytest.mark.parametrize(("reason", "events", "verdicts"), CASES, ids=[c[0] for c in CASES])
def test_the_rule(reason: str, events: list[AnyEvent], verdicts: list[Verdict]) -> None:
    """Each case's events, judged in order, get the verdicts the rule gives them."""
    fence = Fence()
    assert [fence.judge(e) for e in events] == verdicts, reason


@pytest.mark.parametrize(("reason", "events", "verdicts"), CASES, ids=[c[0] for c in CASES])
def test_screen_keeps_what_the_rule_keeps(
    reason: str, events: list[AnyEvent], verdicts: list[Verdict]
) -> None:
    """``screen`` (which decides the plain case without a call to judge) keeps exactly the
    events the rule keeps, and leaves its fence where judging each would."""
    fence, judged = Fence(), Fence()
    kept = fence.screen(events)
    assert kept == [e for e, v in zip(events, verdicts, strict=True) if v is KEEP], reason
    for e in events:
        judged.judge(e)
    for role in ("watcher", "admission", "recovery", "cli"):
        assert fence.term(role) == judged.term(role), reason


def test_a_fenced_log_keeps_what_the_services_kept() -> None:
    """An audit of a whole log drops the markers and the void events, nothing else."""
    log = [marker("admission", 1), event("admission", 1, "a"), marker("admission", 2)]
    log += [event("admission", 1, "b"), event("admission", 2, "c")]
    assert [e.workload.name for e in fenced_log(log)] == ["a", "c"]


# --- on a real stream ---------------------------------------------------------------------


async def _bus(url: str, *, term: int = 0) -> Bus:
    bus = await Bus.connect(url, source="test", auth=bus_auth(url))
    await bus.ensure_stream()
    bus.term = term
    return bus


def _admitted(name: str) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        id=f"admitted-{name}",
        source="admission",
        workload=WorkloadRef("default", name, f"uid-{name}"),
        cluster_queue="cq",
        local_queue="lq",
        priority=0,
        assignments=[],
        generation=1,
    )


async def _read(bus: Bus, subscription: JetStreamContext.PullSubscription) -> list[AnyEvent]:
    events: list[AnyEvent] = []
    await bus.replay_to_end(subscription, events.extend)
    return events


async def test_the_bus_stamps_its_term_on_the_event_and_its_id(nats_url: str) -> None:
    """A bus holding term 3 publishes ``term: 3`` and an id ending in ``-t3``: a new
    leader's decision is never taken for a copy of a deposed one's."""
    bus = await _bus(nats_url, term=3)
    try:
        await bus.publish(_admitted("a"))
        # The record: the batch it went in (its per-workload copy carries the same id).
        stored = await bus.js.get_last_msg(STREAM, "berth.b.cq.admitted")
        [decoded] = record_of(stored)  # type: ignore[arg-type]
        assert (decoded.term, decoded.id) == (3, "admitted-a-t3")
    finally:
        await bus.close()


async def test_consumers_never_see_markers_or_void_events(nats_url: str) -> None:
    """A deposed leader (term 1) publishing after its successor's marker (term 2) is
    dropped for every consumer, counted and logged; what it published before stands."""
    old, new = await _bus(nats_url, term=1), await _bus(nats_url, term=2)
    reader = await _bus(nats_url)
    before = FENCED.labels(source="admission")._value.get()
    try:
        await old.publish(marker("admission", 1))
        await old.publish(_admitted("before"))
        await new.publish(marker("admission", 2))
        await old.publish(_admitted("late"))  # the deposed leader wakes up
        await new.publish(_admitted("after"))
        subscription = await reader.replay_subscription(["berth.cq.>"])
        events = await _read(reader, subscription)
        assert [e.workload.name for e in events] == ["before", "after"]
        assert reader.fence(subscription).term("admission") == 2
        assert FENCED.labels(source="admission")._value.get() == before + 1
    finally:
        for bus in (old, new, reader):
            await bus.close()


async def test_a_durable_consumer_resumes_with_the_markers_before_its_ack_floor(
    nats_url: str,
) -> None:
    """A consumer that restarts after its ack floor never saw the markers before it, yet it
    voids a deposed leader's late decision as a reader from the start would."""
    old, new = await _bus(nats_url, term=1), await _bus(nats_url, term=2)
    try:
        await old.publish(marker("admission", 1))
        await new.publish(marker("admission", 2))
        await new.publish(_admitted("first"))
        first = await _bus(nats_url)
        subscription = await first.durable_subscription("d", ["berth.cq.>"])
        handled: list[str] = []
        stop = asyncio.Event()

        async def handler(events: list[AnyEvent]) -> None:
            handled.extend(e.workload.name for e in events)
            if handled:  # a take of the lease markers alone is handed over empty (acked)
                stop.set()

        await asyncio.wait_for(first.consume(subscription, handler, stopping=stop), 10)
        await asyncio.sleep(0.2)  # the ack is in
        await first.close()
        assert handled == ["first"]

        await old.publish(_admitted("late"))
        await new.publish(_admitted("second"))
        resumed = await _bus(nats_url)
        subscription = await resumed.durable_subscription("d", ["berth.cq.>"])
        assert resumed.fence(subscription).term("admission") == 2  # from the stored markers
        events = await resumed.next_batch(subscription, wait=5)
        assert events is not None and [e.workload.name for e in events] == ["second"]
        await resumed.close()
    finally:
        await old.close()
        await new.close()


async def test_fence_before_reads_only_the_markers_before_the_resume_point(nats_url: str) -> None:
    """Markers stored at or after the resume point are the consumer's to read in order."""
    bus = await _bus(nats_url)
    try:
        await bus.publish(marker("watcher", 1))  # seq 1
        await bus.publish(_admitted("a"))  # seq 2
        await bus.publish(marker("watcher", 4))  # seq 3
        await bus.publish(marker("recovery", 2))  # seq 4
        assert (await fence_before(bus.js, stream=STREAM, sequence=1)).term("watcher") == 0
        assert (await fence_before(bus.js, stream=STREAM, sequence=3)).term("watcher") == 1
        fence = await fence_before(bus.js, stream=STREAM, sequence=10)
        assert (fence.term("watcher"), fence.term("recovery")) == (4, 2)
    finally:
        await bus.close()


def test_a_marker_is_about_no_workload_and_travels_on_its_role_subject() -> None:
    """``LeaderElected`` needs no workload; its JSON names the role, holder and term."""
    from shared.events import subject_for

    elected = marker("admission", 7)
    assert subject_for(elected) == "berth.lease.admission"
    body = msgspec.json.decode(msgspec.json.encode(elected))
    assert (body["type"], body["role"], body["term"]) == ("LeaderElected", "admission", 7)


async def test_fence_before_reads_many_markers_in_one_go(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hundreds of changes of leader: the resume fence is the highest term per role,
    lower-term markers landing late included, read with a few JetStream API requests
    whatever their number (not one per marker)."""
    bus = await _bus(nats_url)
    try:
        terms = {"watcher": 0, "admission": 0}
        markers = []
        for term in range(1, 301):
            role = "watcher" if term % 3 else "admission"
            markers.append(marker(role, term))
            terms[role] = term
        markers.append(marker("admission", 5))  # a slow candidate's late marker
        await bus.publish_many(markers)
        await bus.publish(_admitted("after"))
        last = await bus.last_sequence()
        sent: list[str] = []
        request = bus.nc.request

        async def counted(subject: str, *args: Any, **kwargs: Any) -> Msg:
            sent.append(subject)
            return await request(subject, *args, **kwargs)

        # Counted, not timed: a loaded machine stretches a read, it adds no request to it.
        monkeypatch.setattr(bus.nc, "request", counted)  # JetStream's requests go this way
        fence = await fence_before(bus.js, stream=STREAM, sequence=last)
        monkeypatch.undo()
        assert {role: fence.term(role) for role in terms} == terms
        asked = [subject for subject in sent if subject.startswith("$JS.API.")]
        # The probe for a first marker and the consumer's creation (again if it was reset);
        # at least one, or the count saw nothing.
        assert 1 <= len(asked) <= 3, asked
    finally:
        await bus.close()

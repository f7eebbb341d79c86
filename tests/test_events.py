"""The event contract: one tagged union, JSON on the wire, stable subjects, a schema."""

import msgspec
import pytest

from shared.events import (
    EvictionRequested,
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadSubmitted,
    decode_event,
    encode_event,
    event_json_schema,
    now,
    subject_for,
)

REF = WorkloadRef("team-a", "train.v2", "uid-1")


def test_round_trip_keeps_the_variant() -> None:
    """Encoding then decoding yields the same event of the same type."""
    event = WorkloadAdmitted(
        source="admission",
        workload=REF,
        cluster_queue="cq",
        local_queue="lq",
        priority=5,
        assignments=[FlavorAssignment("main", 1, {"cpu": "default"}, {"cpu": 2000})],
        generation=1,
    )
    decoded = decode_event(encode_event(event))
    assert decoded == event and type(decoded) is WorkloadAdmitted


def test_subjects_are_wildcard_friendly() -> None:
    """Facts go under berth.wl.<verb>.<ns>.<name>; decisions under berth.cq.<queue>.<verb>..."""
    submitted = WorkloadSubmitted(
        source="w",
        workload=REF,
        kind="Job",
        queue_name="q",
        pod_sets=[PodSet("main", 1, {})],
        created=now(),
    )
    evict = EvictionRequested(
        source="p", workload=REF, cluster_queue="cq.x", generation=1, reason="Preempted"
    )
    assert subject_for(submitted) == "berth.wl.submitted.team-a.train_v2"
    assert subject_for(evict) == "berth.cq.cq_x.evict.team-a.train_v2"


def test_bad_event_names_the_field() -> None:
    """A malformed event is refused with the path of the bad field."""
    with pytest.raises(msgspec.ValidationError, match=r"\$\.generation"):
        decode_event(
            b'{"type":"WorkloadStarted","source":"w","workload":{"namespace":"a","name":"b","uid":"c"},"generation":"x"}'
        )


def test_naive_times_are_refused() -> None:
    """Times must carry a zone, so no service guesses one."""
    with pytest.raises(msgspec.ValidationError):
        decode_event(
            b'{"type":"WorkloadDeleted","source":"w","time":"2026-01-01T00:00:00","workload":{"namespace":"a","name":"b","uid":"c"}}'
        )


def test_schema_lists_every_event_type() -> None:
    """`berth schema` documents each variant so tools in other languages can subscribe."""
    schema = event_json_schema()
    names = set(schema["$defs"])
    assert {
        "WorkloadSubmitted",
        "WorkloadAdmitted",
        "WorkloadFinished",
        "EvictionRequested",
        "WorkloadEvicted",
        "WorkloadDeleted",
        "WorkloadPending",
        "WorkloadStarted",
    } <= names


def test_an_event_id_is_a_random_uuid_in_hex() -> None:
    """What uuid.uuid4().hex gave (docs and tools may read ids as UUIDs): 32 lowercase hex
    digits of a version-4, RFC 4122 UUID, never the same twice, the fixed bits set whatever
    the random bytes were (so over many ids every other nibble takes many values)."""
    import uuid

    from shared.events import new_event_id

    ids = [new_event_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids), "never the same twice"
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert (parsed.hex, parsed.version, parsed.variant) == (value, 4, uuid.RFC_4122), value
    assert {value[12] for value in ids} == {"4"}, "the version nibble"
    assert {value[16] for value in ids} == set("89ab"), "the variant bits, the rest random"
    assert len({value[0] for value in ids}) == 16, "a random nibble takes every value"

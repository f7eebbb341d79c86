"""A watched message's position read from its ack reply subject (shared/bus/keywatch.py
``position``): the same numbers and time as nats-py's ``Msg.metadata``, for both forms of
JetStream's reply subject, and the same refusal of anything else."""

from __future__ import annotations

import nats.errors
import pytest
from nats.aio.msg import Msg

from shared.bus.keywatch import position, stored_at

# (the reply subject, why)
REPLIES = [
    ("$JS.ACK.KV_cfg.watch-1.1.42.7.1767323045123456789.3", "the 9-token form"),
    ("$JS.ACK.KV_cfg.watch-1.1.42.7.1767323045000000000.0", "a whole second, nothing pending"),
    ("$JS.ACK.KV_cfg.watch-1.2.1.1.1.0", "a redelivery near the epoch"),
    (
        "$JS.ACK.hub.ACCHASH.KV_cfg.watch-1.1.900.800.1767323045999999999.12.rand",
        "with a domain and an account hash: 12 tokens",
    ),
    (
        "$JS.ACK._.ACCHASH.KV_cfg.watch-1.1.900.800.1767323045000000001.0",
        "no domain (_), 11 tokens",
    ),
]
# (a reply that is no JetStream message's, why)
NOT_JETSTREAM = [
    ("_INBOX.abc.def", "an inbox"),
    ("$JS.ACK.KV_cfg.watch-1.1.42.7.3", "too few tokens for either form"),
    ("$JS.ACK.a.b.c.d.e.f.g.h", "ten tokens: neither form"),
    ("$JS.NAK.KV_cfg.watch-1.1.42.7.1.3", "not an ack subject"),
]


def _metadata(reply: str) -> Msg.Metadata:
    return Msg(None, reply=reply).metadata  # type: ignore[arg-type]


@pytest.mark.parametrize(("reply", "why"), REPLIES, ids=[c[1] for c in REPLIES])
def test_a_position_is_what_nats_py_reads(reply: str, why: str) -> None:
    theirs = _metadata(reply)
    ours = position(reply)
    assert (ours.consumer, ours.stream, ours.pending) == (
        theirs.sequence.consumer,
        theirs.sequence.stream,
        theirs.num_pending,
    ), why
    assert stored_at(ours.nanos) == theirs.timestamp, why


@pytest.mark.parametrize(("reply", "why"), NOT_JETSTREAM, ids=[c[1] for c in NOT_JETSTREAM])
def test_anything_else_is_refused_as_nats_py_refuses_it(reply: str, why: str) -> None:
    with pytest.raises(nats.errors.NotJSMessageError):
        _metadata(reply)
    with pytest.raises(nats.errors.NotJSMessageError):
        position(reply)

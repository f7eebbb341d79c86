"""Dead letters: a malformed input is skipped, never retried forever, and kept for an operator.

No poison pill: an event that does not decode, an object in ``berth-objects`` that is no
workload, a config entry that does not parse is

- logged once, one line naming where it came from and why (``malformed_<kind>``);
- counted in ``berth_dead_lettered_total{service,kind}``;
- published to the ``BERTH_DLQ`` stream (subjects ``berth.dlq.>``) on
  ``berth.dlq.<service>.<kind>``, kind being ``event``, ``object`` or ``config``, as JSON:
  ``{service, kind, source, reason, raw, encoding, size, truncated, time}``; ``source`` is
  the subject, or ``<bucket>/<key>``; ``raw`` is the bytes as text when they are UTF-8,
  else base64 (``encoding``), at most 64 KiB of them (``size`` is the full length);

and the service goes on with the next input. Sending a dead letter never raises: if NATS
cannot take it, the log line and the count remain. Each letter carries a deterministic
``Nats-Msg-Id`` (service, kind and the input's identity: stream sequence, key revision, or
the bytes' hash), and the stream keeps ids for a day, so an input met again (a service
replays the event stream at every start) is stored once.

``nats stream view BERTH_DLQ`` (or ``nats sub 'berth.dlq.>'``) shows them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import weakref
from typing import Any, Literal, Protocol

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from prometheus_client import Counter

from shared.bus import BusError, BusSettings, Refused, bus_call, translated
from shared.events import UtcTime, now, subject_token
from shared.logging import get_logger

__all__ = [
    "DEAD_LETTERED",
    "DEAD_LETTER_STREAM",
    "DeadLetter",
    "DeadLetters",
    "Kind",
    "dead_letter_subject",
    "dead_letters",
    "ensure_dead_letter_stream",
    "letter",
]

DEAD_LETTER_STREAM = "BERTH_DLQ"
DEAD_LETTER_SUBJECTS = ("berth.dlq.>",)
MAX_RAW_BYTES = 64 * 1024  # enough to see what went wrong; far below NATS's message limit
DUPLICATE_WINDOW_S = 24 * 3600.0  # an input met again within a day is stored once
MAX_AGE_S = 30 * 24 * 3600.0
MAX_MESSAGES = 100_000  # then the oldest go: a flood of poison cannot fill the disk
PUBLISH_TIMEOUT_S = 2.0

Kind = Literal["event", "object", "config"]

DEAD_LETTERED = Counter(
    "berth_dead_lettered_total",
    "Malformed inputs skipped and kept in the BERTH_DLQ stream, by service and kind.",
    ["service", "kind"],
)

log = get_logger("deadletter")


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """The body of a message on ``berth.dlq.<service>.<kind>``."""

    service: str
    kind: str
    source: str  # the subject, or "<bucket>/<key>"
    reason: str
    raw: str
    encoding: Literal["text", "base64"]
    size: int  # bytes in the input; raw holds at most MAX_RAW_BYTES of them
    truncated: bool
    time: UtcTime


def dead_letter_subject(service: str, kind: Kind) -> str:
    return f"berth.dlq.{subject_token(service)}.{kind}"


def letter(service: str, kind: Kind, source: str, reason: str, raw: bytes) -> DeadLetter:
    kept = raw[:MAX_RAW_BYTES]
    try:
        text, encoding = kept.decode("utf-8"), "text"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(kept).decode("ascii"), "base64"
    return DeadLetter(
        service=service,
        kind=kind,
        source=source,
        reason=reason,
        raw=text,
        encoding=encoding,  # type: ignore[arg-type]
        size=len(raw),
        truncated=len(raw) > len(kept),
        time=now(),
    )


async def ensure_dead_letter_stream(js: JetStreamContext, settings: BusSettings) -> None:
    """Create (or bring up to date) the dead-letter stream; idempotent, like the event
    stream's (any service may call it). Its copies are the deployment's, as the event
    stream's: ``settings`` (the bus's, injected at connect), never the environment."""
    config = api.StreamConfig(
        name=DEAD_LETTER_STREAM,
        subjects=list(DEAD_LETTER_SUBJECTS),
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        discard=api.DiscardPolicy.OLD,
        max_msgs=MAX_MESSAGES,
        max_age=MAX_AGE_S,
        duplicate_window=DUPLICATE_WINDOW_S,
        num_replicas=settings.stream_replicas,
    )
    try:
        await bus_call(js.add_stream(config))
    except Refused:
        await bus_call(js.update_stream(config))  # it exists with another config


class _HasJetStream(Protocol):
    js: JetStreamContext
    settings: BusSettings


class DeadLetters:
    """One service's dead letters, sent on its bus connection (``bus.js``, with the bus's
    ``settings``)."""

    def __init__(self, bus: _HasJetStream, service: str) -> None:
        self.bus = bus
        self.service = service
        self._stream_ready = False
        self._sending: set[asyncio.Task[None]] = set()

    def record(self, kind: Kind, source: str, reason: str) -> None:
        """The log line and the count, without the letter."""
        DEAD_LETTERED.labels(service=self.service, kind=kind).inc()
        log.error(
            f"malformed_{kind}",
            source=source,
            reason=reason,
            dead_letter=dead_letter_subject(self.service, kind),
        )

    async def send(
        self,
        kind: Kind,
        source: str,
        reason: str,
        raw: bytes,
        *,
        identity: str | None = None,
        logged: bool = False,
    ) -> None:
        """Log, count and publish one dead letter; never raises. ``logged``: the caller's own
        line already said why (an input refused, not a malformed one), so it is only counted."""
        if logged:
            DEAD_LETTERED.labels(service=self.service, kind=kind).inc()
        else:
            self.record(kind, source, reason)
        await self._publish(letter(self.service, kind, source, reason, raw), identity)

    def post(
        self, kind: Kind, source: str, reason: str, raw: bytes, *, identity: str | None = None
    ) -> None:
        """:meth:`send` from synchronous code: logged and counted now, published in the
        background (:meth:`settle` waits for it)."""
        self.record(kind, source, reason)
        task = asyncio.get_running_loop().create_task(
            self._publish(letter(self.service, kind, source, reason, raw), identity)
        )
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def malformed_event(self, msg: Msg, reason: str) -> None:
        """For :func:`shared.bus.decode_batch`: an event that does not decode."""
        self.post("event", msg.subject, reason, msg.data or b"", identity=_stream_position(msg))

    async def settle(self) -> None:
        """Wait until every posted letter is sent (or given up)."""
        while self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)

    async def _publish(self, body: DeadLetter, identity: str | None) -> None:
        subject = dead_letter_subject(self.service, body.kind)  # type: ignore[arg-type]
        raw_identity = identity or hashlib.sha256(body.raw.encode()).hexdigest()
        msg_id = hashlib.sha256(f"{subject}|{body.source}|{raw_identity}".encode()).hexdigest()
        payload = msgspec.json.encode(body)
        try:
            if not self._stream_ready:
                await ensure_dead_letter_stream(self.bus.js, self.bus.settings)
                self._stream_ready = True
            await bus_call(
                self.bus.js.publish(
                    subject, payload, timeout=PUBLISH_TIMEOUT_S, headers={"Nats-Msg-Id": msg_id}
                )
            )
        except (BusError, TimeoutError, OSError) as error:
            # The log line and the count stand; a dead letter must never wedge its sender.
            log.warning("dead_letter_unsent", source=body.source, error=repr(error))


def _stream_position(msg: Msg) -> str | None:
    """``<stream>:<sequence>`` of a JetStream message (None for a core NATS one)."""
    try:
        with translated():
            metadata = msg.metadata
    except (BusError, ValueError, IndexError):  # no JetStream reply subject
        return None
    return f"{metadata.stream}:{metadata.sequence.stream}"


_LETTERS: weakref.WeakKeyDictionary[Any, DeadLetters] = weakref.WeakKeyDictionary()


def dead_letters(bus: Any, service: str) -> DeadLetters:
    """The dead letters of the service on ``bus`` (one per bus), attached to the bus so that
    an event that does not decode is dead-lettered too (``bus.on_malformed``)."""
    letters = _LETTERS.get(bus)
    if letters is None:
        letters = _LETTERS[bus] = DeadLetters(bus, service)
        bus.on_malformed = letters.malformed_event
    return letters

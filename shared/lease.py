"""The lease: one replica per role acts at a time (docs/replicas.md).

A JetStream key-value bucket, ``berth-leases``, holds one key per role (``admission``...)
whose value says who holds it (:class:`LeaseRecord`). A replica takes the lease by a
compare-and-swap on the key's revision, with the next term; the holder renews it every
``renew_every`` seconds by a compare-and-swap that keeps the term. In a NATS cluster the
key's stream is replicated through Raft, so a compare-and-swap is linearizable: two replicas
can never both succeed on the same revision.

Nobody compares clocks: a lease lapses when its revision has not changed for a whole lease
duration *as measured by the observer's own monotonic clock* (client-go's rule). The times in
the record are for people (``berth status``), never for the decision.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
from nats.js.kv import KeyValue

from shared.bus import BusError, KeyExists, KeyNotFound
from shared.logging import get_logger

__all__ = [
    "LEASE_BUCKET",
    "Lease",
    "LeaseLost",
    "LeaseRecord",
    "LeaseSettings",
    "replica_id_from_env",
    "rfc3339",
]

log = get_logger("lease")

LEASE_BUCKET = "berth-leases"
DEFAULT_LEASE_SECONDS = 3.0

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class LeaseSettings:
    """How long a lease lives unrenewed (``duration``), how often the holder renews it, how
    long the holder keeps acting without a successful renewal (``renew_deadline``, shorter
    than ``duration``, so it stops before anyone may take over) and how often a standby
    looks at it."""

    duration: float = DEFAULT_LEASE_SECONDS
    renew_every: float = DEFAULT_LEASE_SECONDS / 3
    renew_deadline: float = DEFAULT_LEASE_SECONDS * 2 / 3
    poll_every: float = DEFAULT_LEASE_SECONDS / 12

    def __post_init__(self) -> None:
        if not 0 < self.renew_every < self.renew_deadline < self.duration:
            raise ValueError(
                "lease timings must satisfy 0 < renew_every < renew_deadline < duration"
            )

    @classmethod
    def scaled(cls, duration: float) -> LeaseSettings:
        """Renew every third of the duration, give up after two thirds, look every twelfth."""
        return cls(duration, duration / 3, duration * 2 / 3, duration / 12)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> LeaseSettings:
        """``BERTH_LEASE_SECONDS`` (default 3): a longer lease rides out longer NATS hiccups
        at the cost of a slower takeover."""
        return cls.scaled(float(env.get("BERTH_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)))


class LeaseRecord(msgspec.Struct, frozen=True):
    """The value of a role's key: its holder (a replica id; "" once released), the term it
    took the lease with, when (RFC 3339), and when it last renewed it."""

    holder: str
    term: int
    acquired: str
    renewed: str


class LeaseLost(Exception):
    """Another replica took the lease: this one must stop acting for good."""


def rfc3339(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def replica_id_from_env(role: str, env: Mapping[str, str] = os.environ) -> str:
    """This replica's id: ``BERTH_REPLICA_ID`` (a DNS-1123 label: the pod's name in a
    cluster, ``<role>-<i>`` under ``berth up``), else ``<role>-<hostname>-<pid>``."""
    given = env.get("BERTH_REPLICA_ID", "")
    if given:
        if len(given) > 63 or not _DNS_LABEL.match(given):
            raise ValueError(
                f"BERTH_REPLICA_ID={given!r} is not a DNS-1123 label (at most 63 characters:"
                " lowercase letters, digits and '-', starting and ending with a letter or digit)"
            )
        return given
    host = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-") or "host"
    suffix = f"-{os.getpid()}"
    head = f"{role}-{host}"[: 63 - len(suffix)].rstrip("-")
    return f"{head}{suffix}"


_decoder = msgspec.json.Decoder(LeaseRecord)


class Lease:
    """One role's lease as one replica sees it: take it, renew it, hand it back."""

    def __init__(
        self,
        kv: KeyValue,
        *,
        role: str,
        replica: str,
        settings: LeaseSettings,
        floor: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.role = role
        self.replica = replica
        self.settings = settings
        self.floor = floor  # the highest term known elsewhere (the stream's last marker)
        self.clock = clock
        self.held = False
        self.term = 0
        self.revision = 0  # of the key, as our last write left it
        self.acquired = ""
        self.confirmed = 0.0  # when the last successful write of ours was sent (monotonic)
        self._seen: tuple[int, float] | None = None  # (revision, when we first saw it)

    # --- taking it -------------------------------------------------------------------------

    def may_take(self, record: LeaseRecord | None, revision: int, now: float) -> bool:
        """Whether this replica may take the lease as it stands at ``revision``.

        - Released (holder "") or held under this replica's own id (it restarted under the
          same id, as ``berth up`` restarts ``admission-0``): at once; that process is gone.
        - Otherwise only once it has lapsed: its revision unchanged for a whole ``duration``
          as measured on this observer's own monotonic clock since it first saw that
          revision (client-go's rule). Nothing in the record is compared with our clock, so
          clock skew between machines cannot make a live lease look expired. A record that
          cannot be read lapses the same way.
        """
        if record is not None and record.holder in ("", self.replica):
            return True
        if self._seen is None or self._seen[0] != revision:
            self._seen = (revision, now)
            return False
        return now - self._seen[1] >= self.settings.duration

    async def try_acquire(self) -> bool:
        """Look at the key once and take the lease if :meth:`may_take` allows; True if this
        replica now holds it (with ``term``), False if another does or won the race."""
        try:
            # Bounded (not the client's 5 s): a look stuck in an outage would delay a takeover.
            entry = await asyncio.wait_for(self.kv.get(self.role), self.settings.renew_every)
        except KeyNotFound:  # never held (or deleted): create it
            return await self._write(term=self.floor + 1, last=None)
        assert entry.revision is not None
        record = _decoded(entry.value)
        if not self.may_take(record, entry.revision, self.clock()):
            return False
        previous = 0 if record is None else record.term
        return await self._write(term=max(previous, self.floor) + 1, last=entry.revision)

    async def _write(self, *, term: int, last: int | None) -> bool:
        moment = rfc3339()
        value = msgspec.json.encode(LeaseRecord(self.replica, term, moment, moment))
        sent = self.clock()
        writing = (
            self.kv.create(self.role, value)
            if last is None
            else self.kv.update(self.role, value, last=last)
        )
        try:
            # A write that times out may have landed: the next look finds our own id on it.
            revision = await asyncio.wait_for(writing, self.settings.renew_every)
        except KeyExists:
            return False  # another replica wrote first: it holds the lease
        self.held, self.term, self.revision = True, term, revision
        self.acquired, self.confirmed = moment, sent
        self._seen = None
        return True

    async def campaign(self, stop: asyncio.Event) -> bool:
        """Look at the lease every ``poll_every`` until this replica takes it (True) or
        ``stop`` is set (False). An unreachable bus is waited out, and restarts the count of
        a lapse."""
        unreachable = False
        while not stop.is_set():
            try:
                if await self.try_acquire():
                    return True
                unreachable = False
            except (BusError, TimeoutError) as error:
                if not unreachable:
                    log.warning("lease_unreachable", role=self.role, error=repr(error))
                unreachable = True
                # A lapse counts only time this observer could see the key: after an outage
                # it waits a whole duration again (the holder was likely cut off too).
                self._seen = None
            if await _stopped(stop, self.settings.poll_every):
                return False
        return False

    # --- keeping it ------------------------------------------------------------------------

    async def renew(self) -> bool:
        """Extend the lease: a compare-and-swap on our own revision, keeping the term.

        True once renewed; False if this attempt failed (NATS unreachable, no answer within
        ``renew_every``): the caller stops acting once :meth:`acting_until` has passed and
        tries again. Raises :class:`LeaseLost` when another replica's write came first: only
        a lost swap proves that someone else holds the lease. A renewal that succeeds late
        is proof of the opposite: nobody wrote the key meanwhile, so nobody else acted.
        """
        sent = self.clock()
        value = msgspec.json.encode(LeaseRecord(self.replica, self.term, self.acquired, rfc3339()))
        try:
            revision = await asyncio.wait_for(
                self.kv.update(self.role, value, last=self.revision), self.settings.renew_every
            )
        except KeyExists as error:
            if await self._our_write_landed():
                return False  # the revision is ours again; the next renewal confirms it
            self.held = False
            raise LeaseLost("another replica took the lease") from error
        except (BusError, TimeoutError) as error:
            log.warning("lease_renew_failed", role=self.role, error=repr(error))
            return False
        self.revision, self.confirmed = revision, sent
        return True

    def acting_until(self) -> float:
        """When (monotonic) the holder must stop acting unless a renewal succeeds first:
        ``renew_deadline`` after the last successful renewal was sent. A standby counts a
        lapse from no earlier than that write, over a whole ``duration``, so the holder has
        stopped before anyone may take over."""
        return self.confirmed + self.settings.renew_deadline

    async def _our_write_landed(self) -> bool:
        """After a lost swap: was it lost to our own earlier write, one whose answer never
        came (a timeout) but which was stored? Then the key still names us with our term."""
        try:
            entry = await asyncio.wait_for(self.kv.get(self.role), self.settings.renew_every)
        except (BusError, TimeoutError):
            return False
        record = _decoded(entry.value)
        if record is None or (record.holder, record.term) != (self.replica, self.term):
            return False
        assert entry.revision is not None
        self.revision = entry.revision
        return True

    async def keep(
        self, stop: asyncio.Event, *, confirmed: Callable[[bool], None] = lambda _: None
    ) -> None:
        """Renew every ``renew_every`` (after a failure, every ``poll_every``) until ``stop``
        is set, telling ``confirmed`` each outcome; raises :class:`LeaseLost`."""
        wait = self.settings.renew_every
        while not await _stopped(stop, wait):
            renewed = await self.renew()
            confirmed(renewed)
            wait = self.settings.renew_every if renewed else self.settings.poll_every

    async def release(self) -> None:
        """Hand the lease back so that a standby takes over at once: the record with holder
        "" and the same term (terms only grow, deleting the key would restart them), written
        by compare-and-swap on our revision, so a lease another replica took meanwhile is
        left alone. Best effort: if it fails, the lease lapses on its own."""
        if not self.held:
            return
        self.held = False
        value = msgspec.json.encode(LeaseRecord("", self.term, self.acquired, rfc3339()))
        try:
            await asyncio.wait_for(
                self.kv.update(self.role, value, last=self.revision), self.settings.renew_every
            )
            log.info("lease_released", role=self.role, replica=self.replica, term=self.term)
        except (BusError, TimeoutError) as e:  # KeyExists is a BusError
            log.warning("lease_release_failed", role=self.role, error=repr(e))


def _decoded(value: bytes | None) -> LeaseRecord | None:
    try:
        return _decoder.decode(value or b"")
    except msgspec.DecodeError:
        return None


async def _stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop`` is set; whether it was set."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
        return True
    except TimeoutError:
        return stop.is_set()

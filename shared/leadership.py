"""Whether this replica acts for its role: the lease, the leader marker, and since when.

Every service runs under :class:`Leadership` (the Runtime starts it, docs/replicas.md):

1. it campaigns for its role's lease (shared/lease.py) while the service keeps warm;
2. once it holds term T, the Bus stamps T on everything it publishes, and it publishes the
   marker ``LeaderElected(role, T, holder)`` on ``berth.lease.<role>``; from the marker on,
   every reader voids the role's events of lower terms (shared/fencing.py);
3. then ``active`` is set. A service whose state is the fold of the stream (admission,
   preemption) still decides nothing until its fold has passed its own marker
   (:meth:`may_decide`): everything its predecessor decided validly lies before it;
4. it renews until the service has stopped, then releases the lease so a standby takes over
   at once. Without a successful renewal for ``renew_deadline`` it is *suspended*: ``active``
   is cleared (nothing decides, the Bus hands consumers nothing) until a renewal succeeds,
   which proves nobody took the lease meanwhile. A renewal whose swap is lost means another
   replica holds the lease: ``on_lost`` is called, in a service one log line and an
   immediate non-zero exit (the supervisor restarts it as a standby).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import msgspec

from shared.bus import STREAM, Bus, BusError, NotFound, bus_call
from shared.events import LeaderElected, decode_event
from shared.fencing import MARKER_PREFIX, Fence
from shared.lease import LEASE_BUCKET, Lease, LeaseLost, LeaseSettings
from shared.logging import get_logger

__all__ = ["Leadership"]

log = get_logger("leadership")


class Leadership:
    """This replica's standing in its role: standby or active, the term, since when."""

    def __init__(
        self,
        *,
        bus: Bus | None,
        role: str,
        replica: str,
        settings: LeaseSettings,
        on_lost: Callable[[str], None],
    ) -> None:
        self.bus = bus
        self.role = role
        self.replica = replica
        self.settings = settings
        self.on_lost = on_lost
        self.active = asyncio.Event()
        self.decided = asyncio.Event()  # the first look at the lease is done (taken or not)
        self.term = 0
        self.since = datetime.now(UTC)  # when it entered its current state
        self.lease: Lease | None = None
        self.announced = False  # its marker is in the stream
        self.suspended = False  # it holds the lease but could not renew it in time

    @classmethod
    def unleased(cls, role: str) -> Leadership:
        """Active from the start, with no lease and term 0: a Runtime built without one
        (tests that drive a backend directly)."""
        leadership = cls(
            bus=None, role=role, replica=role, settings=LeaseSettings(), on_lost=lambda _: None
        )
        leadership.active.set()
        leadership.decided.set()
        return leadership

    @property
    def is_active(self) -> bool:
        return self.active.is_set()

    def may_decide(self, fence: Fence) -> bool:
        """Active, and the stream read through ``fence`` has reached this leader's own
        marker: a new leader never decides on a half-rebuilt state. (A fence past our term
        means a successor's marker: we are deposed and our lease is about to be lost.)"""
        if not self.is_active:
            return False
        return self.lease is None or fence.term(self.role) == self.term

    async def wait_active(self, stopping: asyncio.Event) -> bool:
        """Until this replica leads its role (True) or the service stops first (False)."""
        if self.is_active:
            return True
        waits = {asyncio.ensure_future(self.active.wait()), asyncio.ensure_future(stopping.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        return self.is_active and not stopping.is_set()

    async def run(self, *, stopping: asyncio.Event, finish: asyncio.Event) -> None:
        """Campaign until ``stopping`` (a stopping replica never takes the lease), lead,
        renew; release once ``finish`` is set (the service's own tasks have ended)."""
        assert self.bus is not None
        # Waited out like the campaign waits out the bus: in a NATS cluster's first seconds,
        # or while a killed node's Raft groups elect new leaders, this lookup can time out;
        # raising here ended the service (exit 1, fatal to `berth up` while it starts).
        while True:
            try:
                kv = await self.bus.kv(LEASE_BUCKET, history=1)
                break
            except (BusError, TimeoutError) as error:
                log.warning("lease_bucket_unreachable", role=self.role, error=repr(error))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), self.settings.poll_every)
                if stopping.is_set():
                    self.decided.set()
                    return
        lease = Lease(
            kv,
            role=self.role,
            replica=self.replica,
            settings=self.settings,
            floor=await self._last_marker_term(),
        )
        try:
            first = not stopping.is_set() and await lease.try_acquire()
        except (BusError, TimeoutError):
            first = False  # the campaign waits the bus out
        if not first:
            self.decided.set()
            log.info("standby", role=self.role, replica=self.replica)
            if not await lease.campaign(stopping):
                return
        self.lease = lease
        self.term = self.bus.term = lease.term
        self.bus.acting = self.active  # consumers hand over nothing while this is clear
        with self._deadline(lease) as confirmed:
            keeping = asyncio.create_task(
                lease.keep(finish, confirmed=confirmed), name=f"{self.role}.lease.keep"
            )
            lost = await self._lead(lease, keeping)
        if lost is None:
            await lease.release()
        else:
            self.on_lost(lost)

    async def _lead(self, lease: Lease, keeping: asyncio.Task[None]) -> str | None:
        """Announce, then keep the lease until the renewals end; why it was lost, if it was."""
        try:
            if await self._announce(lease, keeping):
                await keeping
            return None
        except LeaseLost as lost:
            self.active.clear()
            log.error(
                "lease_lost",
                role=self.role,
                replica=self.replica,
                term=lease.term,
                reason=str(lost),
            )
            return str(lost)
        finally:
            keeping.cancel()
            await asyncio.gather(keeping, return_exceptions=True)

    @contextlib.contextmanager
    def _deadline(self, lease: Lease) -> Iterator[Callable[[bool], None]]:
        """A timer that suspends this leader at ``lease.acting_until()``, pushed back by
        every successful renewal (which also ends a suspension); yields the renewals'
        callback."""
        loop = asyncio.get_running_loop()

        def arm() -> asyncio.TimerHandle:
            return loop.call_later(max(0.0, lease.acting_until() - lease.clock()), self._suspend)

        timer = arm()

        def confirmed(renewed: bool) -> None:
            nonlocal timer
            if renewed:
                timer.cancel()
                timer = arm()
                self._resume()

        try:
            yield confirmed
        finally:
            timer.cancel()

    def _suspend(self) -> None:
        if self.suspended:
            return
        self.suspended = True
        self.active.clear()
        log.warning("lease_suspended", role=self.role, replica=self.replica, term=self.term)

    def _resume(self) -> None:
        if not self.suspended:
            return
        self.suspended = False
        if self.announced:
            self.active.set()
        log.info("lease_resumed", role=self.role, replica=self.replica, term=self.term)

    async def _announce(self, lease: Lease, keeping: asyncio.Task[None]) -> bool:
        """Publish the marker (while the lease is being renewed), then become active; False
        if the renewals ended first (the service stopped, or the lease was lost: raised)."""
        assert self.bus is not None
        marker = LeaderElected(
            id=f"leader-{self.role}", source=self.role, role=self.role, holder=self.replica
        )
        publishing = asyncio.ensure_future(self.bus.publish(marker))
        await asyncio.wait({publishing, keeping}, return_when=asyncio.FIRST_COMPLETED)
        if not publishing.done():
            publishing.cancel()
            await asyncio.gather(publishing, return_exceptions=True)
            await keeping  # raises LeaseLost if that is why it ended
            return False
        publishing.result()  # a publish that failed for good stops the service
        self.since = datetime.now(UTC)
        self.announced = True
        if not self.suspended:  # else the renewal that ends the suspension sets it
            self.active.set()
        self.decided.set()
        log.info("leading", role=self.role, replica=self.replica, term=lease.term)
        return True

    async def _last_marker_term(self) -> int:
        """The term of the role's last marker in the stream: terms continue from there even
        if the lease bucket was lost (a new leader's term must pass every marker's)."""
        assert self.bus is not None
        try:
            message = await bus_call(
                self.bus.js.get_last_msg(STREAM, f"{MARKER_PREFIX}{self.role}")
            )
            event = decode_event(message.data or b"")
        except (NotFound, msgspec.DecodeError):
            return 0
        except (BusError, TimeoutError) as error:
            log.warning("marker_unreadable", role=self.role, error=repr(error))
            return 0
        return event.term if isinstance(event, LeaderElected) else 0

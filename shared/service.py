"""The life of a service process: HTTP probes and metrics, the bus, signals, and shutdown.

Every service's ``__main__`` calls :func:`run_service` with its ``main`` coroutine. The
order, modelled on aiohttp's documented graceful shutdown and kopf's reactor:

1. JSON logging; the HTTP server (``/healthz``, ``/readyz``, ``/metrics``, ``/status``,
   shared/probe_server.py) on loopback;
2. the bus, and the event stream ensured;
3. the replica's background tasks: its role's lease (:class:`Leadership`, docs/replicas.md)
   and its membership record (shared/membership.py);
4. ``main(runtime)`` runs; it marks itself ready with :meth:`Runtime.set_ready` once it may act
   (or, as a standby, once it is warm), and acts only while ``runtime.is_active``;
5. SIGTERM or SIGINT sets ``runtime.stopping``: loops finish the batch in hand and return;
6. after ``grace`` seconds, whatever still runs is cancelled and awaited;
7. only then the lease is released (a standby takes over at once, never while this replica
   still acts) and the membership record deleted;
8. the bus drains, the HTTP server stops. Nothing is left running;
9. the process exits without tearing its heap down (:func:`_exit_without_teardown`).
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from shared.auth import ClientAuth
from shared.bus import Bus, BusError, BusSettings, nats_url_from_env
from shared.gc_tuning import tune_gc
from shared.leadership import Leadership
from shared.lease import LeaseSettings, replica_id_from_env, rfc3339
from shared.logging import configure_logging, flush_logs, get_logger
from shared.membership import Member, keep_record
from shared.probe_server import Answer, ProbeServer, serve_routes

__all__ = ["PORT_IN_USE_EXIT", "Runtime", "run_service", "serve_probes"]

log = get_logger("service")

# Its HTTP port was taken between `berth up` choosing it and the process binding it (another
# stack starting at the same instant): `berth up` restarts it at once on another port.
PORT_IN_USE_EXIT = 76


class Runtime:
    """What a service's main coroutine is handed: the bus, the stop flag, and its tasks."""

    def __init__(
        self,
        *,
        name: str,
        bus: Bus,
        data_dir: str,
        replica: str | None = None,
        leadership: Leadership | None = None,
        http: str = "",
    ) -> None:
        self.name = name
        self.bus = bus
        self.data_dir = data_dir
        self.replica = replica or name
        # Without a lease (tests driving a backend directly) it is active from the start.
        self.leadership = leadership or Leadership.unleased(name)
        self.http = http
        self.stopping = asyncio.Event()
        self.ready = asyncio.Event()
        self.finished = asyncio.Event()  # the service's own tasks have ended
        self._tasks: set[asyncio.Task[Any]] = set()
        self._background: set[asyncio.Task[Any]] = set()
        self.failed = False

    @property
    def is_active(self) -> bool:
        """Whether this replica leads its role (holds the lease and has announced it)."""
        return self.leadership.is_active

    async def wait_active(self) -> bool:
        """Until this replica leads its role (True) or the service stops first (False)."""
        return await self.leadership.wait_active(self.stopping)

    async def stand_by(self) -> bool:
        """For a service whose standby does nothing (watcher, recovery): wait until this
        replica leads its role, ready meanwhile (a warm standby); False if it stops first.
        Once leading it is not ready until the service says so again (``set_ready``)."""
        decided = asyncio.ensure_future(self.leadership.decided.wait())
        stopped = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({decided, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for waiting in (decided, stopped):
            waiting.cancel()
        await asyncio.gather(decided, stopped, return_exceptions=True)
        if self.is_active:
            return True
        self.set_ready()
        if not await self.wait_active():
            return False
        self.ready.clear()
        return True

    def member(self) -> Member:
        """This replica's record: ``/status`` and the ``berth-members`` bucket."""
        if self.stopping.is_set():
            health = "stopping"
        elif self.leadership.suspended:
            health = "suspended"  # it holds the lease but cannot renew it: it does nothing
        elif self.ready.is_set():
            health = "ready"
        else:
            health = "starting"
        return Member(
            role=self.name,
            replica=self.replica,
            pid=os.getpid(),
            host=socket.gethostname(),
            http=self.http,
            active=self.is_active,
            since=rfc3339(self.leadership.since),
            term=self.leadership.term if self.is_active else 0,
            health=health,
            heartbeat=rfc3339(),
        )

    def set_ready(self) -> None:
        if not self.ready.is_set():
            self.ready.set()
            log.info("ready", service=self.name)

    def spawn(
        self, coroutine: Coroutine[Any, Any, Any], *, name: str, background: bool = False
    ) -> asyncio.Task[Any]:
        """Start a task this runtime owns: it is cancelled and awaited at shutdown.

        ``background``: a task that outlives the service's own (the lease, the membership
        record); it should end once ``finished`` is set, after the service's tasks ended."""
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        (self._background if background else self._tasks).add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None and not self.stopping.is_set():
            log.error("task_failed", task=task.get_name(), exc_info=task.exception())
            self.failed = True
            self.stopping.set()  # a dead loop must not leave a half-alive service

    async def cancel_tasks(self, *, grace: float) -> None:
        """Give owned tasks ``grace`` seconds to finish, then cancel and await them."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("tasks_cancelled", tasks=sorted(t.get_name() for t in pending))
            await asyncio.gather(*pending, return_exceptions=True)

    async def finish(self, *, grace: float) -> None:
        """The service's tasks have ended: let the background ones wind up (release the
        lease, delete the record) within ``grace`` seconds, then cancel what remains."""
        self.finished.set()
        if not self._background:
            return
        _, pending = await asyncio.wait(set(self._background), timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def serve_probes(runtime: Runtime, *, host: str, port: int) -> ProbeServer:
    """Start the probe and metrics server; returns the server to close."""

    async def healthz() -> Answer:
        return Answer(b"ok")

    async def readyz() -> Answer:
        if runtime.ready.is_set() and not runtime.stopping.is_set() and runtime.bus.nc.is_connected:
            return Answer(b"ready")
        return Answer(b"not ready", status=503)

    async def metrics() -> Answer:
        return Answer(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)

    async def status() -> Answer:
        return Answer(msgspec.json.encode(runtime.member()), content_type="application/json")

    routes = {"/healthz": healthz, "/readyz": readyz, "/metrics": metrics, "/status": status}
    return await serve_routes(routes, host=host, port=port)


MainCoroutine = Callable[[Runtime], Coroutine[Any, Any, None]]


async def _run(
    name: str, main: MainCoroutine, *, host: str, port: int, grace: float, data_dir: str
) -> int:
    nats_url = nats_url_from_env()
    try:
        replica = replica_id_from_env(name)
        settings = LeaseSettings.from_env()
        bus_settings = BusSettings.from_env()
        tune_gc()  # before the replay builds the state that collections would rescan
    except ValueError as error:
        log.error("invalid_setting", service=name, reason=str(error))
        return 2
    try:
        bus = await Bus.connect(
            nats_url,
            source=name,
            connect_timeout=30.0,
            auth=ClientAuth.from_env(name),  # its own user's seed: BERTH_CREDS or the data dir's
            settings=bus_settings,
        )
    except BusError as error:
        log.error("bus_unreachable", service=name, nats=nats_url, reason=str(error))
        return 1
    leadership = Leadership(
        bus=bus, role=name, replica=replica, settings=settings, on_lost=_exit_now
    )
    runtime = Runtime(
        name=name,
        bus=bus,
        data_dir=data_dir,
        replica=replica,
        leadership=leadership,
        http=f"http://{host}:{port}",
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, runtime.stopping.set)
    supervisor = os.environ.get("BERTH_SUPERVISOR_PID")
    if supervisor:
        runtime.spawn(_follow_supervisor(runtime, int(supervisor)), name=f"{name}.supervisor")
    try:
        server = await serve_probes(runtime, host=host, port=port)
    except OSError as error:
        log.error("cannot_listen", service=name, http=runtime.http, error=str(error))
        await runtime.cancel_tasks(grace=0)
        await bus.close()
        return PORT_IN_USE_EXIT if error.errno == errno.EADDRINUSE else 1
    log.info("listening", service=name, replica=replica, http=runtime.http, nats=nats_url)
    try:
        await bus.ensure_stream()
        runtime.spawn(
            leadership.run(stopping=runtime.stopping, finish=runtime.finished),
            name=f"{name}.lease",
            background=True,
        )
        runtime.spawn(
            keep_record(bus, runtime.member, runtime.finished),
            name=f"{name}.membership",
            background=True,
        )
        runtime.spawn(main(runtime), name=f"{name}.main")
        await runtime.stopping.wait()
        log.info("stopping", service=name, grace_s=grace)
        bus.interrupt_waits()
        await runtime.cancel_tasks(grace=grace)
        await runtime.finish(grace=min(grace, 5.0))
    finally:
        await bus.close()
        await server.close()
        log.info("stopped", service=name, failed=runtime.failed)
    return 1 if runtime.failed else 0


LEASE_LOST_EXIT = 75  # EX_TEMPFAIL: restart me (as a standby)


def _exit_now(reason: str) -> NoReturn:
    """The lease is lost: this replica may no longer act, not even to clean up (its
    successor handles what it leaves, as after a kill -9), so it exits at once."""
    _exit_without_teardown(LEASE_LOST_EXIT)  # the lines saying why written first


async def _follow_supervisor(runtime: Runtime, pid: int) -> None:
    """Under `berth up`: stop if the supervisor is gone, so nothing outlives the stack."""
    while not runtime.stopping.is_set():
        if os.getppid() != pid:
            log.warning("supervisor_gone", supervisor_pid=pid)
            runtime.stopping.set()
            return
        try:
            await asyncio.wait_for(runtime.stopping.wait(), timeout=1.0)
        except TimeoutError:
            pass


def run_service(name: str, main: MainCoroutine) -> None:
    """Entry point of ``python -m services.<name>``; reads its settings from the environment.

    ``BERTH_NATS_URL`` (default nats://127.0.0.1:4222), ``BERTH_HTTP_HOST`` (127.0.0.1),
    ``BERTH_HTTP_PORT`` (per service), ``BERTH_GRACE_SECONDS`` (20), ``BERTH_DATA_DIR``,
    ``BERTH_REPLICA_ID`` (default ``<role>-<hostname>-<pid>``), ``BERTH_LEASE_SECONDS`` (3),
    ``BERTH_GC_TUNING`` (1: the garbage collector's setting, shared/gc_tuning.py).
    """
    configure_logging(service=name)
    host = os.environ.get("BERTH_HTTP_HOST", "127.0.0.1")
    port = int(os.environ.get("BERTH_HTTP_PORT", str(DEFAULT_PORTS[name])))
    grace = float(os.environ.get("BERTH_GRACE_SECONDS", "20"))
    data_dir = os.environ.get("BERTH_DATA_DIR", os.path.expanduser("~/.berth"))
    _exit_without_teardown(
        asyncio.run(_run(name, main, host=host, port=port, grace=grace, data_dir=data_dir))
    )


def _exit_without_teardown(code: int) -> NoReturn:
    """Exit with ``code``: the held log lines written, stdout and stderr flushed, then
    ``os._exit``, so the interpreter does not tear the heap down. Called once a service has
    stopped (its work drained, its lease released, its bus closed), where that teardown
    would free the whole state object by object and run a last full collection over it:
    with many workloads held, the longest part of a stop, which nothing outside waits for
    (a pod's grace period, `berth up`'s Ctrl-C); and when the lease is lost, where nothing
    may run any more."""
    flush_logs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


DEFAULT_PORTS = {"watcher": 8481, "admission": 8482, "preemption": 8483, "recovery": 8484}

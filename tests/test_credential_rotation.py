"""A rotated seed, picked up by a running service: NATS reloads a configuration without the
old key, and the service's connection signs in anew with the seed file as it is now, with
no restart (shared/bus/connection.py). Real nats-server with nkey authentication."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.kv import KeyValue

import shared.bus.connection
from berth_cli.natsserver import NatsServer
from berth_console.feed import BusFeed
from berth_console.model import Model
from berth_console.queries import Queries
from shared.auth import ClientAuth, CredentialStore
from shared.bus import JOBS_BUCKET, STREAM, BucketWatch, Bus, BusError, NoResponders
from shared.events import AnyEvent, WorkloadFinished, WorkloadRef
from tests.conftest import FIXTURES, Stack, berth, captured_logs, connect_as
from tests.e2e import eventually, get_json, is_admitted
from tests.test_e2e_foundation import gpu_job

WAIT_S = 30.0  # generous: a check that would hang on the old code fails here instead


@pytest.fixture
def server(tmp_path: Path, store: CredentialStore) -> Iterator[NatsServer]:
    with NatsServer(store_dir=tmp_path / "nats", auth_conf=store.auth_conf) as running:
        yield running


class Recovery:
    """A service's bus as recovery uses it: a durable consumer, publishes, a watched bucket,
    a request subject served; each of them looked at once per round."""

    def __init__(self, bus: Bus, kv: KeyValue, admin: Bus) -> None:
        self.bus = bus
        self.kv = kv
        self.admin = admin
        self.consumed: asyncio.Queue[AnyEvent] = asyncio.Queue()
        self.watched: asyncio.Queue[str] = asyncio.Queue()
        self.stopping = asyncio.Event()

    async def on_events(self, events: list[AnyEvent]) -> None:
        for event in events:
            self.consumed.put_nowait(event)

    async def on_entry(self, entry: KeyValue.Entry) -> None:
        self.watched.put_nowait(entry.key)

    async def answer(self, verb: str, data: bytes) -> dict[str, Any]:
        return {"verb": verb, "asked": msgspec.json.decode(data)}

    async def round_trip(self, number: int) -> None:
        """A fact consumed, an event published, a key written and seen by the watch, and a
        request answered, all on the service's one connection."""
        name = f"job-{number}"
        finished = WorkloadFinished(
            source="test", workload=WorkloadRef("default", name, name), generation=1, succeeded=True
        )
        await self.admin.publish(finished)
        assert (await asyncio.wait_for(self.consumed.get(), WAIT_S)).workload.name == name
        subject = f"berth.job.rotation.{name}"
        ack = await asyncio.wait_for(
            self.bus.publish_raw(subject, b"{}", f"rotation-{name}"), WAIT_S
        )
        stored = await self.admin.js.get_last_msg(STREAM, subject)
        assert stored.seq == ack.seq
        await asyncio.wait_for(self.kv.put(f"rotation.{name}", b"{}"), WAIT_S)
        assert await asyncio.wait_for(self.watched.get(), WAIT_S) == f"rotation.{name}"
        # Served again once its subscription is bound anew: until then, as after any
        # reconnect, a request finds no responder and a client asks again.
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while True:
            try:
                reply = await self.admin.request(
                    "berth.api.recovery.ping", b'{"n": 1}', wait=WAIT_S
                )
                break
            except NoResponders:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)
        assert msgspec.json.decode(reply.data) == {"verb": "ping", "asked": {"n": 1}}


@pytest.fixture
async def recovery(server: NatsServer, store: CredentialStore) -> AsyncIterator[Recovery]:
    admin = await connect_as(server.url, store, "admin")
    # As a service connects (shared/service.py): it rides out outages (retry).
    bus = await Bus.connect(
        server.url, source="recovery", auth=ClientAuth(seed=store.seed_path("recovery"))
    )
    await bus.ensure_stream()
    kv = await bus.kv(JOBS_BUCKET)
    service = Recovery(bus, kv, admin)
    watch, _ = await BucketWatch.start(kv)
    subscription = await bus.durable_subscription("recovery", ["berth.wl.>"])
    served = await bus.serve_requests("berth.api.recovery.*", service.answer, queue="recovery")
    tasks = [
        asyncio.create_task(
            bus.consume(subscription, service.on_events, stopping=service.stopping)
        ),
        asyncio.create_task(watch.follow(service.on_entry, stopping=service.stopping)),
    ]
    try:
        yield service
    finally:
        service.stopping.set()
        bus.interrupt_waits()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT_S)
        await served.unsubscribe()
        await bus.close()
        await admin.close()


async def test_a_service_keeps_working_across_a_rotation_of_its_seed(
    recovery: Recovery, server: NatsServer, store: CredentialStore, tmp_path: Path
) -> None:
    """`berth creds rotate` then a reload: NATS drops the service's connection and refuses
    its old key; the connection signs in with the new seed and everything it had bound
    (consumer, watch, served requests, publishes) works on, on the same Bus object. The
    old seed is refused from then on."""
    await recovery.round_trip(1)
    old_seed = tmp_path / "old-recovery.nk"
    shutil.copy(store.seed_path("recovery"), old_seed)
    handle = recovery.bus.nc
    with captured_logs(shared.bus.connection) as logs:
        store.rotate("recovery")
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGHUP)  # what `berth creds rotate` does
        # The reload takes effect some time after the signal: round trips before it would
        # still run on the old key and prove nothing.
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while not any(line["event"] == "credentials_renewed" for line in logs):
            assert asyncio.get_running_loop().time() < deadline, logs
            await asyncio.sleep(0.05)
        await recovery.round_trip(2)
        await recovery.round_trip(3)
    assert recovery.bus.nc is handle  # the same connection, signed in anew: no restart
    renewed = [line for line in logs if line["event"] == "credentials_renewed"]
    assert [line["user"] for line in renewed] == ["recovery"], logs
    with pytest.raises(BusError, match="refused"):
        await Bus.connect(server.url, source="x", auth=ClientAuth(seed=old_seed), retry=False)


async def test_an_unchanged_seed_is_not_signed_in_with_again(
    recovery: Recovery, server: NatsServer, store: CredentialStore
) -> None:
    """NATS dropped the service's key, but its seed file still holds that key (the new seed
    not delivered yet, as a Secret volume updates later): the connection says so and keeps
    trying; once the file holds the new seed, it signs in and works on."""
    await recovery.round_trip(1)
    seed = store.seed_path("recovery")
    kept = seed.read_bytes()
    with captured_logs(shared.bus.connection) as logs:
        store.rotate("recovery")
        rotated = seed.read_bytes()
        seed.write_bytes(kept)  # the service's copy of its seed is still the old one
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGHUP)

        async def refused() -> None:
            while not any(line["event"] == "credentials_refused" for line in logs):  # noqa: ASYNC110
                await asyncio.sleep(0.05)

        await asyncio.wait_for(refused(), WAIT_S)
        seed.write_bytes(rotated)  # delivered
        await recovery.round_trip(2)
    told = [line["event"] for line in logs if line["event"].startswith("credentials_")]
    # Refused (maybe several times, at each reconnect) before the file changed, then renewed.
    assert told[0] == "credentials_refused" and told[-1] == "credentials_renewed", told
    assert told.count("credentials_renewed") == 1, told


async def test_the_console_follows_the_events_on_after_its_seed_rotates(
    server: NatsServer, store: CredentialStore
) -> None:
    """The console's event feed subscribes again on the reconnect that signing in anew
    announces: an event published after the rotation reaches its model."""
    admin = await connect_as(server.url, store, "admin")
    await admin.ensure_stream()
    bus = await Bus.connect(
        server.url, source="console", auth=ClientAuth(seed=store.seed_path("console"))
    )
    model = Model()
    feed = BusFeed(bus, model, Queries(bus))
    following = asyncio.create_task(feed.run())

    async def folded(name: str) -> None:
        event = WorkloadFinished(
            source="test", workload=WorkloadRef("default", name, name), generation=1, succeeded=True
        )
        seq = (await admin.publish(event)).seq

        async def reached() -> None:
            while model.seq < seq:  # noqa: ASYNC110 - the model has no event to wait on
                await asyncio.sleep(0.05)

        await asyncio.wait_for(reached(), WAIT_S)

    try:
        await folded("before")
        store.rotate("console")
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGHUP)
        await folded("after")
    finally:
        feed.stop()
        await asyncio.wait_for(asyncio.gather(following, return_exceptions=True), WAIT_S)
        await bus.close()
        await admin.close()


SERVICES = ("watcher", "admission", "preemption", "recovery")


def _admit(stack: Stack, tmp_path: Path, name: str) -> None:
    """Submit a one-GPU Job and wait until it is admitted: the watcher, admission and the
    watcher again each consumed and published for it."""
    job = tmp_path / f"{name}.yaml"
    job.write_text(gpu_job(name, tmp_path / f"{name}.done"))
    berth("submit", "-f", str(job), url=stack.url)

    def admitted() -> bool:
        workloads = {w["metadata"]["name"]: w for w in get_json(stack.url, "workloads")}
        return name in workloads and is_admitted(workloads[name])

    eventually(admitted, timeout=30, interval=0.1)
    (tmp_path / f"{name}.done").touch()  # it finishes, releasing its GPU


def _service_pids(stack: Stack) -> dict[str, int]:
    """Each role's replica pid, as `berth status` lists them."""
    body = msgspec.json.decode(berth("status", "-o", "json", url=stack.url).stdout)
    return {replica["role"]: replica["pid"] for replica in body["replicas"]}


def test_services_under_berth_up_work_on_after_their_seeds_rotate(
    stack: Stack, tmp_path: Path
) -> None:
    """`berth creds rotate` of every service's seed, each reloading `berth up`'s NATS: every
    service signs in anew and works on, the same processes (none exited to be restarted
    with its new seed), and a Job submitted afterwards is admitted."""
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=stack.url)
    _admit(stack, tmp_path, "before")
    before = _service_pids(stack)
    assert sorted(before) == sorted(SERVICES)
    creds = stack.data_dir / "creds"
    for user in SERVICES:
        result = berth("creds", "rotate", str(creds), user, url=stack.url)
        assert "NATS reloaded" in result.stdout, result.stdout
        assert "signs in anew" in result.stdout, result.stdout
    _admit(stack, tmp_path, "after")
    assert _service_pids(stack) == before
    for user, pid in before.items():
        assert Path(f"/proc/{pid}").exists(), f"{user} (pid {pid}) exited"

"""The bus's users and permissions, tried against a real nats-server with nkey authentication."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from services.watcher.kube.triggers import follow_triggers, stop_following
from shared.auth import (
    SERVICE_USERS,
    USERS,
    ClientAuth,
    CredentialStore,
    authorization_config,
    owned_subjects,
    permissions_for,
)
from shared.bus import STREAM, Bus, BusError, BusSettings
from shared.bus.settings import ALL_COPIES
from shared.events import AnyEvent, WorkloadAdmitted, WorkloadRef, subject_for
from shared.subjects import subject_matcher
from tests.conftest import connect_as

# (user, subject, may publish, why)
PUBLISH_CASES = [
    ("watcher", "berth.wl.submitted.default.job-a", True, "the watcher reports facts"),
    ("watcher", "berth.cq.cq.admitted.default.job-a", False, "a fact-reporter never decides quota"),
    ("watcher", "berth.cq.cq.evict.default.job-a", False, "nor orders evictions"),
    ("admission", "berth.cq.cq.admitted.default.job-a", True, "admission decides"),
    ("admission", "berth.wl.finished.default.job-a", False, "admission never forges a fact"),
    ("admission", "berth.cmd.create.default.job-a", False, "nor a recovery command"),
    ("preemption", "berth.cq.cq.evict.default.job-a", True, "preemption orders evictions"),
    ("preemption", "berth.cq.cq.admitted.default.job-a", False, "but never admits"),
    ("recovery", "berth.cmd.create.default.job-a", True, "recovery sends commands"),
    ("recovery", "berth.cmd.delete.default.job-a", True, "and cancels its managed jobs"),
    ("recovery", "berth.cmd.submit.default.job-a", False, "but never poses as the CLI"),
    ("recovery", "$KV.berth-jobs.job.1", True, "recovery owns the managed-job records"),
    ("recovery", "berth.cq.cq.admitted.default.job-a", False, "recovery never admits"),
    ("cli", "$KV.berth-config.ClusterQueue.cq", True, "the CLI applies config"),
    ("cli", "berth.cmd.submit.default.job-a", True, "the CLI submits workloads on the bus"),
    ("cli", "berth.cmd.remove.default.job-a", True, "and deletes them"),
    ("cli", "berth.cmd.active.default.job-a", True, "and stops or resumes one (spec.active)"),
    ("console", "berth.cmd.active.default.job-a", False, "the console stops no workload"),
    ("admission", "berth.cmd.active.default.job-a", False, "admission follows spec.active, never sets it"),
    ("watcher", "berth.cmd.active.default.job-a", True, "the kube backend relays spec.active set on a Workload (kueuectl)"),
    ("watcher", "berth.api.admission.workloads", True, "the kube status writer asks admission for the Workloads it writes"),
    ("watcher", "berth.api.admission.cohorts", True, "and the queues' and Cohorts' status"),
    ("watcher", "berth.api.recovery.cancel", False, "but cancels no managed job"),
    ("watcher", "berth.api.admission.pending", False, "nor reads what it does not write"),
    ("cli", "berth.cmd.create.default.job-a", False, "never a managed job's attempt"),
    ("cli", "$KV.berth-objects.default.job-a", False, "the objects bucket is the local backend's"),
    ("cli", "berth.api.admission.workloads", True, "the CLI asks the services"),
    ("cli", "berth.cq.cq.admitted.default.job-a", False, "the CLI never publishes a decision"),
    ("cli", "berth.cq.cq.evict.default.job-a", False, "nor an eviction (any namespace)"),
    ("cli", "berth.wl.submitted.default.job-a", False, "nor a fact (a negative request)"),
    ("cli", "$KV.berth-jobs.job.1", False, "nor a managed-job record"),
    ("cli", "$JS.API.STREAM.DELETE.BERTH", False, "nor deletes the event stream"),
    ("cli", "$JS.API.CONSUMER.CREATE.BERTH", True, "the CLI follows the event stream (berth events)"),
    ("cli", "$JS.API.CONSUMER.DURABLE.CREATE.BERTH.watcher", False, "but never takes a service's durable consumer"),
    ("cli", "berth.check.budget.default.job-a", True, "an operator answers an admission check"),
    ("checker", "berth.check.budget.default.job-a", True, "a check's controller answers it"),
    ("checker", "berth.api.admission.workloads", True, "and finds the reservation it answers"),
    ("checker", "berth.cq.cq.admitted.default.job-a", False, "but never admits"),
    ("checker", "berth.wl.podsready.default.job-a", False, "nor reports a fact"),
    ("checker", "$KV.berth-config.admissioncheck._.budget", False, "nor writes config"),
    ("admission", "berth.cq.cq.reserved.default.job-a", True, "admission reserves quota for checks"),
    ("watcher", "berth.b.wl.started", True, "the watcher reports facts in batches too"),
    ("watcher", "berth.b.cq.admitted", False, "but never a batch of decisions"),
    ("admission", "berth.b.cq.admitted", True, "admission publishes its decisions in batches"),
    ("admission", "berth.b.cq.pending", True, "and its pending reports"),
    ("admission", "berth.b.wl.finished", False, "never a batch of facts"),
    ("preemption", "berth.b.cq.evict", True, "preemption orders evictions in batches"),
    ("preemption", "berth.b.cq.admitted", False, "but never a batch of admissions"),
    ("recovery", "berth.b.job.status", True, "recovery publishes its managed-job records in batches"),
    ("recovery", "berth.b.cmd.create", False, "but its commands one by one (the watcher reads a name's newest)"),
    ("recovery", "berth.b.cq.evict", False, "but no batch of evictions"),
    ("cli", "berth.b.cmd.create", False, "the CLI's commands are single messages, never batches"),
    ("cli", "berth.b.cq.admitted", False, "nor a batch of decisions"),
    ("checker", "berth.b.cq.reserved", False, "a check's controller publishes no batch"),
    ("reader", "berth.b.wl.submitted", False, "the reader publishes no batch"),
    ("console", "berth.b.cq.evict", False, "nor does the console"),
    ("watcher", "berth.check.budget.default.job-a", False, "the watcher answers no check"),
    ("admission", "berth.check.budget.default.job-a", False, "nor does admission: it decides"),
    ("reader", "berth.wl.submitted.default.job-a", False, "the reader publishes nothing"),
    ("reader", "$KV.berth-config.ClusterQueue.cq", False, "not even config"),
    ("console", "berth.api.admission.clusterqueues", True, "the console queries admission"),
    ("console", "berth.api.recovery.cancel", True, "and asks recovery to cancel (behind its token)"),
    ("console", "berth.api.watcher.logs", True, "and the watcher for a workload's logs"),
    ("console", "berth.api.recovery.launch", False, "but launches no managed job: a launch runs a command"),
    ("console", "berth.cq.cq.admitted.default.job-a", False, "the console never publishes a decision"),
    ("console", "berth.wl.evicted.default.job-a", False, "nor a fact"),
    ("console", "$KV.berth-jobs.job.1", False, "nor writes a managed-job record"),
    ("console", "$KV.berth-config.clusterqueue._.cq", True, "it stops and resumes a ClusterQueue (behind its token)"),
    ("console", "$KV.berth-config.localqueue.team-a.lq", True, "and a LocalQueue"),
    ("console", "$KV.berth-config.resourceflavor._.f", False, "but writes no other config: no flavor"),
    ("console", "$KV.berth-config.workloadpriorityclass._.high", False, "no priority class"),
    ("console", "$KV.berth-config.clusterqueuepolicy._.cq", False, "no ageing policy"),
    ("console", "$KV.berth-secrets.job.1", False, "nor a managed job's secret"),
    ("console", "berth.cmd.submit.default.job-a", False, "nor submits a workload"),
    ("console", "$JS.API.STREAM.PURGE.KV_berth-config", False, "nor purges the config"),
    ("console", "$JS.API.STREAM.CREATE.KV_berth-jobs", False, "nor creates a bucket"),
    ("admission", "$KV.berth-leases.admission", True, "a service keeps its own lease"),
    ("admission", "$KV.berth-leases.preemption", False, "and no other role's"),
    ("watcher", "berth.dlq.watcher.object", True, "a service dead-letters under its name"),
    ("watcher", "berth.dlq.admission.event", False, "and only there"),
]


@pytest.mark.parametrize(
    ("user", "subject", "allowed", "reason"), PUBLISH_CASES, ids=[c[3] for c in PUBLISH_CASES]
)
def test_permissions_table(user: str, subject: str, allowed: bool, reason: str) -> None:
    """Each user's publish permissions, as rendered for the server."""
    may = subject_matcher(permissions_for(user).publish)
    assert may(subject) is allowed, reason


async def test_the_server_enforces_the_table(secured_url: str, store: CredentialStore) -> None:
    """What the table allows reaches a subscriber; what it forbids draws the server's refusal.

    Messages from two connections are not ordered against each other, so neither outcome is
    judged by a marker: an allowed publish must arrive, a forbidden one must come back as a
    permissions violation naming its subject, and must not have arrived by then.
    """
    admin = await connect_as(secured_url, store, "admin")
    seen: list[str] = []

    async def collect(msg: object) -> None:
        seen.append(msg.subject)  # type: ignore[attr-defined]

    await admin.nc.subscribe(">", cb=collect)
    await admin.nc.flush()
    users = {user for user, *_ in PUBLISH_CASES}
    clients = {user: await connect_as(secured_url, store, user) for user in users}
    refusals: dict[str, list[str]] = {user: [] for user in users}
    for user, client in clients.items():
        client.on_error = _recorder(refusals[user])
    try:
        for user, subject, allowed, reason in PUBLISH_CASES:
            seen.clear()
            refusals[user].clear()
            await clients[user].nc.publish(subject, b"{}")
            await clients[user].nc.flush()
            if allowed:
                arrived = await _eventually(lambda subject=subject: subject in seen)
                assert arrived, f"{user} -> {subject} never arrived: {reason}"
            else:
                # The server's refusal names the subject (nats-py lower-cases the text).
                said, wanted = refusals[user], subject.lower()
                refused = await _eventually(
                    lambda said=said, wanted=wanted: any(wanted in text for text in said)
                )
                assert refused, f"{user} -> {subject} drew no permissions violation: {reason}"
                assert subject not in seen, f"{user} -> {subject} was delivered: {reason}"
    finally:
        for client in clients.values():
            await client.close()
        await admin.close()


def _recorder(into: list[str]) -> Callable[[Exception], Awaitable[None]]:
    async def record(error: Exception) -> None:
        into.append(str(error))

    return record


async def _eventually(condition: Callable[..., bool], seconds: float = 5.0) -> bool:
    """Polls `condition` for up to `seconds` (generous: a loaded CI machine)."""
    for _ in range(int(seconds / 0.01)):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


async def test_unauthenticated_connection_is_refused(secured_url: str) -> None:
    """No credentials, no bus: the error says so and names the remedy."""
    with pytest.raises(BusError, match=r"refused the credentials.*BERTH_CREDS"):
        await Bus.connect(secured_url, source="nobody", auth=ClientAuth(), retry=False)


async def test_a_forged_seed_is_refused(secured_url: str, tmp_path: Path) -> None:
    """A seed the server does not know is refused like no seed at all."""
    other = CredentialStore(tmp_path / "other")
    other.ensure()
    with pytest.raises(BusError, match="refused the credentials"):
        await connect_as(secured_url, other, "admin")


def _admitted(generation: int) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        id=f"admitted-u-{generation}",
        source="admission",
        workload=WorkloadRef("default", "job-a", "u"),
        cluster_queue="cq",
        local_queue="lq",
        priority=0,
        assignments=[],
        generation=generation,
    )


async def test_cli_cannot_store_an_admission_and_reader_follows(
    secured_url: str, store: CredentialStore
) -> None:
    """Through JetStream: admission's admission is stored, the CLI's forged one is not; the
    reader follows the stream and cannot write to it."""
    admission = await connect_as(secured_url, store, "admission")
    cli = await connect_as(secured_url, store, "cli")
    reader = await connect_as(secured_url, store, "reader")
    try:
        await admission.ensure_stream()
        await admission.publish(_admitted(1))
        cli.on_error = _quiet  # the violation is expected
        await cli.nc.publish("berth.cq.cq.admitted.default.job-a", b"{}")
        await cli.nc.flush()
        reader.on_error = _quiet
        await reader.nc.publish("berth.wl.submitted.default.job-a", b"{}")
        await reader.nc.flush()
        await asyncio.sleep(0.2)
        info = await admission.js.stream_info(STREAM)
        # Admission's decision as a batch and its per-workload copy (docs/events.md "Batches").
        assert info.state.messages == 2, "only admission's own decision is stored"

        received: list[str] = []
        done = asyncio.Event()

        async def follow(msg: object) -> None:
            received.append(msg.subject)  # type: ignore[attr-defined]
            done.set()

        await reader.js.subscribe("berth.cq.>", stream=STREAM, cb=follow, ordered_consumer=True)
        await asyncio.wait_for(done.wait(), 5)
        assert received == ["berth.cq.cq.admitted.default.job-a"]
    finally:
        for bus in (admission, cli, reader):
            await bus.close()


@pytest.mark.parametrize(
    "copies",
    [ALL_COPIES, ()],
    ids=["copies", "no-copies"],  # BERTH_BUS_COPIES: the triggers are the batches either way
)
async def test_the_kube_status_writer_follows_its_triggers_as_the_watcher(
    secured_url: str, store: CredentialStore, copies: tuple[str, ...]
) -> None:
    """The Kubernetes backend's status writer hears decisions and facts with the watcher's own
    credentials (it once subscribed on the event subjects, which the server refuses), whether
    or not the deployment keeps the per-workload copies, each event once."""
    settings = BusSettings(copies=copies)
    admission = await connect_as(secured_url, store, "admission", settings)
    watcher = await connect_as(secured_url, store, "watcher", settings)
    refusals: list[str] = []
    watcher.on_error = _recorder(refusals)
    heard: list[str] = []

    async def hear(events: list[AnyEvent]) -> None:
        heard.extend(subject_for(event) for event in events)

    try:
        await admission.ensure_stream()
        subscriptions = await follow_triggers(watcher, hear)
        await admission.publish(_admitted(1))
        assert await _eventually(lambda: bool(heard)), f"nothing heard; refused: {refusals}"
        await asyncio.sleep(0.2)  # a second delivery (the copy) would come by now
        assert heard == ["berth.cq.cq.admitted.default.job-a"]
        assert refusals == []
        await stop_following(subscriptions)
    finally:
        for bus in (admission, watcher):
            await bus.close()


async def _quiet(_: Exception) -> None:
    return None


def test_credentials_are_private_and_kept(store: CredentialStore) -> None:
    """Seeds and auth.conf are 0600 in a 0700 directory; a second ensure keeps the seeds."""
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    for user in USERS:
        assert stat.S_IMODE(store.seed_path(user).stat().st_mode) == 0o600, user
    assert stat.S_IMODE(store.auth_conf.stat().st_mode) == 0o600
    before = {user: store.seed_path(user).read_bytes() for user in USERS}
    store.ensure()
    assert before == {user: store.seed_path(user).read_bytes() for user in USERS}


def test_rotation_replaces_one_seed(store: CredentialStore) -> None:
    """Rotating a user changes its seed and public key only."""
    before = {user: store.seed_path(user).read_bytes() for user in USERS}
    keys_before = store.ensure()
    keys_after = store.rotate("cli")
    assert store.seed_path("cli").read_bytes() != before["cli"]
    assert keys_after["cli"] != keys_before["cli"]
    assert {u: k for u, k in keys_after.items() if u != "cli"} == {
        u: k for u, k in keys_before.items() if u != "cli"
    }
    with pytest.raises(ValueError, match="unknown bus user"):
        store.rotate("root")


def test_auth_conf_holds_no_seed(store: CredentialStore) -> None:
    """The server's fragment carries public keys only."""
    text = store.auth_conf.read_text()
    for user in USERS:
        assert store.seed_path(user).read_text().strip() not in text
    assert text.count('"nkey": "U') == len(USERS)
    assert authorization_config({}).startswith("# Generated by Berth")


def test_security_page_lists_every_owned_subject() -> None:
    """docs/security.md's table names each user and every subject it owns (no drift)."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "security.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `")
    }
    for user in USERS:
        assert user in rows, f"docs/security.md has no row for {user}"
        for subject in owned_subjects(user) if user != "admin" else ():
            assert f"`{subject}`" in rows[user], f"{user}'s row does not name {subject}"
    for user in SERVICE_USERS:
        assert f"berth.api.{user}.>" in permissions_for(user).subscribe

"""`berth up` secured and supervised: real nats-server, real service processes, no mocks.

One stack serves the read-only checks (credentials on disk, who may publish what); the tests
that kill things get their own.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest

from berth_cli.data_dir_claim import CLAIM_FILE
from berth_cli.launcher import LiveStack, start_stack
from shared.auth import USERS, ClientAuth
from shared.bus import STREAM, Bus, BusError
from tests.conftest import CLI_CREDENTIALS, FIXTURES, Stack, berth, pooled_stack
from tests.e2e import eventually, get_json, is_admitted
from tests.stack_pool import StackPool
from tests.test_e2e_foundation import gpu_job

SEED = re.compile(r"\bSU[A-Z2-7]{56}\b")  # an nkey user seed

SERVICES = ("watcher", "admission", "preemption", "recovery")
ADMITTED = "berth.cq.perm-test.admitted.default.{}"  # a decision only admission may publish


@pytest.fixture(scope="module")
def secured(request: pytest.FixtureRequest, stack_pool: StackPool) -> Iterator[LiveStack]:
    running = pooled_stack(request, stack_pool)
    assert running.cli_credentials is not None
    CLI_CREDENTIALS[running.url] = str(running.cli_credentials)
    try:
        yield running
    finally:
        stack_pool.release(running)  # stopped in the background
        CLI_CREDENTIALS.pop(running.url, None)


def _environ(stack: LiveStack, name: str) -> list[bytes]:
    """The environment of the stack's process ``name``, as `berth up` listed it at start. If
    that process is gone (a restart changes its pid), the failure says what `berth up`
    reported since and how the process's log ends, so a flake under load can be told from a
    crash."""
    try:
        return Path(f"/proc/{stack.pids[name]}/environ").read_bytes().split(b"\0")
    except FileNotFoundError:
        logs = sorted((stack.data_dir / "logs").glob(f"{name}*.log"))
        tail = logs[0].read_text(errors="replace").splitlines()[-15:] if logs else []
        pytest.fail(
            f"{name} (pid {stack.pids[name]}) is gone; berth up said:\n"
            + "".join(stack.output[-15:])
            + "its log ends:\n"
            + "\n".join(tail)
        )


def _seed(stack: LiveStack, user: str) -> ClientAuth:
    seed = stack.credentials(user)
    assert seed is not None, f"no {user} seed"
    return ClientAuth(seed=seed)


async def _connect(stack: LiveStack, user: str) -> Bus:
    return await Bus.connect(stack.url, source=user, auth=_seed(stack, user), retry=False)


async def _stored(stack: LiveStack, subject: str) -> bool:
    """Whether the event stream holds a message on ``subject`` (read as admin)."""
    admin = await _connect(stack, "admin")
    try:
        await admin.js.get_last_msg(STREAM, subject)
        return True
    except nats.js.errors.NotFoundError:
        return False
    finally:
        await admin.close()


async def _publish(stack: LiveStack, user: str, subject: str) -> None:
    """A plain publish (the stream stores it if the user may); an error-free flush means
    nothing: a denied publish is only reported to the client's error callback."""
    bus = await _connect(stack, user)
    try:
        await bus.nc.publish(subject, b"{}")
        await bus.nc.flush()
    finally:
        await bus.close()


def test_credentials_are_made_private(secured: LiveStack) -> None:
    """Seeds, auth.conf, pid files: 0600 in a 0700 dir; the data dir and every log are private."""
    creds = secured.data_dir / "creds"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o700
    assert stat.S_IMODE(secured.data_dir.stat().st_mode) == 0o700
    assert {f"{user}.nk" for user in USERS} | {"auth.conf"} <= {p.name for p in creds.iterdir()}
    for path in creds.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    logs = list((secured.data_dir / "logs").glob("*.log"))
    assert sorted(p.stem for p in logs) == sorted([*SERVICES, "console"])
    for path in logs:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert secured.cli_credentials == creds / "cli.nk"
    # The seeds are in no log and not in auth.conf (public keys only).
    seeds = [(creds / f"{user}.nk").read_text().strip() for user in USERS]
    for text in [(creds / "auth.conf").read_text(), *(p.read_text() for p in logs)]:
        assert not any(seed in text for seed in seeds)


def test_creds_init_makes_private_seeds_and_never_prints_them(tmp_path: Path) -> None:
    directory = tmp_path / "creds"

    def init() -> str:
        return subprocess.run(
            [sys.executable, "-m", "berth_cli", "creds", "init", str(directory)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env={**os.environ, "COLUMNS": "250"},
        ).stdout

    first = init()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for user in USERS:
        seed = directory / f"{user}.nk"
        assert str(seed) in first
        assert stat.S_IMODE(seed.stat().st_mode) == 0o600
        assert seed.read_text().strip() not in first
    assert str(directory / "auth.conf") in first
    seeds = {user: (directory / f"{user}.nk").read_text() for user in USERS}
    second = init()
    assert f"kept {len(USERS)} existing seeds" in second
    assert seeds == {user: (directory / f"{user}.nk").read_text() for user in USERS}


def test_a_shared_data_dir_is_refused(tmp_path: Path) -> None:
    """`berth up --data-dir /tmp` must not make /tmp private to one user: it says why, starts
    nothing, and leaves the directory as it was."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    result = subprocess.run(
        [sys.executable, "-m", "berth_cli", "up", "--data-dir", str(shared), "--nats-port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert result.returncode == 1
    assert "is a shared directory" in result.stdout
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert not (shared / "creds").exists()


def test_a_second_stack_on_a_data_dir_in_use_is_refused(secured: LiveStack) -> None:
    """Two stacks on one data dir would share a JetStream store and a set of runs (the second
    watcher restarts the first's jobs, which fail): the second `berth up`, even on another
    port, says who holds the dir and starts nothing; the first runs on."""
    result = subprocess.run(
        [sys.executable, "-m", "berth_cli", "up", "--data-dir", str(secured.data_dir)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert result.returncode == 1, result.stdout
    assert f"in use by another `berth up` (pid {secured.process.pid}," in result.stdout
    assert "ready" not in result.stdout
    assert secured.process.poll() is None
    assert isinstance(get_json(secured.url, "cq"), list)  # it still serves
    # NATS and every service hold the claim too: killed with SIGKILL, `berth up` leaves them
    # draining, and the directory stays claimed until the last has exited
    claim = str(secured.data_dir / CLAIM_FILE)
    for name, pid in secured.pids.items():
        assert claim in _open_files(pid), name


def _open_files(pid: int) -> set[str]:
    """What a process's descriptors point at (one closed while read is left out)."""
    found = set()
    for link in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.add(os.readlink(link))
        except FileNotFoundError:
            continue
    return found


def test_services_sign_in_as_themselves(secured: LiveStack) -> None:
    """Each service process got its own seed, whatever BERTH_CREDS `berth up` was given."""
    for service in SERVICES:
        environ = _environ(secured, service)
        expected = f"BERTH_CREDS={secured.data_dir / 'creds' / service}.nk".encode()
        assert expected in environ, service
        assert f"BERTH_REPLICA_ID={service}-0".encode() in environ


async def test_unauthenticated_connection_is_refused(secured: LiveStack) -> None:
    with pytest.raises(BusError, match="refused the credentials"):
        await Bus.connect(secured.url, source="nobody", auth=ClientAuth(), retry=False)


# (user, subject, stored?, why)
PUBLISH_CASES = [
    ("cli", ADMITTED.format("by-cli"), False, "the CLI never publishes a decision"),
    ("watcher", ADMITTED.format("by-watcher"), False, "the watcher reports facts, never quota"),
    ("reader", ADMITTED.format("by-reader"), False, "the reader publishes nothing"),
    ("reader", "berth.wl.submitted.default.by-reader", False, "not even a fact"),
    ("admission", ADMITTED.format("by-admission"), True, "admission decides"),
]


@pytest.mark.parametrize(
    ("user", "subject", "stored", "reason"), PUBLISH_CASES, ids=[c[3] for c in PUBLISH_CASES]
)
async def test_who_may_publish_what(
    secured: LiveStack, user: str, subject: str, stored: bool, reason: str
) -> None:
    await _publish(secured, user, subject)
    deadline = time.monotonic() + (5.0 if stored else 0.3)  # a denial is seen by its absence
    found = await _stored(secured, subject)
    while not found and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        found = await _stored(secured, subject)
    assert found is stored, reason


async def test_reader_follows_the_events(secured: LiveStack) -> None:
    """The reader (an external tool) reads the stream; what it publishes goes nowhere."""
    await _publish(secured, "admission", ADMITTED.format("followed"))
    reader = await _connect(secured, "reader")
    try:
        subscription = await reader.js.subscribe(
            "berth.cq.perm-test.>", ordered_consumer=True, stream=STREAM
        )
        message = await subscription.next_msg(timeout=5)
        assert message.subject.startswith("berth.cq.perm-test.admitted.")
        await subscription.unsubscribe()
        kv_put = "$KV.berth-config.ClusterQueue.by-reader"
        await reader.nc.publish(kv_put, b"{}")
        await reader.nc.flush()
    finally:
        await reader.close()
    admin = await _connect(secured, "admin")
    try:
        with pytest.raises(nats.js.errors.NotFoundError):
            await admin.js.get_last_msg("KV_berth-config", kv_put)
    finally:
        await admin.close()


def test_rotating_a_seed_under_berth_up(secured: LiveStack, tmp_path: Path) -> None:
    """`berth creds rotate` rewrites the seed, reloads `berth up`'s NATS, and the old seed
    stops working while the new one (same file) signs in."""
    creds = secured.data_dir / "creds"
    old = tmp_path / "old-reader.nk"
    old.write_text((creds / "reader.nk").read_text())
    old.chmod(0o600)
    result = subprocess.run(
        [sys.executable, "-m", "berth_cli", "creds", "rotate", str(creds), "reader"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert f"NATS reloaded (pid {secured.pids['nats']})" in result.stdout
    # No seed printed: a user seed is "SU" and 56 more base32 letters, a word of its own; a
    # public key printed beside it may hold "SUA" anywhere (it did, once in a few hundred).
    assert not SEED.search(result.stdout) and not SEED.search(result.stderr)

    async def sign_in(seed: Path) -> None:
        bus = await Bus.connect(secured.url, source="x", auth=ClientAuth(seed=seed), retry=False)
        await bus.close()

    def old_refused() -> bool:
        with pytest.raises(BusError, match="refused"):
            asyncio.run(sign_in(old))
        return True

    eventually(old_refused, timeout=5)
    asyncio.run(sign_in(creds / "reader.nk"))


def _apply_and_admit(stack: LiveStack, tmp_path: Path, name: str) -> float:
    """Submit a one-GPU Job; returns the seconds until it is admitted."""
    job = tmp_path / f"{name}.yaml"
    job.write_text(gpu_job(name, tmp_path / f"{name}.done"))
    submitted = time.monotonic()
    berth("submit", "-f", str(job), url=stack.url)

    def admitted() -> bool:
        workloads = {w["metadata"]["name"]: w for w in get_json(stack.url, "workloads")}
        return name in workloads and is_admitted(workloads[name])

    eventually(admitted, timeout=30, interval=0.1)
    return time.monotonic() - submitted


def _nats_pid(stack: LiveStack, node: str = "nats") -> int:
    return int((stack.data_dir / "creds" / f"{node}.pid").read_text())


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_nats_killed_comes_back_and_the_services_ride_it_out(stack: Stack, tmp_path: Path) -> None:
    """kill -9 nats-server: `berth up` restarts it on the same port and store; the services
    wait for it (no restart) and the next Job is admitted."""
    berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=stack.url)
    _apply_and_admit(stack, tmp_path, "before")
    services = {name: stack.pids[name] for name in SERVICES}
    killed = time.monotonic()
    os.kill(stack.pids["nats"], signal.SIGKILL)
    eventually(lambda: _nats_pid(stack) != stack.pids["nats"], timeout=10, interval=0.05)
    (tmp_path / "before.done").touch()  # its quota comes back for the next one
    admitted_in = _apply_and_admit(stack, tmp_path, "after")
    total = time.monotonic() - killed
    print(f"\nNATS kill -> next admission {total:.2f}s (submit -> admitted {admitted_in:.2f}s)")
    for name, pid in services.items():
        assert _alive(pid), f"{name} exited during the outage"
    assert "nats exited with code -9; restarting in 0s" in "".join(stack.output)


def test_kill_9_of_berth_up_leaves_no_orphan(tmp_path: Path) -> None:
    """SIGKILL on `berth up`: the kernel tells each child (PR_SET_PDEATHSIG); NATS, the
    services and the running job are gone and the ports free within a couple of seconds."""
    stack = start_stack(tmp_path / "berth")
    CLI_CREDENTIALS[stack.url] = str(stack.cli_credentials)
    try:
        berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=stack.url)
        _apply_and_admit(stack, tmp_path, "sleeper")
        job_log = stack.data_dir / "logs" / "default" / "sleeper" / "1-main-0.log"
        eventually(lambda: job_log.exists() and "started" in job_log.read_text())
        children = list(stack.pids.values())
        job = [pid for pid in _all_pids() if str(tmp_path / "sleeper.done") in _cmdline(pid)]
        assert job, "the job's process is not running"
        ports = [int(a.rsplit(":", 1)[1]) for a in stack.addresses.values()]
        killed = time.monotonic()
        stack.process.kill()
        stack.process.wait()

        def all_gone() -> bool:
            return not any(_alive(pid) for pid in children + job) and all(map(_free, ports))

        eventually(all_gone, timeout=15, interval=0.05)  # the console drains its live pages too
        print(f"\nberth up kill -9 -> children gone, ports free: {time.monotonic() - killed:.2f}s")
    finally:
        stack.stop()
        CLI_CREDENTIALS.pop(stack.url, None)


def test_replicas(stack_pool: StackPool, tmp_path: Path) -> None:
    """--replicas 2: eight service processes, each with its own id, port and log; all ready."""
    stack = start_stack(tmp_path / "berth", replicas=2)
    try:
        names = [f"{service}-{i}" for service in SERVICES for i in range(2)]
        assert sorted(stack.pids) == sorted([*names, "nats", "console"])
        assert len({stack.addresses[name] for name in names}) == 8
        for name in names:
            environ = _environ(stack, name)
            assert f"BERTH_REPLICA_ID={name}".encode() in environ
            assert (stack.data_dir / "logs" / f"{name}.log").exists()
        rows = [line.split()[0] for line in stack.output if re.match(r"^[a-z]+-\d ", line)]
        assert rows == names  # one row each, by role
    finally:
        stack_pool.release(stack)  # stopped in the background


def test_nats_cluster(stack_pool: StackPool, tmp_path: Path) -> None:
    """--nats-cluster 3: three JetStream nodes with authenticated routes; the stream is kept
    on all three, a Job is admitted through it, and a killed node is restarted."""
    stack = start_stack(tmp_path / "berth", nats_cluster=3)
    CLI_CREDENTIALS[stack.url] = str(stack.cli_credentials)
    try:
        nodes = [f"nats-{i}" for i in range(3)]
        assert nodes == [name for name in stack.pids if name.startswith("nats")]
        assert stack.url == ",".join(stack.addresses[node] for node in nodes)
        berth("apply", "-f", str(FIXTURES / "seed003-kueue-resources.yaml"), url=stack.url)
        _apply_and_admit(stack, tmp_path, "clustered")

        async def stream_replicas() -> int:
            admin = await _connect(stack, "admin")
            try:
                info = await admin.js.stream_info(STREAM)
                assert info.cluster is not None and info.cluster.leader
                return len([r for r in info.cluster.replicas or [] if r.current]) + 1
            except nats.errors.Error as error:  # a node just back may not answer yet
                raise AssertionError(repr(error)) from error
            finally:
                await admin.close()

        assert asyncio.run(stream_replicas()) == 3

        # A server without the route password cannot join.
        config = (stack.data_dir / "creds" / "nats-0.conf").read_text()
        route_port = int(re.search(r'listen: "127\.0\.0\.1:(\d+)"', config).group(1))  # type: ignore[union-attr]
        assert "Authorization Violation" in _route_handshake(route_port)

        os.kill(stack.pids["nats-1"], signal.SIGKILL)
        eventually(lambda: _nats_pid(stack, "nats-1") != stack.pids["nats-1"], timeout=10)
        eventually(lambda: asyncio.run(stream_replicas()) == 3, timeout=30)  # caught up again
    finally:
        stack_pool.release(stack)  # stopped in the background
        CLI_CREDENTIALS.pop(stack.url, None)


def _route_handshake(port: int) -> str:
    """Dial a route port as a would-be cluster peer without credentials."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.recv(4096)  # INFO
        connection.sendall(b'CONNECT {"verbose":false,"pedantic":false,"name":"intruder"}\r\n')
        connection.sendall(b"PING\r\n")
        return connection.recv(4096).decode(errors="replace")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""

"""Fixtures with real parts: a real nats-server on loopback, real service processes.

The nats-server fixture is synchronous (no event-loop scope trouble with pytest-asyncio 1.x)
and each test gets its own server with its own store, so no test sees another's events; a
server starts in ~20 ms.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import structlog
from nats.js.api import ConsumerInfo
from structlog.testing import capture_logs

from berth_cli.launcher import LiveStack
from berth_cli.launcher import start_stack as start_live_stack
from berth_cli.natsserver import NatsServer
from shared.auth import ClientAuth, CredentialStore
from shared.bus import STREAM, Bus, BusSettings
from tests.cli_fork import command as cli_command
from tests.stack_pool import StackPool

REPO = Path(__file__).resolve().parent.parent
SEEDS = REPO.parent / "shared" / "seeds"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(store_dir=tmp_path / "nats") as server:
        yield server


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture
async def watcher_bus(nats_url: str) -> AsyncIterator[Bus]:
    """A connection as the watcher to a fresh server whose event stream exists."""
    connected = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    await connected.ensure_stream()
    yield connected
    await connected.close()


# The `cli` user's seed of each running stack, by NATS URL: `berth()` runs the CLI as a user
# of that stack would, with the credentials `berth up` printed.
CLI_CREDENTIALS: dict[str, str] = {}
# The `admin` user's seed of each running stack, by NATS URL: see :func:`bus_auth`.
ADMIN_CREDENTIALS: dict[str, Path] = {}


def bus_auth(url: str) -> ClientAuth:
    """The credentials this test process's own bus connections to ``url`` sign in with (audits
    of the event log, peeks into buckets, a service's parts run in-process): the `admin` of a
    running stack (:func:`signed_in`), none on a bare test server (which asks for none). Every
    test connection takes them from here (``Bus.connect`` reads no environment)."""
    return ClientAuth(seed=ADMIN_CREDENTIALS.get(url))


def berth(
    *args: str, url: str, check: bool = True, stdin: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run the real `berth` CLI in a subprocess, as a user would (its imports done ahead:
    tests/cli_fork.py)."""
    credentials = {"BERTH_CREDS": CLI_CREDENTIALS[url]} if url in CLI_CREDENTIALS else {}
    result = subprocess.run(
        cli_command(args),
        env={**os.environ, "BERTH_NATS_URL": url, **credentials},
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        cwd=REPO,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"berth {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


Stack = LiveStack


# Short pod grace so evictions in tests are quick.
STACK_ENV = {"BERTH_POD_GRACE_SECONDS": "2"}


def start_stack(data_dir: Path) -> LiveStack:
    """`berth up` on a free NATS port, with :data:`STACK_ENV`; see :func:`signed_in`."""
    return signed_in(start_live_stack(data_dir, env=STACK_ENV))


def signed_in(running: LiveStack) -> LiveStack:
    """The CLI then runs with the stack's `cli` credentials, and this process's own bus
    connections (:func:`bus_auth`) and CLI commands run in-process (which read
    ``BERTH_CREDS``, as a user's shell gives it) with its `admin` ones."""
    if running.cli_credentials is not None:
        CLI_CREDENTIALS[running.url] = str(running.cli_credentials)
    admin = running.credentials("admin")
    if admin is not None:
        ADMIN_CREDENTIALS[running.url] = admin
        os.environ["BERTH_CREDS"] = str(admin)
    return running


_POOL = pytest.StashKey[StackPool]()


@pytest.fixture(scope="session")
def stack_pool(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackPool]:
    pool = StackPool(lambda: tmp_path_factory.mktemp("stack") / "berth", STACK_ENV)
    request.config.stash[_POOL] = pool
    try:
        yield pool
    finally:
        pool.close()
        del request.config.stash[_POOL]


# The fixtures that take their stack from the pool (:func:`pooled_stack`): ``stack``, and
# the module-scoped stacks some test modules share among their tests.
POOLED = frozenset({"stack", "live", "shared_stack", "secured"})


def pooled_stack(
    request: pytest.FixtureRequest, stack_pool: StackPool, *, more: bool = False
) -> Stack:
    """A fresh `berth up` from the pool for ``request``'s test or module (tests/stack_pool.py:
    if a later test asks for one too, or ``more`` (this one will), the next stack starts
    meanwhile, then waits ready, idle at ~3% of a core, for it). A module's stack is taken by
    its first test that uses it; the module's later tests that share it want no other."""
    items, node = request.session.items, request.node
    shared = set() if request.scope == "function" else {request.fixturename}
    mine = [
        index
        for index, item in enumerate(items)
        if f"{item.nodeid}::".startswith(f"{node.nodeid}::")
        and (not shared or shared <= set(getattr(item, "fixturenames", ())))
    ]
    after = items[mine[0] + 1 :] if mine else []
    wanted = more or any((POOLED - shared) & set(getattr(i, "fixturenames", ())) for i in after)
    return signed_in(stack_pool.take(another_wanted=wanted))


@pytest.fixture
def stack(request: pytest.FixtureRequest, stack_pool: StackPool) -> Iterator[Stack]:
    """A `berth up` of this test's own (:func:`pooled_stack`)."""
    running = pooled_stack(request, stack_pool)
    try:
        yield running
    finally:
        stack_pool.release(running)
        CLI_CREDENTIALS.pop(running.url, None)
        ADMIN_CREDENTIALS.pop(running.url, None)
        os.environ.pop("BERTH_CREDS", None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test without ``stack`` runs once the spare is ready: no two `berth up` start at
    once (a test of its own may start one)."""
    pool = item.config.stash.get(_POOL, None)
    if pool is not None and not POOLED & set(getattr(item, "fixturenames", ())):
        pool.settle()


@contextmanager
def captured_logs(module: ModuleType) -> Iterator[list[MutableMapping[str, Any]]]:
    """``capture_logs`` for the lines ``module.log`` writes, whatever an in-process CLI run
    configured before (the CLI keeps only errors, and caches loggers on first use, which
    ``capture_logs`` alone does not undo): every level, through a fresh logger meanwhile."""
    before = structlog.get_config()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )
    cached: Any = getattr(module, "log")  # noqa: B009 (a module's logger, by convention)
    setattr(module, "log", structlog.get_logger(**cached._initial_values))  # noqa: B010
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        setattr(module, "log", cached)  # noqa: B010
        structlog.configure(
            wrapper_class=before["wrapper_class"],
            cache_logger_on_first_use=before["cache_logger_on_first_use"],
        )


# --- a secured bus: nkey credentials and a nats-server that enforces shared/auth.py -----------


@pytest.fixture
def store(tmp_path: Path) -> CredentialStore:
    credentials = CredentialStore(tmp_path / "creds")
    credentials.ensure()
    return credentials


@pytest.fixture
def secured_url(tmp_path: Path, store: CredentialStore) -> Iterator[str]:
    with NatsServer(store_dir=tmp_path / "nats", auth_conf=store.auth_conf) as server:
        yield server.url


async def connect_open(url: str, source: str, settings: BusSettings | None = None) -> Bus:
    """A bus connection to an open bus (no credentials) as ``source`` would make it, failing
    at once if refused (``settings``: its deployment's, the default's if None)."""
    return await Bus.connect(url, source=source, auth=ClientAuth(), retry=False, settings=settings)


async def connect_as(
    url: str, store: CredentialStore, user: str, settings: BusSettings | None = None
) -> Bus:
    """A bus connection signed in as ``user`` with its own seed, failing at once if refused
    (``settings``: its deployment's, the default's if None)."""
    return await Bus.connect(
        url,
        source=user,
        auth=ClientAuth(seed=store.seed_path(user)),
        retry=False,
        settings=settings,
    )


def ack_floor(info: ConsumerInfo) -> int:
    """The stream sequence a consumer has acked up to (0 before any ack)."""
    return info.ack_floor.stream_seq if info.ack_floor else 0


async def acked_up_to(bus: Bus, durable: str, sequence: int) -> ConsumerInfo:
    """The consumer's info once its ack floor reached stream ``sequence``, or after 5 s: an
    ack is a publish nobody answers, applied by the server a moment after it was sent (on a
    loaded machine, more than a moment), so a test waits for it rather than reading early."""
    deadline = time.monotonic() + 5
    while True:
        info: ConsumerInfo = await bus.js.consumer_info(STREAM, durable)
        if ack_floor(info) >= sequence or time.monotonic() > deadline:
            return info
        await asyncio.sleep(0.02)


def frozen(pid: int, within: float = 5.0) -> None:
    """SIGSTOP ``pid`` and return once every one of its threads is stopped: the signal is
    delivered asynchronously, and a thread of a multi-threaded server (nats-server) can run
    on for a moment after ``kill`` returns (an ack it sends then breaks a test that counts
    on none coming). Raises TimeoutError if it is not stopped ``within`` seconds."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + within
    tasks = Path(f"/proc/{pid}/task")
    while True:
        states = [_state(task / "stat") for task in tasks.iterdir()]
        if states and all(state in ("T", "t") for state in states):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} not stopped after {within} s: {states}")
        time.sleep(0.001)


def _state(stat: Path) -> str:
    """A thread's state letter from its /proc stat line (after the parenthesised name)."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "T"  # a thread gone meanwhile runs no more

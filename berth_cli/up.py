"""`berth up`: the whole stack on one machine, secured, supervised, and stopped without leftovers.

It claims the data directory first (one stack per directory: berth_cli/data_dir_claim.py),
makes the bus's credentials on first start (``<data_dir>/creds``: an nkey seed per user,
0600, and the ``auth.conf`` NATS includes; kept across restarts), starts nats-server with
JetStream on loopback (or a cluster of them, ``--nats-cluster``), then the four services as
separate processes (``python -m services.<name>``, ``--replicas`` of each), each signing in
as its own user, waits until every ``/readyz`` answers 200 and prints one ready line.

Whatever dies, NATS included, is restarted on the same ports and store (with a back-off that
resets after a stable run) and reported; the services ride out a NATS restart. On Ctrl-C or
SIGTERM it stops the services first (SIGTERM, so they drain), then NATS, and kills whatever
has not exited within the grace period. Children run in their own sessions, so a Ctrl-C in
the terminal reaches only this supervisor, which stops them in that order; and each child
gets SIGTERM from the kernel if `berth up` itself dies, even by SIGKILL.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from rich.console import Console
from rich.table import Table

from berth_cli.consoles import console_for
from berth_cli.creds import PID_SUFFIX
from berth_cli.data_dir_claim import DataDirClaim
from berth_cli.exit_codes import ExitCode
from berth_cli.nats_cluster import free_port, nats_nodes, port_free, wait_for_jetstream
from berth_cli.natsserver import NatsServer, NatsServerError
from berth_cli.supervision import Restarts, die_with_parent
from shared.auth import ClientAuth, CredentialStore
from shared.bus import BusError
from shared.service import DEFAULT_PORTS, PORT_IN_USE_EXIT

__all__ = ["SERVICES", "ServiceProcess", "Stack", "run_up"]

SERVICES = tuple(DEFAULT_PORTS)  # watcher, admission, preemption, recovery
CONSOLE = "console"  # the web console (berth_console): a bus client, one replica
CONSOLE_PORT = 8480
GRACE_SECONDS = 10.0


@dataclass
class ServiceProcess:
    role: str
    replica: int
    name: str  # the row and log name: the role, or role-<replica> when there are replicas
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: Restarts = field(default_factory=Restarts)
    log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def replica_id(self) -> str:
        return f"{self.role}-{self.replica}"

    @property
    def module(self) -> str:
        return "berth_console" if self.role == CONSOLE else f"services.{self.role}"


class Stack:
    """The processes of one `berth up`. The benchmarks drive it in-process: ``start_nats()``,
    ``spawn_services()``, ``wait_ready()``, ``stop()``; ``nats_url`` and ``admin_auth`` are how
    a client of this stack connects."""

    def __init__(
        self,
        *,
        data_dir: Path,
        nats_port: int,
        console: Console,
        replicas: int = 1,
        nats_cluster: int = 1,
        with_console: bool = True,
    ) -> None:
        self.data_dir = data_dir
        self.with_console = with_console
        self.console = console
        self.replicas = replicas
        self.credentials = CredentialStore(data_dir / "creds")
        self.claim = DataDirClaim(data_dir)  # taken by claim_data_dir, released by stop
        self.nats_port = nats_port
        self.nats_count = nats_cluster
        self.nats_nodes: list[NatsServer] = []  # made by start_nats(), with the credentials
        self.nats_restarts: list[Restarts] = []
        self.services: list[ServiceProcess] = []
        self.stopping = False

    @property
    def nats(self) -> NatsServer:
        """The (first) NATS server, once :meth:`start_nats` ran."""
        return self.nats_nodes[0]

    @property
    def nats_url(self) -> str:
        """Every server's client URL, comma-separated (what BERTH_NATS_URL holds)."""
        return ",".join(node.url for node in self.nats_nodes)

    @property
    def admin_auth(self) -> ClientAuth:
        return ClientAuth(seed=self.credentials.seed_path("admin"))

    def start(self) -> float:
        """Start everything; returns the seconds it took to be ready."""
        started = time.monotonic()
        self.start_nats()
        self.spawn_services()
        self.wait_ready(timeout=30.0)
        return time.monotonic() - started

    def claim_data_dir(self) -> None:
        """Make the data dir (0700) on first use and claim it for this stack alone; raises
        ``RuntimeError`` (``DataDirInUse``: another `berth up` holds it) before anything runs."""
        _make_private_dir(self.data_dir)  # seeds, logs and the event store are the user's alone
        self.claim.take()

    def _claim_held_by_children(self) -> tuple[int, ...]:
        """The claim's descriptor, which each child holds too: the data dir stays claimed
        until the last of them has exited (berth_cli/data_dir_claim.py)."""
        descriptor = self.claim.descriptor
        return () if descriptor is None else (descriptor,)

    def start_nats(self) -> None:
        """Claim the data dir, make the credentials on first use, then start NATS."""
        self.claim_data_dir()
        (self.data_dir / "logs").mkdir(exist_ok=True)
        (self.data_dir / "logs").chmod(0o700)
        self.credentials.ensure()
        self.nats_nodes = nats_nodes(
            data_dir=self.data_dir,
            creds_dir=self.credentials.directory,
            count=self.nats_count,
            port=self.nats_port,
            preexec_fn=die_with_parent(),
        )
        for node in self.nats_nodes:
            node.pass_fds = self._claim_held_by_children()
        self.nats_restarts = [Restarts(awaited=True) for _ in self.nats_nodes]
        for node, restarts in zip(self.nats_nodes, self.nats_restarts, strict=True):
            self._start_node(node, restarts)
        if len(self.nats_nodes) > 1:
            try:
                wait_for_jetstream(
                    self.nats_url, self.admin_auth, replicas=len(self.nats_nodes), timeout=30.0
                )
            except BusError as error:
                raise NatsServerError(str(error)) from error

    def _start_node(self, node: NatsServer, restarts: Restarts) -> None:
        restarts.started(time.monotonic())
        node.start()
        assert node.process is not None
        # Written beside and renamed over: a reader (`berth creds rotate`) never sees it empty.
        path = self._pid_file(node)
        written = path.with_name(path.name + ".new")
        descriptor = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as pid_file:
            pid_file.write(f"{node.process.pid}\n")
        os.replace(written, path)

    def _pid_file(self, node: NatsServer) -> Path:
        # Beside the node's config, so `berth creds rotate` can reload it.
        return self.credentials.directory / f"{node.config_name}{PID_SUFFIX}"

    def spawn_services(self) -> None:
        """Start every service's processes (NATS must be up); returns without waiting."""
        for role in SERVICES:
            for replica in range(self.replicas):
                name = role if self.replicas == 1 else f"{role}-{replica}"
                default = DEFAULT_PORTS[role]
                port = default if replica == 0 and port_free(default) else free_port()
                log_path = self.data_dir / "logs" / f"{name}.log"
                service = ServiceProcess(role, replica, name, port, log_path)
                self.services.append(service)
                self._spawn(service)
        if self.with_console:
            port = CONSOLE_PORT if port_free(CONSOLE_PORT) else free_port()
            console = ServiceProcess(
                CONSOLE, 0, CONSOLE, port, self.data_dir / "logs" / "console.log"
            )
            self.services.append(console)
            self._spawn(console)

    def _spawn(self, service: ServiceProcess) -> None:
        env = {
            **os.environ,
            "BERTH_NATS_URL": self.nats_url,
            # Its own user, whatever BERTH_CREDS this process was given.
            "BERTH_CREDS": str(self.credentials.seed_path(service.role)),
            "BERTH_REPLICA_ID": service.replica_id,
            "BERTH_STREAM_REPLICAS": str(len(self.nats_nodes)),
            "BERTH_HTTP_HOST": "127.0.0.1",
            "BERTH_HTTP_PORT": str(service.port),
            "BERTH_DATA_DIR": str(self.data_dir),
            "BERTH_SUPERVISOR_PID": str(os.getpid()),
            "BERTH_GRACE_SECONDS": os.environ.get("BERTH_GRACE_SECONDS", str(GRACE_SECONDS - 2)),
        }
        if service.role == CONSOLE:
            env |= {"BERTH_CONSOLE_HOST": "127.0.0.1", "BERTH_CONSOLE_PORT": str(service.port)}
        if service.log_file is None:
            service.log_file = _open_private_log(service.log_path)
        service.restarts.started(time.monotonic())
        service.process = subprocess.Popen(
            [sys.executable, "-m", service.module],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=service.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # SIGTERM: it drains and stops its jobs
            pass_fds=self._claim_held_by_children(),
        )

    def wait_ready(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(self.services)
        while waiting:
            if self.stopping:
                raise KeyboardInterrupt
            for service in list(waiting):
                assert service.process is not None
                if self._moved(service):
                    continue
                if service.process.poll() is not None:
                    raise RuntimeError(
                        f"{service.name} exited with code {service.process.returncode} while"
                        f" starting; see {service.log_path}"
                    )
                if _ready(service.url):
                    waiting.remove(service)
            if time.monotonic() > deadline:
                names = ", ".join(service.name for service in waiting)
                raise RuntimeError(f"not ready after {timeout:.0f}s: {names}")
            time.sleep(0.05)

    def supervise_once(self) -> None:
        """Restart whatever died, NATS first (the services wait for it), each after its
        back-off (:mod:`berth_cli.supervision`)."""
        if self.stopping:
            return
        for index, node in enumerate(self.nats_nodes):
            restarts = self.nats_restarts[index]
            code = node.process.poll() if node.process is not None else "none"
            name = "nats" if len(self.nats_nodes) == 1 else f"nats-{index}"
            if self._restart_due(name, code, restarts, where=str(node.store_dir)):
                self._restart_node(node, restarts)
        for service in self.services:
            assert service.process is not None
            if self._moved(service):
                continue
            code = service.process.poll()
            if self._restart_due(service.name, code, service.restarts, where=str(service.log_path)):
                self._spawn(service)

    def _moved(self, service: ServiceProcess) -> bool:
        """A service that exited because its HTTP port was taken (another stack chose the
        same free port at the same instant) starts again at once on another port: that was
        no crash, so no back-off."""
        assert service.process is not None
        if service.process.poll() != PORT_IN_USE_EXIT:
            return False
        taken, service.port = service.port, free_port()
        self.console.print(
            f"[yellow]{service.name}: port {taken} was taken; now on {service.port}[/]"
        )
        self._spawn(service)
        return True

    def _restart_due(
        self, name: str, code: int | str | None, restarts: Restarts, *, where: str
    ) -> bool:
        """A process that exited is reported and its restart scheduled; True once it is due."""
        if code is None:
            return False
        now = time.monotonic()
        if restarts.due_at is None:
            delay = restarts.crashed(now)
            self.console.print(
                f"[yellow]{name} exited with code {code}; restarting in {delay:g}s ({where})[/]"
            )
        return restarts.due(now)

    def _restart_node(self, node: NatsServer, restarts: Restarts) -> None:
        try:
            self._start_node(node, restarts)
        except NatsServerError as error:
            self.console.print(f"[red]nats did not come back: {error}[/]")
            return
        assert node.process is not None
        self.console.print(f"[green]nats restarted: pid {node.process.pid}, {node.url}[/]")

    def stop(self) -> None:
        """Services first (they drain and publish their last events), then NATS."""
        self.stopping = True
        running = [s for s in self.services if s.process is not None and s.process.poll() is None]
        for service in running:
            assert service.process is not None
            service.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for service in running:
            assert service.process is not None
            try:
                service.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(service.process.pid, signal.SIGKILL)
                service.process.wait()
        for service in self.services:
            if service.log_file is not None:
                service.log_file.close()
        for node in self.nats_nodes:
            node.stop()
            self._pid_file(node).unlink(missing_ok=True)
        self.claim.release()  # last: nothing of this stack runs on the data dir any more

    def print_listening(self, console: Console) -> None:
        table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
        for column in ("COMPONENT", "PID", "LISTENS ON", "LOG"):
            table.add_column(column, no_wrap=True)
        for index, node in enumerate(self.nats_nodes):
            name = "nats" if len(self.nats_nodes) == 1 else f"nats-{index}"
            pid = node.process.pid if node.process else ""
            table.add_row(name, str(pid), node.url, str(node.store_dir))
        for service in self.services:
            pid = service.process.pid if service.process else ""
            table.add_row(service.name, str(pid), service.url, str(service.log_path))
        console.print(table)


def _make_private_dir(path: Path) -> None:
    """Make ``path`` (0700), or make it private; a shared directory (/tmp: sticky bit, or
    another user's) is refused rather than closed to everyone else."""
    path.mkdir(parents=True, exist_ok=True)
    status = path.stat()
    if status.st_mode & stat.S_ISVTX or status.st_uid != os.getuid():
        raise RuntimeError(f"{path} is a shared directory; give --data-dir a directory of your own")
    path.chmod(0o700)


def _open_private_log(path: Path) -> IO[bytes]:
    """Append to a log only its owner may read (an existing one is made so too)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(descriptor, 0o600)
    return os.fdopen(descriptor, "ab")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=0.5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def run_up(*, data_dir: Path, nats_port: int, replicas: int = 1, nats_cluster: int = 1) -> int:
    console = console_for()
    stack = Stack(
        data_dir=data_dir,
        nats_port=nats_port,
        console=console,
        replicas=replicas,
        nats_cluster=nats_cluster,
    )
    try:
        stack.claim_data_dir()  # first: a second stack on it is named as such, whatever its port
    except RuntimeError as error:
        console.print(f"[red]error: {error}[/]")
        return ExitCode.ERROR
    ports = [nats_port + index for index in range(nats_cluster)] if nats_port else []
    busy = [port for port in ports if not port_free(port)]
    if busy:
        console.print(f"[red]error: port {busy[0]} is in use; choose another with --nats-port[/]")
        stack.claim.release()
        return ExitCode.ERROR

    def request_stop(signum: int, _: FrameType | None) -> None:
        stack.stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        seconds = stack.start()
    except (RuntimeError, NatsServerError, KeyboardInterrupt) as error:
        if not isinstance(error, KeyboardInterrupt):
            console.print(f"[red]error: {error}[/]")
        stack.stop()
        return ExitCode.ERROR
    stack.print_listening(console)
    # Whole lines, never wrapped or styled: they are pasted into shells and parsed by tools.
    for name, value in (
        ("BERTH_NATS_URL", stack.nats_url),
        ("BERTH_CREDS", stack.credentials.seed_path("cli")),
    ):
        console.print(f"export {name}={value}", markup=False, soft_wrap=True)
    console.print(f"Berth is ready in {seconds:.2f}s. Press Ctrl-C to stop.")
    sys.stdout.flush()
    while not stack.stopping:
        stack.supervise_once()
        time.sleep(0.2)
    console.print("stopping...")
    stack.stop()
    console.print("stopped.")
    return ExitCode.OK

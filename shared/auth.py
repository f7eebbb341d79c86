"""Who may do what on the bus: NATS users, their subject permissions, and their credentials.

Every connection authenticates with an nkey (an Ed25519 key pair). Why nkeys rather than
passwords: the server's configuration holds only public keys, so reading it yields nothing
to log in with, and the client proves itself by signing the server's nonce, so no secret
crosses the wire, with or without TLS.

Users and what each may publish (subscribe permissions follow the same lines):

- one per service, each publishing only the subjects it owns: the watcher facts
  (``berth.wl.>``) and, for a Workload's ``spec.active`` set in the cluster (kueuectl's
  ``stop|resume workload``), the CLI's ``SetWorkloadActive`` (``berth.cmd.active.>``),
  admission and preemption decisions (``berth.cq.*.admitted|pending|evict``),
  recovery's commands and managed-job records (``berth.cmd.create|delete.>``,
  ``berth.job.>``);
- ``cli``: config (the ``berth-config`` bucket), workload commands for the watcher
  (``berth.cmd.submit|remove.>``: the active backend carries them out), a workload's
  ``spec.active`` for admission (``berth.cmd.active.>``) and the services' request APIs,
  never a fact or a decision (it reads them: ``berth events``);
- ``console``: the services' request APIs (the web console's queries, and a cancel behind
  the operator's token) and, behind the same token, the ClusterQueue and LocalQueue keys of
  the config (a queue's stop or resume); it reads the event stream and the config, jobs and
  status buckets;
- ``checker``: an admission check's answers (``berth.check.>``) and admission's read API;
  it follows the event stream for the reservations it answers;
- ``reader``: nothing at all; it may follow the event stream (external tools);
- ``admin``: everything (operators' own tools, the tests' audits).

A service publishes its events in batches too (``berth.b.<family>``): each user may publish
the batch subjects of the families it may publish whole (:func:`batch_subjects`), and a
consumer refuses an event inside a batch that is not of the batch's family.

Each user replies on its own inbox prefix (``_INBOX_<user>``) and may subscribe only there
and to its own request subjects, so no user reads another's replies. JetStream's API is
allowed per stream: a user may create consumers on, and read, only the streams it reads.

On disk a user's credential is its nkey seed in ``<dir>/<user>.nk`` (0600, the directory
0700), beside ``auth.conf``: the NATS configuration fragment with every user's public key and
permissions, which the server includes. :class:`CredentialStore` makes and rotates them.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

from shared.subjects import batched_filters

__all__ = [
    "SERVICE_USERS",
    "USERS",
    "ClientAuth",
    "CredentialStore",
    "Permissions",
    "authorization_config",
    "batch_subjects",
    "owned_subjects",
    "permissions_for",
]

SERVICE_USERS = ("watcher", "admission", "preemption", "recovery")
USERS = (*SERVICE_USERS, "cli", "console", "checker", "reader", "admin")
SEED_SUFFIX = ".nk"
AUTH_CONF = "auth.conf"

EVENT_STREAM = "BERTH"
DEAD_LETTER_STREAM = "BERTH_DLQ"

# The subjects each user owns: what it may publish besides JetStream's API.
_OWNED: dict[str, tuple[str, ...]] = {
    "watcher": (
        "berth.wl.>",
        "$KV.berth-status.>",
        "$KV.berth-objects.>",  # the local backend's private store of workload objects
        "$KV.berth-config.>",  # the kubernetes backend mirrors the cluster's Kueue objects
        # A Workload's spec.active set in the cluster (kueuectl stop|resume workload): the
        # kubernetes backend publishes the SetWorkloadActive the CLI would (kube/active.py).
        "berth.cmd.active.>",
        # The Kubernetes status writer asks admission's read API for what it writes to the
        # cluster (kube/kueue_status.py): Workloads, queues' and Cohorts' status; nothing else.
        "berth.api.admission.workloads",
        "berth.api.admission.clusterqueues",
        "berth.api.admission.localqueues",
        "berth.api.admission.cohorts",
    ),
    "admission": (
        "berth.cq.*.admitted.>",
        "berth.cq.*.pending.>",
        "berth.cq.*.evict.>",  # a HoldAndDrain queue's evictions
        "berth.cq.*.reserved.>",  # quota reserved, waiting for admission checks
    ),
    "preemption": ("berth.cq.*.evict.>", "berth.cq.*.pending.>"),
    "recovery": ("berth.cmd.create.>", "berth.cmd.delete.>", "berth.job.>", "$KV.berth-jobs.>"),
    "cli": (
        "$KV.berth-config.>",
        "$KV.berth-secrets.>",  # managed jobs' secrets (shared/secrets.py)
        "berth.cmd.submit.>",
        "berth.cmd.remove.>",
        "berth.check.>",  # berth admissioncheck set (an operator answers a check)
        "berth.cmd.active.>",  # berth stop|resume workload (Kueue's spec.active)
        "berth.api.>",
    ),
    # The web console: admission's status queries and the watcher's logs; behind the
    # operator's token (berth_console checks it), a managed job's cancel and a queue's stop
    # or resume, which is a write of the queue's object: of the config, only ClusterQueue and
    # LocalQueue keys (shared/config.py object_key). It never writes a decision, a fact, a
    # record or any other config, and never launches a managed job (a launch runs a command).
    "console": (
        "berth.api.admission.>",
        "berth.api.watcher.logs",
        "berth.api.recovery.cancel",
        "$KV.berth-config.clusterqueue.>",
        "$KV.berth-config.localqueue.>",
    ),
    # An admission check's controller: its answers (docs/admission-checks.md), and
    # admission's read API to find the reservation it answers.
    "checker": ("berth.check.>", "berth.api.admission.>"),
    "reader": (),
}

# The key-value buckets each user reads (a bucket is the stream KV_<bucket>).
_BUCKETS_READ: dict[str, tuple[str, ...]] = {
    "watcher": ("berth-objects", "berth-status", "berth-config", "berth-secrets"),
    "admission": ("berth-config",),
    "preemption": ("berth-config",),
    "recovery": ("berth-jobs", "berth-config"),
    "cli": ("berth-config", "berth-jobs", "berth-status"),
    "console": ("berth-config", "berth-jobs", "berth-status"),
    "checker": (),
    "reader": (),
}
# Every service keeps its lease and its membership record; anyone but the reader sees them.
_SHARED_BUCKETS = ("berth-leases", "berth-members")

# The durable consumers a service owns on the event stream.
_DURABLES: dict[str, tuple[str, ...]] = {"watcher": ("watcher",), "recovery": ("recovery",)}


@dataclass(frozen=True)
class Permissions:
    """A NATS user's permissions: subjects it may publish to and subscribe on."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool = False  # may answer the requests it receives (its API)

    def as_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "publish": {"allow": list(self.publish)},
            "subscribe": {"allow": list(self.subscribe)},
        }
        if self.allow_responses:
            config["allow_responses"] = True
        return config


def owned_subjects(user: str) -> tuple[str, ...]:
    """The subjects ``user`` owns (publishes besides the API, dead letters and leases)."""
    return _OWNED.get(user, (">",) if user == "admin" else ())


def inbox_prefix(user: str) -> str:
    """The inbox prefix a user's replies arrive on (only it may subscribe there)."""
    return f"_INBOX_{user}"


def permissions_for(user: str) -> Permissions:
    """What ``user`` may publish and subscribe to; the single source of the bus's rules.

    A user publishes its owned subjects (:data:`_OWNED`), its dead letters
    (``berth.dlq.<user>.>``), its lease, leader marker and membership record if it is a
    service, and the JetStream API calls it needs on the streams it reads; it subscribes
    only on its own inbox and, for a service, its own request subjects.
    """
    if user == "admin":
        return Permissions(publish=(">",), subscribe=(">",), allow_responses=True)
    if user not in _OWNED:
        raise ValueError(f"unknown bus user {user!r}; known: {', '.join(USERS)}")
    streams = [f"KV_{bucket}" for bucket in _BUCKETS_READ[user]]
    streams += [f"KV_{s.split('.')[1]}" for s in _OWNED[user] if s.startswith("$KV.")]
    if user != "reader":
        streams += [f"KV_{bucket}" for bucket in _SHARED_BUCKETS]
    streams.append(EVENT_STREAM)  # everyone reads the events (the CLI: `berth events`)
    if user in ("cli", "reader"):
        streams.append(DEAD_LETTER_STREAM)
    publish = [*_OWNED[user], *batch_subjects(_OWNED[user]), *_jetstream_api(user, streams)]
    subscribe = [f"{inbox_prefix(user)}.>"]
    if user in SERVICE_USERS:
        publish += [
            f"berth.dlq.{user}.>",
            f"berth.lease.{user}",
            f"$KV.berth-leases.{user}",
            f"$KV.berth-members.{user}.>",
        ]
        subscribe.append(f"berth.api.{user}.>")
    if user == "reader":
        subscribe.append("_INBOX.>")  # tools that keep their client's default inbox
    return Permissions(
        publish=tuple(publish),
        subscribe=tuple(subscribe),
        allow_responses=user in SERVICE_USERS,
    )


def batch_subjects(owned: tuple[str, ...]) -> list[str]:
    """The batch subjects (``berth.b.<family>``, docs/events.md "Batches") a user may
    publish: those of the batched families it may publish whole. A user owning only part of
    a family gets none: a batch's events are checked against the family, not the user."""
    _, twins = batched_filters(owned)
    return [twin for twin, whole in twins.items() if whole]


def _jetstream_api(user: str, streams: list[str]) -> list[str]:
    """JetStream API subjects for reading ``streams`` (consumers, gets, acks), creating the
    streams a service writes, and managing the service's own durable consumers."""
    api = ["$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.FC.>"]
    for stream in streams:
        api += [
            f"$JS.API.STREAM.INFO.{stream}",
            f"$JS.API.CONSUMER.CREATE.{stream}",
            f"$JS.API.CONSUMER.CREATE.{stream}.>",
            f"$JS.API.CONSUMER.INFO.{stream}.*",
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*",
            f"$JS.API.CONSUMER.DELETE.{stream}.*",
            f"$JS.API.DIRECT.GET.{stream}",
            f"$JS.API.DIRECT.GET.{stream}.>",
            f"$JS.API.STREAM.MSG.GET.{stream}",
        ]
    # A bucket is made by whoever opens it first, so every user but the read-only ones may
    # create the buckets it uses; only services create (and update) the event streams.
    read_only = user in ("reader", "console", "checker")
    created = [stream for stream in streams if stream.startswith("KV_")] if not read_only else []
    if user in SERVICE_USERS:
        created += [EVENT_STREAM, DEAD_LETTER_STREAM]
    for stream in created:
        api += [f"$JS.API.STREAM.CREATE.{stream}", f"$JS.API.STREAM.UPDATE.{stream}"]
    for durable in _DURABLES.get(user, ()):
        api += [
            f"$JS.API.CONSUMER.DURABLE.CREATE.{EVENT_STREAM}.{durable}",
            f"$JS.API.CONSUMER.DELETE.{EVENT_STREAM}.{durable}",
            f"$JS.ACK.{EVENT_STREAM}.{durable}.>",
        ]
    return sorted(set(api), key=api.index)


def authorization_config(public_keys: Mapping[str, str]) -> str:
    """The NATS configuration fragment naming every user's public key and permissions.

    NATS reads JSON as configuration, so the fragment is JSON under ``authorization``.
    """
    users = [
        {"nkey": public_keys[user], "permissions": permissions_for(user).as_config()}
        for user in USERS
        if user in public_keys
    ]
    body = json.dumps({"users": users}, indent=2)
    return f"# Generated by Berth (shared/auth.py): public keys only.\nauthorization: {body}\n"


def _new_seed() -> bytes:
    return bytes(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))


def _public_key(seed: bytes) -> str:
    pair = nkeys.from_seed(bytearray(seed))
    try:
        return str(pair.public_key.decode())
    finally:
        pair.wipe()


@dataclass
class CredentialStore:
    """A directory of nkey seeds (``<user>.nk``, 0600) and the matching ``auth.conf``."""

    directory: Path

    def seed_path(self, user: str) -> Path:
        return self.directory / f"{user}{SEED_SUFFIX}"

    @property
    def auth_conf(self) -> Path:
        return self.directory / AUTH_CONF

    def ensure(self) -> dict[str, str]:
        """Make any missing seed (existing ones are kept), then rewrite ``auth.conf``;
        returns every user's public key."""
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        for user in USERS:
            if not self.seed_path(user).exists():
                _write_private(self.seed_path(user), _new_seed())
        return self._write_conf()

    def rotate(self, user: str) -> dict[str, str]:
        """A new seed for ``user`` (the old one stops working once NATS reloads)."""
        permissions_for(user)  # refuses an unknown user
        _write_private(self.seed_path(user), _new_seed())
        return self._write_conf()

    def _write_conf(self) -> dict[str, str]:
        keys = {user: _public_key(self.seed_path(user).read_bytes().strip()) for user in USERS}
        _write_private(self.auth_conf, authorization_config(keys).encode())
        return keys


def _write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read, without a moment of wider access."""
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


@dataclass(frozen=True)
class ClientAuth:
    """How one client connects: its nkey seed (and so its user) and TLS material."""

    seed: Path | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    @property
    def user(self) -> str | None:
        """The user a seed file belongs to, by its name (``<user>.nk``)."""
        if self.seed is None or self.seed.suffix != SEED_SUFFIX:
            return None
        return self.seed.stem if self.seed.stem in USERS else None

    @classmethod
    def from_env(cls, user: str | None = None) -> ClientAuth:
        """Credentials from the environment: ``BERTH_CREDS`` (a seed file), else the
        ``<user>.nk`` seed under ``$BERTH_DATA_DIR/creds`` or ``~/.berth/creds``; TLS from
        ``BERTH_NATS_CA``, ``BERTH_NATS_CERT`` and ``BERTH_NATS_KEY``. Only entry points call
        this (a service's main, the CLI's connection helper, the console's settings, bench
        scripts, test fixtures): ``Connection.connect`` is handed credentials, never reads them."""
        seed: Path | None = None
        if os.environ.get("BERTH_CREDS"):
            seed = Path(os.environ["BERTH_CREDS"]).expanduser()
        elif user is not None:
            for data_dir in (os.environ.get("BERTH_DATA_DIR"), "~/.berth"):
                if data_dir:
                    candidate = Path(data_dir).expanduser() / "creds" / f"{user}{SEED_SUFFIX}"
                    if candidate.exists():
                        seed = candidate
                        break
        return cls(
            seed=seed,
            ca=_env_path("BERTH_NATS_CA"),
            cert=_env_path("BERTH_NATS_CERT"),
            key=_env_path("BERTH_NATS_KEY"),
        )

    def public_key(self) -> str | None:
        """The public key of the seed as the file holds it now (None without a seed): a
        connection compares it with the one it signed in with to notice a rotation."""
        if self.seed is None:
            return None
        return _public_key(self.seed.read_bytes().strip())

    def connect_options(self, url: str) -> dict[str, Any]:
        """Keyword arguments for nats-py's ``connect``."""
        options: dict[str, Any] = {}
        if self.seed is not None:
            if not self.seed.is_file():
                raise FileNotFoundError(f"credentials file {self.seed} does not exist")
            options["nkeys_seed_str"] = self.seed.read_text().strip()
        if self.user is not None:
            options["inbox_prefix"] = inbox_prefix(self.user)
        if self.ca is not None or url.startswith("tls://"):
            context = ssl.create_default_context(
                cafile=str(self.ca) if self.ca is not None else None
            )
            if self.cert is not None:
                context.load_cert_chain(
                    str(self.cert), str(self.key) if self.key is not None else None
                )
            options["tls"] = context
        return options


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None

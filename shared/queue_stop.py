"""Stopping and resuming a ClusterQueue or LocalQueue, as kueuectl does: one rule for the CLI
(``berth stop|resume``) and the web console's buttons.

Admission honours ``spec.stopPolicy`` (docs/kueue-fields.md), so stopping is a patch of the
stored queue in the config bucket. Kueue's policies:

- ``HoldAndDrain`` (``stop``): nothing new is admitted and what the queue admitted is evicted
  (reason ``ClusterQueueStopped`` or ``LocalQueueStopped``); its workloads wait, pending;
- ``Hold`` (``stop --keep-already-running``): nothing new is admitted, what runs finishes;
- ``None`` (``resume``): the queue admits again.

The write is conditional on the revision read, so a concurrent ``berth apply`` (or another
stop) is never lost: on a conflict the object is read and patched again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec
from nats.js.kv import KeyValue

from shared.bus import KeyExists, KeyNotFound
from shared.config import ClusterQueue, LocalQueue, config_key, decode_object, encode_object

__all__ = [
    "QUEUE_KINDS",
    "QueueBusy",
    "QueueNotFound",
    "StopOutcome",
    "StopPolicy",
    "describe_queue",
    "queue_key",
    "set_stop_policy",
    "stop_policy_for",
]

StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
QUEUE_KINDS = ("ClusterQueue", "LocalQueue")
ATTEMPTS = 5  # conditional writes tried before giving up on a queue that keeps changing


class QueueNotFound(LookupError):
    """The named queue is not in the config bucket; the message names it."""


class QueueBusy(RuntimeError):
    """The queue changed under every attempt to patch it."""


@dataclass(frozen=True)
class StopOutcome:
    """What a stop or resume did: the policy now stored, and whether it changed."""

    kind: str
    name: str
    namespace: str
    policy: StopPolicy
    changed: bool

    @property
    def verb(self) -> str:
        """``stopped``, ``resumed`` or ``unchanged``: what a person is told."""
        if not self.changed:
            return "unchanged"
        return "resumed" if self.policy == "None" else "stopped"


def stop_policy_for(*, stop: bool, keep_already_running: bool = False) -> StopPolicy:
    """The stopPolicy kueuectl writes: ``stop`` drains (HoldAndDrain) unless
    ``keep_already_running`` (Hold); ``resume`` clears it (None, and the flag means nothing)."""
    if not stop:
        return "None"
    return "Hold" if keep_already_running else "HoldAndDrain"


def queue_key(kind: str, name: str, namespace: str) -> str:
    """The config bucket's key of a queue (shared/config.py ``config_key``): a ClusterQueue
    is cluster-scoped (``_``), a LocalQueue lives in ``namespace``."""
    if kind not in QUEUE_KINDS:
        raise ValueError(f"{kind!r} cannot be stopped: only {' or '.join(QUEUE_KINDS)}")
    return config_key(kind, name, namespace if kind == "LocalQueue" else None)


def describe_queue(kind: str, name: str, namespace: str) -> str:
    """``ClusterQueue cq`` or ``LocalQueue lq in namespace team-a``, for messages."""
    return f"{kind} {name}" + (f" in namespace {namespace}" if kind == "LocalQueue" else "")


async def set_stop_policy(
    kv: KeyValue, kind: str, name: str, namespace: str, policy: StopPolicy
) -> StopOutcome:
    """Store ``policy`` as the queue's ``spec.stopPolicy``, conditionally on the revision
    read; raises :class:`QueueNotFound` for a queue that is not there and
    :class:`QueueBusy` if it changed under every attempt."""
    key = queue_key(kind, name, namespace)
    where = describe_queue(kind, name, namespace)
    for _ in range(ATTEMPTS):
        try:
            entry = await kv.get(key)
        except KeyNotFound:
            raise QueueNotFound(f"{where} not found") from None
        if entry.value is None:
            raise QueueNotFound(f"{where} not found")
        obj = decode_object(entry.value)
        if not isinstance(obj, ClusterQueue | LocalQueue):
            raise QueueNotFound(f"{where} not found (the key holds a {type(obj).__name__})")
        if obj.spec.stop_policy == policy:
            return StopOutcome(kind, name, namespace, policy, changed=False)
        spec = msgspec.structs.replace(obj.spec, stop_policy=policy)
        value = encode_object(msgspec.structs.replace(obj, spec=spec))
        try:
            await kv.update(key, value, last=entry.revision)
        except KeyExists:
            continue  # a concurrent write: read again and decide again
        return StopOutcome(kind, name, namespace, policy, changed=True)
    raise QueueBusy(f"{where} kept changing; try again")

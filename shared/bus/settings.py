"""The bus's names and settings: the event stream, the buckets, and what a deployment sets."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from shared.fencing import LEASE_SUBJECTS

__all__ = [
    "API_SUBJECT",
    "CONFIG_BUCKET",
    "DEFAULT_NATS_URL",
    "JOBS_BUCKET",
    "JS_API_PREFIX",
    "OBJECTS_BUCKET",
    "STATUS_BUCKET",
    "STREAM",
    "STREAM_SUBJECTS",
    "BusSettings",
    "nats_url_from_env",
]

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
STREAM = "BERTH"
CONFIG_BUCKET = "berth-config"  # Kueue objects applied with `berth apply`
OBJECTS_BUCKET = "berth-objects"  # the local backend's "API server": submitted Jobs and Pods
JOBS_BUCKET = "berth-jobs"  # managed jobs, owned by recovery
STATUS_BUCKET = "berth-status"  # the local backend's status of each object, owned by the watcher
# Events are stored; `berth.api.>` is core request/reply (status queries) and is not.
STREAM_SUBJECTS = (
    "berth.wl.>",
    "berth.cq.>",
    "berth.job.>",
    "berth.cmd.>",
    "berth.check.>",  # admission checks' answers (docs/admission-checks.md)
    "berth.b.>",  # batches of the services' events (shared/bus/batches.py)
    LEASE_SUBJECTS,
)
API_SUBJECT = "berth.api"
JS_API_PREFIX = "$JS.API"  # nats-py's default; Bus never changes it


@dataclass(frozen=True)
class BusSettings:
    """What a deployment decides about the bus; the entry points read it from the
    environment (:meth:`from_env`) and hand it to :meth:`Bus.connect`, so nothing deeper
    reads the environment.

    ``stream_replicas``: copies of the event stream and of every bucket it creates (3 in a
    clustered NATS, so the history survives losing a server). ``batching``: the services
    publish their events in batches and read batches (shared/bus/batches.py), and plain puts
    to a bucket go as JetStream fast batches where the server is 2.14 or later
    (``Bus.send_key_batch``, which turns on the bucket's stream's ``allow_batched``); off, they
    are plain puts and no stream is changed."""

    stream_replicas: int = 1
    batching: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BusSettings:
        """From ``BERTH_STREAM_REPLICAS`` and ``BERTH_BUS_BATCHES`` (``1``/``0``); a value
        that is not a positive count, or not 0 or 1, is refused."""
        env = os.environ if environ is None else environ
        raw = env.get("BERTH_STREAM_REPLICAS", "1")
        try:
            replicas = int(raw)
        except ValueError:
            replicas = 0
        if replicas < 1:
            raise ValueError(f"BERTH_STREAM_REPLICAS must be a positive count, not {raw!r}")
        batches = env.get("BERTH_BUS_BATCHES", "1" if cls.batching else "0")
        if batches not in ("0", "1"):
            raise ValueError(f"BERTH_BUS_BATCHES must be 0 or 1, not {batches!r}")
        return cls(stream_replicas=replicas, batching=batches == "1")


def nats_url_from_env() -> str:
    return os.environ.get("BERTH_NATS_URL", DEFAULT_NATS_URL)

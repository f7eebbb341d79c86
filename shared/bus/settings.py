"""The bus's names and settings: the event stream, the buckets, and what a deployment sets."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

from shared.fencing import LEASE_SUBJECTS
from shared.subjects import BATCHED_FAMILIES, FAMILY_PATTERNS, overlap, subject_matcher

__all__ = [
    "ALL_COPIES",
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
    "copy_patterns",
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
# BERTH_BUS_COPIES's default: every batched event has its per-workload copy.
ALL_COPIES = ("berth.>",)
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
    are plain puts and no stream is changed. ``copies``: the per-workload subjects on which
    a batched event is also stored as its copy (docs/events.md, "The per-workload view"):
    every one by default, none with ``()``."""

    stream_replicas: int = 1
    batching: bool = True
    copies: tuple[str, ...] = ALL_COPIES

    @cached_property
    def copied(self) -> Callable[[str], bool] | bool:
        """Which batched events get their per-workload copy: ``True`` every one, ``False``
        none, else a predicate on the event's subject (built once per settings)."""
        if self.copies == ALL_COPIES:
            return True
        return subject_matcher(self.copies) if self.copies else False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BusSettings:
        """From ``BERTH_STREAM_REPLICAS``, ``BERTH_BUS_BATCHES`` (``1``/``0``) and
        ``BERTH_BUS_COPIES`` (:func:`copy_patterns`); a value that is not a positive count,
        not 0 or 1, or not a list of patterns on batched families is refused."""
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
        copies = copy_patterns(env.get("BERTH_BUS_COPIES", "all"))
        return cls(stream_replicas=replicas, batching=batches == "1", copies=copies)


def copy_patterns(raw: str) -> tuple[str, ...]:
    """``BERTH_BUS_COPIES`` as subject patterns: ``all`` (every batched event's copy),
    ``none``, or a comma-separated list of per-workload subject patterns (``berth.job.>``,
    ``berth.wl.*.team-a.*``). A pattern must be a NATS subject pattern that matches some
    batched family's subjects: one on commands, checks or markers would select nothing
    (those are always stored one message each), so it is refused, as is a malformed one."""
    value = raw.strip()
    if value == "all":
        return ALL_COPIES
    if value == "none":
        return ()
    patterns = tuple(part.strip() for part in value.split(",") if part.strip())
    if not patterns:
        raise ValueError(f"BERTH_BUS_COPIES must be all, none or subject patterns, not {raw!r}")
    batched = [FAMILY_PATTERNS[family] for family in sorted(BATCHED_FAMILIES)]
    for pattern in patterns:
        if not _is_subject_pattern(pattern):
            raise ValueError(f"BERTH_BUS_COPIES: {pattern!r} is not a NATS subject pattern")
        if all(overlap(pattern, family) is None for family in batched):
            raise ValueError(
                f"BERTH_BUS_COPIES: {pattern!r} matches no batched event's subject (those"
                f" are {', '.join(batched)}); commands, admission checks' answers and lease"
                " markers are always stored one message each"
            )
    return patterns


def nats_url_from_env() -> str:
    return os.environ.get("BERTH_NATS_URL", DEFAULT_NATS_URL)


def _is_subject_pattern(pattern: str) -> bool:
    """Whether ``pattern`` is a NATS subject pattern: tokens between dots, none empty or
    with white space, ``*`` and ``>`` only as whole tokens, ``>`` only as the last one."""
    tokens = pattern.split(".")
    if any(not token or any(c.isspace() for c in token) for token in tokens):
        return False
    if ">" in tokens[:-1]:
        return False
    return all(token in ("*", ">") or not ({"*", ">"} & set(token)) for token in tokens)

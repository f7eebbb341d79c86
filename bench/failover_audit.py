"""bench/failover.py's audit of the event log as the services saw it (the fence applied): lost
workloads, admissions made twice, quota over-committed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench.eventlog import quota_violations
from bench.failover_scenario import REPO, limits
from berth_cli.launcher import LiveStack
from shared.events import (
    AnyEvent,
    EvictionRequested,
    LeaderElected,
    WorkloadAdmitted,
    WorkloadFinished,
    WorkloadSubmitted,
)
from shared.fencing import fenced_log


@dataclass
class Audit:
    created: int
    finished: int
    still_known: list[str]  # not finished, but pending or admitted for admission at the end
    lost: list[str]  # created, neither finished nor known to admission: their names
    admitted_twice: list[str]  # "name generation N" for each repeated standing admission
    over_committed: list[str]  # "owner used/limit at event i"
    preemptions: int  # evictions of the stream's workloads, by preemption
    void: int  # events the fence voided (a deposed leader's late ones)
    events: int

    @property
    def ok(self) -> bool:
        return not (self.lost or self.admitted_twice or self.over_committed)


def known_to_admission(stack: LiveStack) -> set[str]:
    """Uids admission lists at the end (pending or admitted), through the real CLI."""
    env = {**os.environ, "BERTH_NATS_URL": stack.url}
    if stack.cli_credentials is not None:
        env["BERTH_CREDS"] = str(stack.cli_credentials)
    result = subprocess.run(
        [sys.executable, "-m", "berth_cli", "get", "workloads", "-A", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO,
    )
    items = json.loads(result.stdout)["items"]
    known: set[str] = set()
    for item in items:
        conditions = {c["type"]: c["status"] for c in item["status"].get("conditions", [])}
        if conditions.get("Finished") != "True":
            # A Kueue Workload's own uid differs from its Job's: match by the Job's name.
            known.add(f"{item['metadata'].get('namespace', '')}/{item['metadata']['name']}")
    return known


async def audit_at_end(
    read: Callable[[], Awaitable[list[AnyEvent]]],
    created: dict[str, str],
    known: Callable[[], set[str]],
    finished_log: list[AnyEvent] | None = None,
) -> tuple[list[AnyEvent], Audit]:
    """The run's last audit, and the log it read. If some created Job has not finished,
    admission's list (``known``) is read *before* the log it is checked against: a workload
    that finishes between the two reads is then in the log as finished. Read the other way
    round, while a backlog still drains, it was in neither (not finished in the log, no
    longer listed) and counted lost. ``finished_log``: a log the caller read in which every
    created Job had finished (:func:`finished_all`), audited as it is rather than read again."""
    events = finished_log if finished_log is not None else await read()
    if not finished_all(events, created):
        listed = known()
        events = await read()
    else:
        listed = set()
    return events, audit(events, created, listed)


def finished_all(events: list[AnyEvent], created: dict[str, str]) -> bool:
    """Whether every created Job finished in the log as the services saw it (the fence
    applied, as :func:`audit` reads it: a deposed leader's void finish is no finish)."""
    done = {e.workload.uid for e in fenced_log(events) if isinstance(e, WorkloadFinished)}
    return set(created) <= done


def audit(events: list[AnyEvent], created: dict[str, str], known: set[str]) -> Audit:
    """The run's event log as the services saw it (the fence applied), audited.

    ``created``: uid -> name of every Job the generator created; ``known``: the
    ``namespace/name`` of the workloads admission listed, read before ``events`` (a created
    Job that never finished is then either queued or admitted, or lost).
    """
    standing = fenced_log(events)
    cq_limit, cohort_of, cohort_limit = limits()
    violations, _ = quota_violations(
        standing, cq_limit=cq_limit, cohort_of=cohort_of, cohort_limit=cohort_limit
    )
    names: dict[str, str] = {}
    finished: set[str] = set()
    admissions: Counter[tuple[str, int]] = Counter()
    preemptions = 0
    for event in standing:
        uid = event.workload.uid
        if isinstance(event, WorkloadSubmitted):
            names[uid] = f"{event.workload.namespace}/{event.workload.name}"
        elif isinstance(event, WorkloadFinished):
            finished.add(uid)
        elif isinstance(event, WorkloadAdmitted):
            admissions[(uid, event.generation)] += 1
        elif isinstance(event, EvictionRequested) and event.source == "preemption":
            preemptions += 1
    twice = [
        f"{names.get(uid, uid)} generation {generation} ({count} admissions)"
        for (uid, generation), count in admissions.items()
        if count > 1
    ]
    # An admission while the workload still held quota from an earlier one: the replay
    # reports it with used -1 (bench/eventlog.py).
    twice += [
        f"{v.owner}: re-admitted while holding, event {v.event_index}"
        for v in violations
        if v.used < 0
    ]
    over = [
        f"{v.owner} {v.used}/{v.limit}m at event {v.event_index}" for v in violations if v.used >= 0
    ]
    unfinished = {uid: name for uid, name in created.items() if uid not in finished}
    lost: list[str] = []
    still_known: list[str] = []
    if unfinished:
        for uid, name in unfinished.items():
            if names.get(uid) in known:
                still_known.append(names[uid])
            else:
                lost.append(names.get(uid, f"{name} (never reported submitted)"))
    return Audit(
        created=len(created),
        finished=len(created) - len(unfinished),
        still_known=sorted(still_known),
        lost=sorted(lost),
        admitted_twice=twice,
        over_committed=over,
        preemptions=preemptions,
        void=len(events) - len(standing) - sum(isinstance(e, LeaderElected) for e in events),
        events=len(events),
    )

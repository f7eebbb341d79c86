"""Failover under load: kill -9 the active replica of each role in turn, then a NATS node.

    .venv/bin/python bench/failover.py [--rate 4] [--settle 3] [--roles watcher,admission,...]

Starts ``berth up --replicas 2 --nats-cluster 3`` (berth_cli/launcher.py), writes two
ClusterQueues in one cohort (each may borrow the other's quota and reclaim it by preemption,
and preempts lower priorities within itself), two WorkloadPriorityClasses and a small probe
ClusterQueue outside the cohort, then creates a steady stream of Jobs annotated with a
simulated run time (``berth.dev/simulated-runtime``: the watcher starts one at admission and
finishes it after that time). While it flows, the ACTIVE replica of watcher, admission,
preemption and recovery (read from the ``berth-members`` bucket, what ``berth status -o
json`` shows) is killed with SIGKILL in turn, the stream allowed to settle after each, then
the node leading the event stream's Raft group. ``berth up`` restarts whatever was killed,
as a supervisor would.

Per kill it reports, from the event log's own timestamps (one machine, one clock):
- the next admission of the stream after the kill (any workload);
- a probe Job created right after the kill in the probe ClusterQueue (free quota): when it
  was admitted, which needs the watcher to report it and admission to decide;
- when a replica reported itself active with a higher term (its member record's ``since``),
  and which one: the warm standby, or the killed replica restarted by ``berth up``; for
  the NATS node, when the stream had a new Raft leader (as seen by polling).

Then the stream stops, every workload is let finish, and the event log is audited as the
services saw it (the fence applied, shared/fencing.py), with bench/eventlog.py's replay:
lost (a created Job that neither finished nor is still known to admission), admitted twice
(two standing admissions of one generation, or an admission while still holding quota),
quota over-committed (a ClusterQueue or the cohort above its limit at any instant).
:func:`run_failover` is also what tests/test_e2e_chaos.py runs, smaller.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from bench.eventlog import read_events
from bench.failover_audit import Audit, audit, audit_at_end, finished_all, known_to_admission
from bench.failover_kills import Kill, admitted_since, bus_auth, kill_nats, kill_role, poll
from bench.failover_scenario import (
    DEFAULT_SCENARIO,
    NOMINAL_CPU,
    PROBE,
    RAFT_ELECTION_S,
    ROLES,
    Generator,
    Scenario,
    config_documents,
    job,
)
from berth_cli.launcher import LiveStack, start_stack
from shared.bus import CONFIG_BUCKET, Bus
from shared.config import encode_object, object_key, parse_object
from shared.events import (
    AnyEvent,
    WorkloadAdmitted,
)
from shared.fencing import fenced_log

__all__ = [
    "ROLES",
    "Audit",
    "Kill",
    "Scenario",
    "audit",
    "config_documents",
    "main",
    "render",
    "run_failover",
]


@dataclass
class Result:
    kills: list[Kill]
    audit: Audit
    ready_s: float
    run_s: float
    after_admitted_s: float | None  # a Job created after everything: admitted in
    events: list[AnyEvent] = field(repr=False, default_factory=list)
    notes: list[str] = field(default_factory=list)


def _figures_from_log(kills: list[Kill], standing: list[AnyEvent]) -> None:
    admitted = sorted(
        (e.time.timestamp(), e.workload.uid) for e in standing if isinstance(e, WorkloadAdmitted)
    )
    for kill in kills:
        later = [t for t, _ in admitted if t > kill.at]
        kill.next_admission = later[0] - kill.at if later else None
        probe = [t for t, uid in admitted if uid == kill.probe_uid]
        kill.probe_admitted = probe[0] - kill.at if probe else None


async def _drive(stack: LiveStack, scenario: Scenario, roles: tuple[str, ...]) -> Result:
    started = time.monotonic()
    bus = await Bus.connect(stack.url, source="bench", auth=bus_auth(stack))
    gen = Generator(bus, scenario)
    kills: list[Kill] = []
    finished_log: list[AnyEvent] | None = None  # the read that found every Job finished
    try:
        config = await bus.kv(CONFIG_BUCKET)
        objects = [parse_object(d) for d in config_documents()]
        await asyncio.gather(*(config.put(object_key(o), encode_object(o)) for o in objects))
        stream = asyncio.create_task(gen.run())
        await admitted_since(bus, time.time(), 60)  # flowing
        await asyncio.sleep(scenario.settle_s)  # and backed up: preemptions under way
        for role in roles:
            kill = await kill_role(bus, gen, role, within=60)
            kills.append(kill)
            await admitted_since(bus, kill.at, 60)
            await asyncio.sleep(scenario.settle_s)
        for leader in (False, True)[: scenario.nats_kills]:
            kill = await kill_nats(bus, stack, gen, leader=leader, within=60)
            kills.append(kill)
            await admitted_since(bus, kill.at, 60)
            await asyncio.sleep(scenario.settle_s)
        gen.stop.set()
        await stream
        after_at = time.time()
        after = await gen.create(job("after-all", PROBE, "high", "100m", 100))

        async def all_finished() -> bool:
            nonlocal finished_log
            events = await read_events(stack.url, auth=bus_auth(stack))
            if not finished_all(events, gen.created):
                return False
            finished_log = events
            return True

        try:
            await poll(all_finished, within=scenario.drain_limit_s, what="all finished", every=1)
        except TimeoutError:
            pass  # the audit says which did not finish and whether admission still has them
        run_s = time.monotonic() - started
    finally:
        gen.stop.set()
        await bus.close()
    events, audited = await audit_at_end(
        lambda: read_events(stack.url, auth=bus_auth(stack)),
        gen.created,
        lambda: known_to_admission(stack),
        finished_log,
    )
    standing = fenced_log(events)
    _figures_from_log(kills, standing)
    after_admitted = [
        e.time.timestamp() - after_at
        for e in standing
        if isinstance(e, WorkloadAdmitted) and e.workload.uid == after
    ]
    result = Result(
        kills=kills,
        audit=audited,
        ready_s=stack.ready_seconds,
        run_s=run_s,
        after_admitted_s=after_admitted[0] if after_admitted else None,
        events=events,
    )
    if gen.failed_creates:
        result.notes.append(f"{gen.failed_creates} creates retried (NATS node down)")
    return result


def run_failover(
    stack: LiveStack,
    scenario: Scenario = DEFAULT_SCENARIO,
    roles: tuple[str, ...] = ROLES,
    *,
    events_out: Path | None = None,
) -> Result:
    """Drive a running ``berth up --replicas 2`` stack (a 3-node NATS cluster when
    ``scenario.kill_nats``) through the kills and audit its log; reads the log as admin."""
    result = asyncio.run(_drive(stack, scenario, roles))
    if events_out is not None:  # for a post-mortem: one event per line, in stream order
        events_out.write_bytes(b"\n".join(msgspec.json.encode(e) for e in result.events))
    return result


# --- the table ----------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def render(result: Result, scenario: Scenario) -> str:
    rows: list[tuple[str, str, str, str, str, str]] = []
    led_lines: list[str] = []
    for kill in result.kills:
        target = kill.allowed_s
        worst = max(
            (v for v in (kill.next_admission, kill.probe_admitted) if v is not None), default=None
        )
        verdict = "-" if worst is None else ("ok" if worst <= target else "MISSED")
        why = ""
        if kill.led is not None:
            why = "(led no Raft group)" if not kill.led else "(led Raft groups, see below)"
            if verdict == "MISSED" and kill.led:
                why = "(its Raft groups' election, 4-9 s in nats-server: see below)"
            led_lines.append(
                f"  - {kill.victim} led: {', '.join(kill.led) if kill.led else 'no Raft group'}"
            )
        rows.append(
            (
                f"kill -9 {kill.target}: {kill.victim}",
                _s(kill.next_admission),
                f"{_s(kill.probe_admitted)} (stored {kill.probe_stored:.2f} s)",
                f"{_s(kill.active_after)} {kill.successor}",
                f"<= {target:g} s {verdict}",
                why,
            )
        )
    headers = (
        "kill",
        "next admission",
        "probe admitted (its create stored)",
        "new leader active",
        "target",
        "",
    )
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(6)]
    a = result.audit
    lines = [
        f"Failover under load: berth up --replicas 2 --nats-cluster 3, {scenario.rate:g} Jobs/s"
        f" ({scenario.high_share:.0%} high priority) into 2 ClusterQueues of one cohort"
        f" ({2 * NOMINAL_CPU} CPU), simulated runtimes {scenario.runtime_ms[0]}-"
        f"{scenario.runtime_ms[1]} ms; ready in {result.ready_s:.1f} s, run {result.run_s:.0f} s",
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) for r in rows]
    lines += [
        "",
        f"audit of the event log ({a.events:,} events, {a.void} voided by the fence,"
        f" {a.preemptions} preemptions):",
        f"  created {a.created}, finished {a.finished}, still queued or admitted"
        f" {len(a.still_known)} (up to {scenario.drain_limit_s:.0f} s after the stream stopped)"
        + (f": {a.still_known[:5]}" if a.still_known else ""),
        f"  lost                 {len(a.lost)}" + (f": {a.lost[:5]}" if a.lost else ""),
        f"  admitted twice       {len(a.admitted_twice)}"
        + (f": {a.admitted_twice[:5]}" if a.admitted_twice else ""),
        f"  quota over-committed {'never' if not a.over_committed else a.over_committed[:5]}",
        f"  a Job created after every kill: admitted in {_s(result.after_admitted_s)}",
        *(f"  note: {note}" for note in result.notes),
        "",
        "NATS node kills: what the killed node led (a stream, a bucket's stream, a durable",
        "consumer: each is a Raft group):",
        *led_lines,
        "  A group whose leader is killed answers nothing until its followers elect another:",
        f"  nats-server waits a random {RAFT_ELECTION_S[0]:g}-{RAFT_ELECTION_S[1]:g} s after the"
        " leader's last heartbeat (one a second)",
        "  (server/raft.go minElectionTimeout/maxElectionTimeout, compiled in: no configuration",
        "  option changes them). A kill of a node that led a group on the admission path (the",
        "  event stream, the leases, the objects or status bucket, a service's consumer) costs",
        "  that election, and misses the 1 s target by it: Berth cannot shorten it.",
        "",
        "caveats:",
        "  - 2 cores, everything on loopback: NATS x3, 8 service processes, the generator;",
        "    no network latency, but the CPU is shared, so a takeover competes with the load.",
        "  - simulated runtimes: the watcher 'runs' a Job by a timer; nothing is executed.",
        "  - 'next admission' is the first admission of any workload stamped after the kill",
        "    (the admission's own timestamp, same clock). Killing preemption or recovery does",
        "    not stop admission, so theirs is near zero by design; killing the watcher does not",
        "    stop admission of Jobs it already reported. 'probe admitted' is a Job created",
        "    right after the kill in a ClusterQueue with free quota: it needs the watcher to",
        "    report it and admission to decide, so it measures those two roles' takeover.",
        "  - 'new leader active': the member record's 'since' of the replica that took the",
        "    role with a higher term (standby = the warm second replica; restarted = the",
        "    killed id, restarted by berth up, which may retake its own lease at once).",
        "    For NATS: when a new stream leader answered (polled every 0.05 s).",
        "  - a kill -9 costs up to one lease duration (3 s) from the last renewal the standby",
        "    saw; the watcher's Jobs running at the kill are evicted and run again.",
        "  - one run; figures vary by a second or so between runs.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=Scenario.rate, help="Jobs per second")
    parser.add_argument("--settle", type=float, default=Scenario.settle_s, help="s after a kill")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--events-out", type=Path, default=None, help="write the event log here")
    parser.add_argument(
        "--roles",
        default=",".join(ROLES),
        help="roles whose active replica is killed, comma-separated ('' for none: NATS only)",
    )
    args = parser.parse_args(argv)
    roles = tuple(r for r in args.roles.split(",") if r)
    if unknown := set(roles) - set(ROLES):
        parser.error(f"--roles: no role {sorted(unknown)}; the roles are {', '.join(ROLES)}")
    scenario = Scenario(rate=args.rate, settle_s=args.settle)
    owned = None
    data_dir = args.data_dir
    if data_dir is None:
        owned = tempfile.TemporaryDirectory(prefix="berth-failover-")
        data_dir = Path(owned.name) / "berth"
    stack = start_stack(data_dir, replicas=2, nats_cluster=3)
    try:
        result = run_failover(stack, scenario, roles, events_out=args.events_out)
    finally:
        stack.stop()
        if owned is not None:
            owned.cleanup()
    print(render(result, scenario))
    targets_met = all(
        (k.probe_admitted or 0) <= k.allowed_s and (k.next_admission or 0) <= k.allowed_s
        for k in result.kills
    )
    # Jobs still queued or admitted long after the stream stopped are not lost, but stuck.
    return 0 if result.audit.ok and not result.audit.still_known and targets_met else 1


if __name__ == "__main__":
    raise SystemExit(main())

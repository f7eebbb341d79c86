"""What a server-side subject filter costs nats-server on a replay (shared/bus/consuming.py).

    .venv/bin/python bench/filtered_replay.py [--workloads 20000]

Starts a private nats-server, stores the large-scale run's event mix per workload (submitted,
admitted, started, pods ready, finished, one pending report; each workload's own subjects in
1,000 ClusterQueues), then replays the stream from its first message three ways: unfiltered,
through admission's filters (its fold's subjects), and through its deciding leader's (those
but its own admissions). Prints, per way, the messages sent, the wall time and the server's
CPU seconds. Why: an older nats-server found a lagging multi-filter consumer's next message
by walking each block's subject index, which made filtering dearer than dropping; the
consumers filter on the server only because the pinned release does not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `shared`... importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nats.js import api

from berth_cli.natsserver import nats_server_binary
from services.admission.reading import FOLDED_SUBJECTS, deciding_subjects
from shared.auth import ClientAuth
from shared.bus import STREAM, STREAM_SUBJECTS, Bus
from shared.subjects import server_filters

VERBS = ("wl.submitted", "cq.{q}.admitted", "wl.started", "wl.podsready", "wl.finished")
PAYLOAD = b"x" * 300  # about an event's size


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def replay(bus: Bus, filters: list[str], pid: int) -> tuple[int, float, float]:
    """(messages sent, wall s, server CPU s) of one replay from the first message."""
    cpu, started = server_cpu(pid), time.monotonic()
    config = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.ALL,
        filter_subjects=filters or None,
        inactive_threshold=30.0,
    )
    subscription = await bus.js.pull_subscribe("", stream=STREAM, config=config)
    sent = 0
    while True:
        messages = await subscription.fetch(2000, timeout=5)
        sent += len(messages)
        if messages[-1].metadata.num_pending == 0:
            break
    await subscription.unsubscribe()
    return sent, time.monotonic() - started, server_cpu(pid) - cpu


async def run(workloads: int, url: str, pid: int) -> None:
    bus = await Bus.connect(url, source="bench", auth=ClientAuth(), retry=False)  # an open server
    try:
        await bus.js.add_stream(name=STREAM, subjects=list(STREAM_SUBJECTS))
        for start in range(0, workloads, 1000):
            futures = []
            for index in range(start, min(workloads, start + 1000)):
                queue, tail = f"q{index % 1000}", f"ns{index % 1000}.w{index}"
                subjects = [f"berth.{verb.format(q=queue)}.{tail}" for verb in VERBS]
                subjects.append(f"berth.cq.{queue}.pending.{tail}")
                for subject in subjects:
                    futures.append(await bus.acks.send(subject, PAYLOAD, {}))
            await asyncio.gather(*futures)
        ways = {
            "unfiltered": [],
            "admission's fold": server_filters([*FOLDED_SUBJECTS, "berth.lease.>"]),
            # one message per event here, as with batches off
            "admission deciding": server_filters(
                [*deciding_subjects(batching=False), "berth.lease.>"]
            ),
        }
        print(f"{workloads:,} workloads, {workloads * (len(VERBS) + 1):,} events stored")
        print(f"{'replay':<20} {'filters':>7} {'sent':>9} {'wall s':>7} {'server CPU s':>12}")
        for name, filters in ways.items():
            sent, wall, cpu = await replay(bus, filters, pid)
            print(f"{name:<20} {len(filters):>7} {sent:>9,} {wall:>7.2f} {cpu:>12.2f}")
    finally:
        await bus.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=20_000)
    args = parser.parse_args(argv)
    if args.workloads < 1:
        parser.error(f"--workloads must be at least 1, not {args.workloads}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="berth-filter-") as store:
        server = subprocess.Popen(
            [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            asyncio.run(run(args.workloads, f"nats://127.0.0.1:{port}", server.pid))
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(
        "Caveat: a shared machine; load average at the end "
        + " / ".join(f"{v:.2f}" for v in os.getloadavg())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

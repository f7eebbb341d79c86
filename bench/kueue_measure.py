"""What Kueue's scheduler benchmark measures of the processes and the bus it drives: each
process's CPU and peak RSS, the services' CPU on an idle stack, the messages each JetStream
stream stored and what each service's consumers read (bench/kueue_scheduler.py).
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
from rich.console import Console

from berth_cli.up import Stack
from shared.bus import Bus, BusSettings
from shared.bus.view import copies_metadata
from shared.gc_tuning import tune_gc

SERVICE_NAMES = ("admission", "preemption", "watcher", "recovery")


def copies_kept() -> str:
    """The per-workload copies the stack under test keeps (``BERTH_BUS_COPIES``, which its
    services inherit): printed beside the figures, as each copy is a stored message."""
    copies = BusSettings.from_env().copies
    return "all" if copies == BusSettings().copies else copies_metadata(copies)


@contextmanager
def services_collector() -> Iterator[None]:
    """The generator's garbage collector while it drives the stack: the services' setting
    (shared/gc_tuning.py, ``BERTH_GC_TUNING`` as theirs), Python's again on leaving. With
    Python's, a young collection every 700 allocations and the older ones they lead to, over
    the streams' tasks and futures in flight and the creates' records, were a large part of
    the generator's CPU, which the stack under test then lacked."""
    before = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextmanager
def ready_stack(prefix: str) -> Iterator[Stack]:
    """A stack of its own (NATS and the four services, no console) on a temporary folder,
    ready; stopped and removed on leaving."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        stack = Stack(
            data_dir=Path(tmp), nats_port=0, console=Console(quiet=True), with_console=False
        )
        try:
            stack.start_nats()
            stack.spawn_services()
            stack.wait_ready(timeout=30.0)
            yield stack
        finally:
            stack.stop()


def services_cpu(stack: Stack) -> float:
    """The four services' CPU seconds so far (user + system)."""
    return sum(
        proc_stats(service.process.pid)[0]
        for service in stack.services
        if service.process is not None and service.role in SERVICE_NAMES
    )


def idle_startup_cpu() -> float:
    """The four services' CPU seconds from their start to readiness on an idle stack of its
    own (imports, connecting, creating their consumers): the fixed cost every run's CPU
    figures include, measured apart because a run's services read events before they are
    ready."""
    with ready_stack("berth-bench-idle-") as stack:
        return services_cpu(stack)


async def stream_messages(url: str, stack: Stack) -> dict[str, int]:
    """Messages JetStream stored per stream over the run (each stream's last sequence: the
    stack is new, so every sequence number is one message of this run, including KV writes
    later overwritten)."""
    bus = await Bus.connect(url, source="bench", auth=stack.admin_auth)
    try:
        return {
            info.config.name or "?": info.state.last_seq for info in await bus.js.streams_info()
        }
    finally:
        await bus.close()


_READ_LINE = re.compile(r"^berth_bus_messages_read_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


async def consumer_reads(
    stack: Stack, *, settle_s: float = 1.0, within_s: float = 30.0
) -> dict[str, dict[str, tuple[int, int]]]:
    """What each service's consumers were sent and decoded over the run, per subject family
    (their ``berth_bus_messages_read_total``): service -> subject -> (delivered, decoded).
    Read again every ``settle_s`` until nothing changes (a service still behind the stream
    when the last workload finished catches up first), for at most ``within_s``. Ordered
    consumers and bucket watches are not counted."""
    reads = await _scrape_reads(stack)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        await asyncio.sleep(settle_s)
        again = await _scrape_reads(stack)
        if again == reads:
            break
        reads = again
    return reads


async def _scrape_reads(stack: Stack) -> dict[str, dict[str, tuple[int, int]]]:
    reads: dict[str, dict[str, tuple[int, int]]] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for service in stack.services:
            if service.role not in SERVICE_NAMES:
                continue
            async with session.get(f"{service.url}/metrics") as response:
                text = await response.text()
            subjects = reads.setdefault(service.name, {})
            for line in text.splitlines():
                match = _READ_LINE.match(line)
                if match is None:
                    continue
                labels = dict(_LABEL.findall(match["labels"]))
                delivered, decoded = subjects.get(labels["subject"], (0, 0))
                count = int(float(match["value"]))
                if labels["stage"] == "delivered":
                    delivered += count
                else:
                    decoded += count
                subjects[labels["subject"]] = (delivered, decoded)
    return reads


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds user+system, peak RSS in MiB) of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        hwm = 0.0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
        return cpu, hwm
    except (OSError, IndexError, ValueError):
        return float("nan"), float("nan")

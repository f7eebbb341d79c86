"""The console's first paint with 10,000 workloads in 100 ClusterQueues (goal: under 1 s).

The console's model is fed directly: synthetic events for 10,000 workloads (submitted, then
pending or admitted and running) in 100 ClusterQueues of 10 cohorts, each with two flavors
of three resources (600 quota bars) and a full pending-over-time history. Then the real
aiohttp app serves it on loopback, and the time of ``GET /`` is measured over HTTP and, if
Debian's Chromium is installed, in a real headless browser (first contentful paint). Run:

    .venv/bin/python bench/console_paint.py
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import threading
import time
import urllib.request
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from berth_console.app import build_app
from berth_console.model import HISTORY_SAMPLES, Model
from berth_console.pages.base import Context
from berth_console.pages.overview import OverviewView
from berth_console.pages.workloads import WorkloadsView
from berth_console.pending import PendingCache
from shared.events import (
    AnyEvent,
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadPending,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
    subject_for,
)

QUEUES = 100
COHORTS = 10
WORKLOADS = 10_000
RUNS = 20
FLAVORS = ("on-demand", "spot")
RESOURCES = (("cpu", 64, ""), ("memory", 256, "Gi"), ("nvidia.com/gpu", 8, ""))
CAVEAT = (
    "Caveat: the model was fed directly (synthetic events; no bus, no admission). These are"
    " the console's own costs, folding the stream and rendering; on a live stack the overview"
    " also waits for nothing (admission's clusterqueues answer is fetched in the background,"
    " at most once a second), but the fold of a long stream at start takes as long as the"
    " bus takes to deliver it."
)


def cluster_queue(index: int, rng: random.Random) -> dict[str, Any]:
    flavors, usage = [], []
    for flavor in FLAVORS:
        resources, used = [], []
        for name, nominal, unit in RESOURCES:
            resources.append({"name": name, "nominalQuota": f"{nominal}{unit}"})
            total = rng.randint(0, nominal + nominal // 2)
            borrowed = max(total - nominal, 0)
            used.append({"name": name, "total": f"{total}{unit}", "borrowed": f"{borrowed}{unit}"})
        flavors.append({"name": flavor, "resources": resources})
        usage.append({"name": flavor, "resources": used})
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{index:03d}"},
        "spec": {
            "cohort": f"cohort-{index % COHORTS}",
            "resourceGroups": [
                {"coveredResources": [r for r, _, _ in RESOURCES], "flavors": flavors}
            ],
        },
        "status": {
            "pendingWorkloads": rng.randint(0, 150),
            "admittedWorkloads": rng.randint(0, 60),
            "flavorsUsage": usage,
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                }
            ],
        },
    }


def events(rng: random.Random) -> list[AnyEvent]:
    start = datetime.now(UTC) - timedelta(minutes=30)
    found: list[AnyEvent] = []
    for index in range(WORKLOADS):
        queue = f"cq-{index % QUEUES:03d}"
        ref = WorkloadRef(f"team-{index % 20}", f"job-{index:05d}", f"uid-{index}")
        when = start + timedelta(milliseconds=index * 100)
        found.append(
            WorkloadSubmitted(
                source="watcher",
                workload=ref,
                time=when,
                kind="Job",
                queue_name=f"lq-{index % QUEUES}",
                pod_sets=[PodSet("main", 1, {"cpu": 1000, "memory": 2 << 30})],
                created=when,
            )
        )
        if rng.random() < 0.3:
            assignment = FlavorAssignment(
                "main", 1, {"cpu": "on-demand", "memory": "on-demand"}, {"cpu": 1000}
            )
            found.append(
                WorkloadAdmitted(
                    source="admission",
                    workload=ref,
                    time=when,
                    cluster_queue=queue,
                    local_queue="lq",
                    priority=100,
                    assignments=[assignment],
                    generation=1,
                )
            )
            found.append(WorkloadStarted(source="watcher", workload=ref, time=when, generation=1))
        else:
            found.append(
                WorkloadPending(
                    source="admission",
                    workload=ref,
                    time=when,
                    cluster_queue=queue,
                    reason="Pending",
                    message="couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, 1 more needed",
                    priority=100,
                )
            )
    return found


def build_model() -> tuple[Model, float, int]:
    rng = random.Random(17)
    model = Model()
    stream = events(rng)
    subjects = [subject_for(event) for event in stream]
    started = time.perf_counter()
    for seq, (subject, event) in enumerate(zip(subjects, stream, strict=True), start=1):
        model.apply(seq, subject, event)
    fold = time.perf_counter() - started
    model.caught_up = True
    model.set_queues([cluster_queue(i, rng) for i in range(QUEUES)], [])
    now = time.time()
    for name in model.pending_history:  # a full sparkline: ten minutes of samples
        model.pending_history[name] = deque(
            (
                (now - 5 * (HISTORY_SAMPLES - i), rng.randint(0, 150))
                for i in range(HISTORY_SAMPLES)
            ),
            maxlen=HISTORY_SAMPLES,
        )
    return model, fold, len(stream)


def serve(model: Model) -> tuple[str, asyncio.AbstractEventLoop, threading.Thread]:
    """The real app on loopback, in a thread of its own (the measurements block)."""
    loop = asyncio.new_event_loop()
    ready: list[str] = []
    started = threading.Event()

    async def start() -> None:
        context = Context(model=model, queries=None, pending=PendingCache(None))
        runner = web.AppRunner(build_app(context, token=None, stopping=asyncio.Event()))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        ready.append(f"http://{host}:{port}")
        started.set()

    thread = threading.Thread(
        target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True
    )
    thread.start()
    started.wait(10)
    return ready[0], loop, thread


def cold(model: Model) -> None:
    """Forget every rendered row and shared snapshot: the next page is rendered from scratch
    (as the first after a change of every ClusterQueue would be)."""
    model.snapshots.clear()
    model.fragments.clear()


def http_times(url: str, model: Model | None) -> tuple[list[float], int]:
    times, size = [], 0
    for _ in range(RUNS):
        if model is not None:
            cold(model)
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as response:
            size = len(response.read())
        times.append(time.perf_counter() - started)
    return times, size


def browser_paint(url: str, model: Model) -> tuple[float, float] | None:
    """(first contentful paint, load event) in ms in Debian's headless Chromium, or None."""
    if not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={tempfile.mkdtemp()}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)  # warm: the static files cached, as for any page after the first
        paints, loads = [], []
        for _ in range(5):
            cold(model)
            driver.get(url)
            fcp = driver.execute_script(
                "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null;"
            )
            load = driver.execute_script(
                "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd;"
            )
            if fcp is not None:
                paints.append(float(fcp))
            loads.append(float(load))
        return (statistics.median(paints) if paints else float("nan"), statistics.median(loads))
    finally:
        driver.quit()


def main() -> None:
    model, fold, count = build_model()
    print(
        f"fold: {count:,} events of {WORKLOADS:,} workloads in {fold * 1000:.0f} ms ({count / fold:,.0f} events/s)"
    )

    async def render_overview(*, fresh: bool) -> float:
        if fresh:
            cold(model)
        view = OverviewView(Context(model=model, queries=None, pending=PendingCache(None)))
        started = time.perf_counter()
        view.body(await view.snapshot())
        return time.perf_counter() - started

    renders = [asyncio.run(render_overview(fresh=True)) for _ in range(RUNS)]
    print(
        f"overview render in process ({QUEUES} ClusterQueues, {QUEUES * len(FLAVORS) * len(RESOURCES)} bars),"
        f" from scratch: median {statistics.median(renders) * 1000:.1f} ms, max {max(renders) * 1000:.1f} ms"
    )
    model.cluster_queues["cq-000"]["status"]["pendingWorkloads"] += 1  # one queue moved
    warm = [asyncio.run(render_overview(fresh=False)) for _ in range(RUNS)]
    print(
        f"overview render after a refresh where one queue changed (rows cached): median {statistics.median(warm) * 1000:.1f} ms"
    )

    async def render_workloads() -> float:
        view = WorkloadsView(
            Context(model=model, queries=None, pending=PendingCache(None)),
            namespace="",
            queue="",
            status="",
        )
        started = time.perf_counter()
        view.body(await view.snapshot())
        return time.perf_counter() - started

    tables = [asyncio.run(render_workloads()) for _ in range(5)]
    print(
        f"workloads page render (10,000 rows filtered and sorted, 500 shown): median {statistics.median(tables) * 1000:.1f} ms"
    )

    url, loop, _ = serve(model)
    times, size = http_times(url + "/", model)
    print(
        f"GET / over HTTP, rendered from scratch: median {statistics.median(times) * 1000:.1f} ms,"
        f" max {max(times) * 1000:.1f} ms, {size / 1024:.0f} KiB"
    )
    shared, _ = http_times(url + "/", None)
    print(
        f"GET / over HTTP, snapshot shared with the browsers already on it: median {statistics.median(shared) * 1000:.1f} ms"
    )
    paint = browser_paint(url + "/", model)
    if paint is None:
        print(
            "Chromium: not installed (apt-get install chromium chromium-driver), browser paint not measured"
        )
    else:
        print(
            f"Chromium (headless), rendered from scratch: first contentful paint {paint[0]:.0f} ms,"
            f" load event {paint[1]:.0f} ms (median of 5)"
        )
    worst = max(max(times), (paint[0] / 1000) if paint else 0.0)
    print(
        f"goal: the overview under 1 s -> {'met' if worst < 1.0 else 'MISSED'} ({worst * 1000:.0f} ms at worst)"
    )
    print(CAVEAT)
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()

"""Whether the watcher reports readiness (services/watcher/pods_ready_gate.py): only while
waitForPodsReady is enabled, and what the Kubernetes backend sends when it is turned on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from services.watcher import reporting
from services.watcher.kube.readiness import Readiness
from services.watcher.local.processes import RunningPods
from services.watcher.local.runs import Runs
from services.watcher.local.simulated import Simulated
from services.watcher.local.statuses import StatusStore
from services.watcher.pods_ready_gate import PodsReadyGate, follow_pods_ready_setting
from shared.admission_checks import WaitForPodsReady
from shared.bus import CONFIG_BUCKET, Bus
from shared.config import (
    Configuration,
    ConfigurationSpec,
    ObjectMeta,
    encode_object,
    object_key,
)
from shared.events import WorkloadPodsReady, WorkloadRef
from shared.service import Runtime
from tests.conftest import bus_auth

REF = WorkloadRef(namespace="ns", name="j1", uid="u1")


def _configuration(name: str, enable: bool | str | None) -> Configuration:
    setting = None if enable is None else WaitForPodsReady(enable=enable is True)
    return Configuration(
        api_version="berth.dev/v1alpha1",
        metadata=ObjectMeta(name=name),
        spec=ConfigurationSpec(wait_for_pods_ready=setting),
    )


# (settings in turn: each a Configuration's enable, None for no setting, "none" for no
# Configuration; whether reports are on after each; whether that step turned them on; why)
STEPS: list[tuple[list[bool | str | None], list[bool], list[bool], str]] = [
    (["none"], [False], [False], "no Configuration: off, as Kueue's default"),
    ([None], [False], [False], "a Configuration without waitForPodsReady: off"),
    ([False], [False], [False], "enable: false: off"),
    ([True], [True], [True], "enable: true: on, and this step turned it on"),
    ([True, True], [True, True], [True, False], "still on: nothing to send again"),
    ([True, False, True], [True, False, True], [True, False, True], "off, then on again"),
    ([True, "none"], [True, False], [True, False], "the Configuration deleted: off"),
]


@pytest.mark.parametrize(
    ("settings", "open_", "turned_on", "why"), STEPS, ids=[s[3] for s in STEPS]
)
def test_the_gate_follows_the_setting(
    settings: list[bool | str | None], open_: list[bool], turned_on: list[bool], why: str
) -> None:
    gate = PodsReadyGate()
    seen: list[tuple[bool, bool]] = []
    for setting in settings:
        objects = [] if setting == "none" else [_configuration("berth", setting)]
        on = gate.configure(objects)
        seen.append((gate.open, on))
    assert seen == list(zip(open_, turned_on, strict=True)), why


def test_kubernetes_readiness_is_kept_while_off_and_sent_as_it_stands_when_on() -> None:
    """Off: transitions are followed but not reported; on: each admission's readiness as
    it stands (its first readiness, then its loss if it is not ready now)."""
    readiness = Readiness()
    other = WorkloadRef(namespace="ns", name="j2", uid="u2")
    assert readiness.observe(REF, 1, True, queue="q") == []
    assert readiness.observe(other, 1, True, queue="q") == []
    assert readiness.observe(other, 1, False, queue="q") == []
    sent = [(r.workload.name, r.ready, r.id) for r in readiness.current()]
    assert sent[:2] == [("j1", True, "podsready-u1-1"), ("j2", True, "podsready-u2-1")]
    assert sent[2][:2] == ("j2", False) and sent[2][2] != "podsready-u2-1"
    readiness.gate.open = True
    [recovered] = readiness.observe(other, 1, True, queue="q")
    assert recovered.ready and recovered.workload.name == "j2", "on: transitions reported"
    readiness.forget("u1")
    assert [r.workload.name for r in readiness.current()] == ["j2"], "a forgotten one is not sent"


async def _put_setting(bus: Bus, enable: bool) -> None:
    kv = await bus.kv(CONFIG_BUCKET)
    configuration = _configuration("berth", enable)
    await kv.put(object_key(configuration), encode_object(configuration))


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"not within 5 s: {what}")


async def test_the_follower_turns_reports_on_and_off_and_misses_no_change(
    nats_url: str, tmp_path: Path
) -> None:
    """On a real bus: the setting read at start; turned on, what is held is sent once (it is
    in the stream); turned off and on again while that is sent, the gate ends as the config
    says (a change during the send is read, not lost); stopping ends the follower."""
    bus = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    await bus.ensure_stream()
    runtime = Runtime(name="watcher", bus=bus, data_dir=str(tmp_path))
    await _put_setting(bus, False)
    gate, taken = PodsReadyGate(), list[int]()

    def held() -> list[WorkloadPodsReady]:
        taken.append(len(taken))
        return [reporting.pods_ready(REF, len(taken))]

    await follow_pods_ready_setting(runtime, gate, held)
    assert not gate.open and taken == [], "off at start: nothing sent"
    await _put_setting(bus, True)
    await _until(lambda: gate.open and taken == [0], "on: held sent once")
    await _put_setting(bus, False)
    await _put_setting(bus, True)  # while the second send may still await its ack
    await _put_setting(bus, False)
    await _until(lambda: not gate.open, "off again, whatever came during a send")
    await asyncio.sleep(0.2)
    assert not gate.open, "and it stays as the config says"
    subscription = await bus.replay_subscription(["berth.wl.podsready.>"])
    sent = await bus.next_batch(subscription, wait=1.0) or []
    assert [e.generation for e in sent if isinstance(e, WorkloadPodsReady)][:1] == [1]
    runtime.stopping.set()
    await runtime.cancel_tasks(grace=2)
    assert not runtime._tasks, "the follower ended on stopping"
    await bus.close()


# (why, the run: simulated or processes with the readiness last seen while off, whether it
# is stopping; what held_ready sends for it: the ready flag of each report)
HELD_CASES: list[tuple[str, str, bool | None, bool, list[bool]]] = [
    ("a simulated run is ready from its start", "simulated", None, False, [True]),
    ("a simulated run being stopped: nothing", "simulated", None, True, []),
    ("processes never seen ready: nothing", "processes", None, False, []),
    ("processes seen ready", "processes", True, False, [True]),
    (
        "processes seen ready, then lost: ready, then the loss",
        "processes",
        False,
        False,
        [True, False],
    ),
]


@pytest.mark.parametrize(
    ("why", "kind", "seen", "stopping", "sent"), HELD_CASES, ids=[c[0] for c in HELD_CASES]
)
def test_what_the_local_backend_sends_when_reports_are_turned_on(
    why: str, kind: str, seen: bool | None, stopping: bool, sent: list[bool], tmp_path: Path
) -> None:
    """Runs.held_ready: each running admission's readiness as it stands, once (taken)."""
    runtime = Runtime(name="watcher", bus=None, data_dir=str(tmp_path))  # type: ignore[arg-type]
    runs = Runs(runtime, StatusStore({}), {}, stop_grace=1)
    run: Simulated | RunningPods
    if kind == "simulated":
        run = Simulated("ns/j1", REF, 1)
    else:
        run = RunningPods(generation=1)
        run.unreported_ready = None if seen is None else (REF, seen)
    run.stopping = stopping
    runs.running[REF.uid] = run
    reports = runs.held_ready()
    assert [r.ready for r in reports] == sent, why
    assert all(r.generation == 1 and r.workload == REF for r in reports), why
    assert kind == "simulated" or runs.held_ready() == [], "taken: not sent twice"

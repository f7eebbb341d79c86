"""Whether the watcher reports readiness (services/watcher/pods_ready_gate.py): only while
waitForPodsReady is enabled, and what the Kubernetes backend sends when it is turned on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from services.watcher import reporting
from services.watcher.kube.readiness import Readiness
from services.watcher.pods_ready_gate import PodsReadyGate, follow_pods_ready_setting
from shared.admission_checks import WaitForPodsReady
from shared.bus import CONFIG_BUCKET, Bus
from shared.config import (
    ConfigObject,
    Configuration,
    ConfigurationSpec,
    ObjectMeta,
    encode_object,
    object_key,
)
from shared.config_mirror import ConfigMirror
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


def _mirror(*objects: ConfigObject) -> ConfigMirror:
    mirror = ConfigMirror()
    mirror.objects = {object_key(obj): obj for obj in objects}
    return mirror


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
        on = gate.configure(_mirror(*objects))
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

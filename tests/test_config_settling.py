"""A config burst is taken whole (services/admission/config_settling.py): the rule, the
watch's ``behind`` it reads (real NATS), and the admission pass that waits for the burst."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from nats.js.kv import KeyValue

from services.admission.config_settling import ConfigSettling
from services.admission.service import AdmissionService
from shared.bus import CONFIG_BUCKET, Bus
from shared.config import object_key, parse_object
from shared.config_mirror import ConfigMirror
from shared.events import PodSet, WorkloadRef, WorkloadSubmitted, now
from shared.service import Runtime
from tests.scheduler_world import cq, flavor, group, lq

# (calls of ready(): (changed, behind, now), the answers expected, why)
READY_CASES = [
    ([(False, 0, 0.0)], [True], "no change: decide"),
    ([(False, 7, 0.0)], [True], "nothing changed since the last take: behind is no matter"),
    ([(True, 0, 0.0)], [True], "the burst is in (behind 0): take it now"),
    ([(True, 3, 0.0), (True, 2, 0.5)], [False, False], "more of the burst on its way: wait"),
    ([(True, 3, 0.0), (True, 0, 0.1)], [False, True], "its last change arrived: take it"),
    ([(True, 3, 0.0), (True, 3, 1.0)], [False, True], "waited the limit: decide anyway"),
    (
        [(True, 3, 0.0), (True, 3, 1.2), (True, 3, 1.3), (True, 3, 2.3)],
        [False, True, False, True],
        "a burst longer than the limit: one pass per limit, the wait counted from the last",
    ),
    (
        [(True, 3, 0.0), (True, 0, 0.5), (True, 3, 1.2)],
        [False, True, False],
        "a new burst waits its own limit, counted from its own start",
    ),
]


@pytest.mark.parametrize(("calls", "expected", "why"), READY_CASES, ids=[c[2] for c in READY_CASES])
def test_ready(calls: list[tuple[bool, int, float]], expected: list[bool], why: str) -> None:
    config = ConfigMirror()
    settling = ConfigSettling(config, limit_s=1.0)
    answers = []
    for changed, behind, at in calls:
        if changed:
            config.changed.set()
        else:
            config.changed.clear()
        config.behind = behind
        answers.append(settling.ready(at))
    assert answers == expected, why


@pytest.fixture
def bus(watcher_bus: Bus) -> Bus:
    return watcher_bus


class _Recording(ConfigMirror):
    """The real mirror, noting ``behind`` after each change it hands over."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []

    async def _on_change(self, entry: KeyValue.Entry) -> None:
        await super()._on_change(entry)
        self.seen.append((entry.key, self.behind))


async def test_behind_counts_the_changes_still_coming(bus: Bus, tmp_path: Path) -> None:
    """Each change's ``behind`` is at most the changes written after it, and the last one
    handed over says 0: the watch has caught up."""
    kv = await bus.kv(CONFIG_BUCKET)
    runtime = Runtime(name="admission", bus=bus, data_dir=str(tmp_path))
    mirror = _Recording()
    await mirror.start(runtime)
    keys = [f"localqueue.default.lq{i}" for i in range(300)]
    await asyncio.gather(
        *(kv.put(k, msgspec.json.encode(lq(k.rsplit(".", 1)[1], "cq"))) for k in keys)
    )
    async with asyncio.timeout(10):
        while len(mirror.seen) < len(keys):  # noqa: ASYNC110 - a poll is simplest
            await asyncio.sleep(0.05)
    assert [key for key, _ in mirror.seen] == keys
    for index, (key, behind) in enumerate(mirror.seen):
        assert 0 <= behind <= len(keys) - 1 - index, key
    assert mirror.behind == 0
    runtime.stopping.set()
    await runtime.cancel_tasks(grace=2)


async def test_a_pass_waits_for_the_rest_of_a_config_burst(bus: Bus, tmp_path: Path) -> None:
    """A workload whose LocalQueue is still on its way is not judged on the config so far
    (no "LocalQueue doesn't exist" verdict): the pass waits, and once the burst is in, one
    rebuild admits it."""
    service = AdmissionService(Runtime(name="admission", bus=bus, data_dir=str(tmp_path)))
    burst = [
        parse_object(d)
        for d in (flavor("f"), cq("cq", group(["cpu"], ("f", {"cpu": 4}))), lq("lq", "cq"))
    ]
    ref = WorkloadRef("default", "w", "uid-w")
    service._apply(
        [
            WorkloadSubmitted(
                source="watcher",
                workload=ref,
                kind="Job",
                queue_name="lq",
                pod_sets=[PodSet("main", 1, {"cpu": 1000})],
                created=now(),
            )
        ]
    )
    for arrived, behind in ((burst[:2], 1), (burst, 0)):  # the LocalQueue comes last
        service.config.objects = {object_key(o): o for o in arrived}
        service.config.behind = behind
        service.config.changed.set()
        await service._decide()
        record = service.records["uid-w"]
        if behind:
            assert service.config.changed.is_set(), "the change is not taken yet"
            assert record.admission is None and not record.conditions, "nothing decided"
    assert not service.config.changed.is_set()
    assert record.admission is not None and record.admission.cluster_queue == "cq"

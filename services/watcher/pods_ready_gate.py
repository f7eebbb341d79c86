"""Whether the watcher reports pods' readiness: only while waitForPodsReady is enabled.

Kueue sets a Workload's PodsReady condition, and observes the ready-time metrics, only with
waitForPodsReady enabled (its job reconciler checks the setting before anything else), so
Berth's watcher sends ``WorkloadPodsReady`` only then: without it no service reads one, and
each was a message more per workload for nats-server and admission.

The backends still follow readiness while it is off: each running admission's readiness as
last seen is kept (with the local backend's runs; in the Kubernetes backend's
:class:`~services.watcher.kube.readiness.Readiness`, forgotten when the workload finishes,
is evicted or is deleted). When the setting is turned on, each is sent at once as it stands
(:func:`as_it_stands`); admission times the runs admitted while it was off from that moment
(services/admission/pods_ready.py ``PodsReadyClock._clocks``), so a ready run is not
evicted before its report is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from services.watcher import reporting
from shared.bus.handing import acting_again
from shared.config import ConfigObject, wait_for_pods_ready_of
from shared.config_mirror import ConfigMirror
from shared.events import WorkloadPodsReady, WorkloadRef
from shared.logging import get_logger
from shared.service import Runtime

__all__ = ["PodsReadyGate", "as_it_stands", "follow_pods_ready_setting"]

log = get_logger("watcher")


class PodsReadyGate:
    """Whether readiness reports go out now (``open``): waitForPodsReady's ``enable`` in the
    Configuration in force (``shared.config.wait_for_pods_ready_of``)."""

    def __init__(self) -> None:
        self.open = False

    def configure(self, objects: Iterable[ConfigObject]) -> bool:
        """Take the setting from the config; True when this turns reports on."""
        policy = wait_for_pods_ready_of(objects)
        was, self.open = self.open, policy is not None and policy.enable
        return self.open and not was


def as_it_stands(
    ref: WorkloadRef, generation: int, ready: bool, at: datetime
) -> list[WorkloadPodsReady]:
    """The reports that say a running admission's readiness as it stands, for a run seen
    ready while reports were off: its first readiness (the admission's id, so one sent
    before is stored once), then a loss if its pods are not ready now; both at ``at``, the
    moment they are sent, so admission's recovery clock runs from then, not from a loss it
    never heard of."""
    first = reporting.pods_ready(ref, generation, at=at)
    if ready:
        return [first]
    return [first, reporting.pods_ready(ref, generation, ready=False, first=False, at=at)]


async def follow_pods_ready_setting(
    runtime: Runtime, gate: PodsReadyGate, held: Callable[[], list[WorkloadPodsReady]]
) -> None:
    """Load the config and take the setting (before the backend starts anything), then
    follow it in a task the runtime owns: each time reports are turned on, send what
    ``held`` gives (each running admission's readiness, kept while they were off)."""
    mirror = ConfigMirror()
    await mirror.start(runtime)
    mirror.take_change()  # before it is read: a change from now on wakes the follower
    gate.configure(mirror.values())
    runtime.spawn(_follow(runtime, gate, mirror, held), name="watcher.pods-ready-setting")


async def _follow(
    runtime: Runtime,
    gate: PodsReadyGate,
    mirror: ConfigMirror,
    held: Callable[[], list[WorkloadPodsReady]],
) -> None:
    while await acting_again(mirror.changed, runtime.stopping):  # a change, or stopping
        # Taken before it is read, so a change while the reports below are sent is read at
        # the next turn, not lost.
        mirror.take_change()
        if not gate.configure(mirror.values()):
            continue
        reports = held()
        log.info(
            "pods_ready_reports_on",
            workload="",
            queue="",
            held=len(reports),
            reason="waitForPodsReady enabled: the readiness of the admissions running is sent",
        )
        if reports:
            await runtime.bus.publish_many(reports)

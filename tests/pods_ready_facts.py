"""What tests/test_pods_ready_clock.py and test_pods_ready_fold.py share: the workload they
time (REF), the facts they fold (its admission, its pods' readiness) and the clocks
(services/admission/pods_ready.py PodsReadyClock) configured as they need; and, for the
watcher's tests, the config that turns readiness reports on (:func:`enable_pods_ready`)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.admission.pods_ready import PodsReadyClock
from shared.admission_checks import RequeuingStrategy, WaitForPodsReady
from shared.bus import CONFIG_BUCKET, Bus
from shared.config import Configuration, ConfigurationSpec, ObjectMeta, encode_object, object_key
from shared.events import WorkloadAdmitted, WorkloadPodsReady, WorkloadRef

REF = WorkloadRef("default", "job", "uid-1")


def admitted(generation: int, at: float, *, reserved_only: bool = False) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        source="admission",
        workload=REF,
        cluster_queue="cq",
        local_queue="lq",
        priority=0,
        assignments=[],
        generation=generation,
        reserved_only=reserved_only,
        time=datetime.fromtimestamp(at, UTC),
    )


def timeout_clock(limit: int | None = 1, block: bool | None = None) -> PodsReadyClock:
    clock = PodsReadyClock()
    clock.configure(
        WaitForPodsReady(
            enable=True,
            timeout="10s",
            block_admission=block,
            requeuing_strategy=RequeuingStrategy(backoff_limit_count=limit, backoff_base_seconds=5),
        )
    )
    clock.random.seed(1)
    return clock


def pods_ready(generation: int, at: float, *, ready: bool = True) -> WorkloadPodsReady:
    return WorkloadPodsReady(
        source="watcher",
        workload=REF,
        generation=generation,
        ready=ready,
        time=datetime.fromtimestamp(at, UTC),
    )


def recovery_clock(recovery: str | None = "30s") -> PodsReadyClock:
    clock = PodsReadyClock()
    clock.configure(
        WaitForPodsReady(
            enable=True,
            timeout="10s",
            recovery_timeout=recovery,
            requeuing_strategy=RequeuingStrategy(backoff_limit_count=1, backoff_base_seconds=5),
        )
    )
    return clock


async def enable_pods_ready(bus: Bus) -> None:
    """Store a Configuration with waitForPodsReady enabled (a long timeout, so it never
    evicts): the watcher reports readiness only then (services/watcher/pods_ready_gate.py)."""
    configuration = Configuration(
        api_version="berth.dev/v1alpha1",
        metadata=ObjectMeta(name="berth"),
        spec=ConfigurationSpec(wait_for_pods_ready=WaitForPodsReady(enable=True, timeout="1h")),
    )
    kv = await bus.kv(CONFIG_BUCKET)
    await kv.put(object_key(configuration), encode_object(configuration))

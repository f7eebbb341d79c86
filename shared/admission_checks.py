"""Kueue's admission checks and waitForPodsReady as Berth reads them (config and states).

The parts of :mod:`shared.config` that admission checks and pod readiness add: the
AdmissionCheck spec, a ClusterQueue's ``admissionChecksStrategy``, the ``waitForPodsReady``
section of the Configuration, their checks at ``berth apply``, and the states a check takes
(the CLI sends them, admission folds them). Kept apart so that config.py does not grow.

Kueue's meaning, in short (docs/admission-checks.md): a workload that reserves quota in a
ClusterQueue with checks holds the quota but is not started (QuotaReserved) until every
check that applies to its flavors is ``Ready``; then it is Admitted. ``Retry`` releases the
quota and requeues it after a backoff; ``Rejected`` deactivates it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from shared.config_base import Spec
from shared.durations import parse_duration

__all__ = [
    "CHECK_STATES",
    "PROVISIONING_CONTROLLER",
    "AdmissionCheckSpec",
    "AdmissionChecksStrategy",
    "CheckState",
    "RequeuingStrategy",
    "WaitForPodsReady",
    "check_cluster_queue_checks",
    "check_controller",
    "check_wait_for_pods_ready",
    "is_active",
]

CheckState = Literal["Pending", "Ready", "Retry", "Rejected"]
CHECK_STATES: tuple[CheckState, ...] = ("Pending", "Ready", "Retry", "Rejected")
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"


class AdmissionCheckParameters(Spec):
    api_group: str
    kind: str
    name: str


class AdmissionCheckSpec(Spec):
    controller_name: str
    retry_delay_minutes: int | None = None  # deprecated in Kueue; unused there too
    parameters: AdmissionCheckParameters | None = None


class AdmissionCheckStrategyRule(Spec):
    name: str
    # The check applies only to workloads assigned one of these flavors; empty: to all.
    on_flavors: list[str] = []


class AdmissionChecksStrategy(Spec):
    admission_checks: list[AdmissionCheckStrategyRule] = []


class RequeuingStrategy(Spec):
    # Eviction: a requeued workload queues by its eviction time; Creation: by its creation.
    timestamp: Literal["Eviction", "Creation"] = "Eviction"
    backoff_limit_count: int | None = None  # None: requeued without limit
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600


class WaitForPodsReady(Spec):
    enable: bool = False
    timeout: str = "5m"
    # None: Kueue's default, which is ``enable``.
    block_admission: bool | None = None
    requeuing_strategy: RequeuingStrategy = msgspec.field(default_factory=RequeuingStrategy)
    recovery_timeout: str | None = None  # None: the timeout (Kueue's default); 0s: off

    @property
    def blocks_admission(self) -> bool:
        return self.enable if self.block_admission is None else self.block_admission


def check_controller(spec: AdmissionCheckSpec) -> None:
    """Refuse an AdmissionCheck Berth cannot serve; raises ValueError naming the field.

    A ProvisioningRequest check is answered by Kueue's own controller with a cluster
    autoscaler behind it; Berth has neither, so it would hold every workload for good.
    """
    if not spec.controller_name:
        raise ValueError("`spec.controllerName` must not be empty")
    if spec.controller_name == PROVISIONING_CONTROLLER:
        raise ValueError(
            f"`spec.controllerName` {PROVISIONING_CONTROLLER}: ProvisioningRequest checks"
            " need a cluster autoscaler and are not supported yet"
        )


def check_cluster_queue_checks(
    admission_checks: list[str], strategy: AdmissionChecksStrategy | None
) -> None:
    """Kueue's rules for a ClusterQueue's checks: ``admissionChecks`` and
    ``admissionChecksStrategy`` exclude each other, and no check is named twice."""
    if admission_checks and strategy is not None and strategy.admission_checks:
        raise ValueError(
            "`spec.admissionChecks` and `spec.admissionChecksStrategy` cannot both be set"
        )
    names = admission_checks or [
        rule.name for rule in (strategy.admission_checks if strategy else [])
    ]
    seen: set[str] = set()
    for name in names:
        if not name:
            raise ValueError("an admission check name must not be empty")
        if name in seen:
            raise ValueError(f"admission check {name!r} is listed twice")
        seen.add(name)


def check_wait_for_pods_ready(settings: WaitForPodsReady) -> None:
    """Refuse a waitForPodsReady section Kueue would refuse; ValueError naming the field."""
    path = "spec.waitForPodsReady"
    for field, text in (
        ("timeout", settings.timeout),
        ("recoveryTimeout", settings.recovery_timeout),
    ):
        if text is None:
            continue
        try:
            seconds = parse_duration(text)
        except ValueError as error:
            raise ValueError(f"`{path}.{field}`: {error}") from None
        if seconds <= 0 and field == "timeout":
            raise ValueError(f"`{path}.{field}` must be positive")  # 0s recoveryTimeout: off
    strategy = settings.requeuing_strategy
    for field, value in (
        ("backoffLimitCount", strategy.backoff_limit_count),
        ("backoffBaseSeconds", strategy.backoff_base_seconds),
        ("backoffMaxSeconds", strategy.backoff_max_seconds),
    ):
        if value is not None and value < 0:
            raise ValueError(f"`{path}.requeuingStrategy.{field}` must not be negative")


def is_active(status: dict[str, Any] | None) -> bool:
    """Whether an AdmissionCheck is Active: its ``status.conditions`` Active condition, when
    one was applied with it; without one it is active (Berth runs no controller that would
    set it, and the checks are answered on the bus)."""
    for condition in (status or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Active":
            return condition.get("status") != "False"
    return True

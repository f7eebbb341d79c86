"""Admission checks: the config Berth accepts and refuses, and the rules admission decides by
(services/admission/admission_checks.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.admission.admission_checks import (
    CheckGate,
    applicable_checks,
    check_problem,
    retry_delay,
    verdict,
)
from shared.admission_checks import CheckState, RequeuingStrategy
from shared.config import AdmissionCheck, ConfigError, Configuration, parse_object
from shared.events import (
    AdmissionCheckUpdated,
    EvictionRequested,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadRef,
)


def _check(name: str, controller: str = "example.com/check", **extra: object) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": controller},
        **extra,
    }


def _cq(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": spec,
    }


def _configuration(**ready: Any) -> dict[str, Any]:
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "Configuration",
        "metadata": {"name": "berth"},
        "spec": {"waitForPodsReady": ready},
    }


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "a ProvisioningRequest check would wait for an autoscaler Berth does not have",
        _check("prov", "kueue.x-k8s.io/provisioning-request"),
        "need a cluster autoscaler and are not supported yet",
    ),
    ("a check answered by nobody named", _check("c", ""), "`spec.controllerName` must not be"),
    (
        "Kueue refuses both ways of listing checks at once",
        _cq(admissionChecks=["a"], admissionChecksStrategy={"admissionChecks": [{"name": "b"}]}),
        "cannot both be set",
    ),
    ("a check listed twice", _cq(admissionChecks=["a", "a"]), "listed twice"),
    ("a typo in the strategy", _cq(admissionChecksStrategy={"checks": []}), "checks"),
    ("a timeout that is not a duration", _configuration(timeout="soon"), "timeout"),
    ("a zero timeout evicts at once", _configuration(timeout="0s"), "must be positive"),
    (
        "a recoveryTimeout that is not a duration",
        _configuration(recoveryTimeout="later"),
        "recoveryTimeout",
    ),
    (
        "a negative requeue limit",
        _configuration(requeuingStrategy={"backoffLimitCount": -1}),
        "backoffLimitCount` must not be negative",
    ),
    (
        "an unknown timestamp",
        _configuration(requeuingStrategy={"timestamp": "Now"}),
        "timestamp",
    ),
]


@pytest.mark.parametrize(("reason", "document", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_bad_config_is_refused_naming_the_field(
    reason: str, document: dict[str, Any], message: str
) -> None:
    """Each bad input is refused at apply with a message naming what is wrong."""
    with pytest.raises(ConfigError, match=None) as raised:
        parse_object(document)
    assert message in str(raised.value), (reason, str(raised.value))


def test_a_check_and_its_queue_are_config() -> None:
    """An AdmissionCheck is stored; a ClusterQueue's strategy keeps its onFlavors."""
    check = parse_object(_check("gpu", parameters={"apiGroup": "a", "kind": "b", "name": "c"}))
    assert isinstance(check, AdmissionCheck) and check.spec.controller_name == "example.com/check"
    cq = parse_object(
        _cq(admissionChecksStrategy={"admissionChecks": [{"name": "gpu", "onFlavors": ["a100"]}]})
    )
    strategy = cq.spec.admission_checks_strategy  # type: ignore[union-attr]
    assert strategy is not None and strategy.admission_checks[0].on_flavors == ["a100"]


def _states(*states: CheckState) -> list[CheckState]:
    return list(states)


VERDICTS: list[tuple[list[CheckState], str, str]] = [
    (_states("Ready", "Ready"), "Ready", "every check Ready admits"),
    (_states("Ready", "Pending"), "Waiting", "one check not answered holds the reservation"),
    (_states("Pending"), "Waiting", "nothing answered yet"),
    (_states("Ready", "Retry"), "Retry", "a Retry evicts even when the others are Ready"),
    (_states("Retry", "Rejected"), "Rejected", "a Rejected check wins over a Retry"),
    (_states("Rejected", "Pending"), "Rejected", "a rejection needs no other answer"),
    (_states(), "Ready", "no checks: admitted on quota (the watcher starts it at once)"),
]


@pytest.mark.parametrize(("states", "expected", "reason"), VERDICTS, ids=[v[2] for v in VERDICTS])
def test_verdict(states: list[CheckState], expected: str, reason: str) -> None:
    """Kueue's order: Rejected, then Retry, then all Ready, else wait."""
    assert verdict(states) == expected, reason


def _assignment(*flavors: str) -> FlavorAssignment:
    return FlavorAssignment(
        pod_set="main",
        count=1,
        flavors={f"r{i}": flavor for i, flavor in enumerate(flavors)},
        usage={f"r{i}": 1000 for i in range(len(flavors))},
    )


APPLICABLE: list[tuple[list[tuple[str, frozenset[str]]], tuple[str, ...], list[str], str]] = [
    ([("a", frozenset()), ("b", frozenset())], ("f",), ["a", "b"], "plain checks apply always"),
    ([("gpu", frozenset({"a100"}))], ("cpu",), [], "onFlavors: another flavor is not checked"),
    ([("gpu", frozenset({"a100"}))], ("cpu", "a100"), ["gpu"], "one listed flavor is enough"),
    ([("z", frozenset()), ("a", frozenset())], ("f",), ["a", "z"], "sorted by name, as Kueue"),
]


@pytest.mark.parametrize(
    ("rules", "flavors", "expected", "reason"), APPLICABLE, ids=[a[3] for a in APPLICABLE]
)
def test_applicable_checks(
    rules: list[tuple[str, frozenset[str]]],
    flavors: tuple[str, ...],
    expected: list[str],
    reason: str,
) -> None:
    """Kueue's AdmissionChecksForWorkload: onFlavors against the assigned flavors."""
    assert applicable_checks(rules, [_assignment(*flavors)]) == expected, reason


def _stored(name: str, active: str | None = None) -> AdmissionCheck:
    document = _check(name)
    if active is not None:
        document["status"] = {"conditions": [{"type": "Active", "status": active}]}
    obj = parse_object(document)
    assert isinstance(obj, AdmissionCheck)
    return obj


PROBLEMS: list[tuple[list[str], dict[str, AdmissionCheck], str | None, str]] = [
    (["a"], {"a": _stored("a")}, None, "an existing check: the queue is active"),
    (["a", "b"], {"a": _stored("a")}, "AdmissionCheckNotFound", "a missing check"),
    (["a"], {"a": _stored("a", "False")}, "AdmissionCheckInactive", "Active=False applied"),
    (["a"], {"a": _stored("a", "True")}, None, "Active=True"),
    ([], {}, None, "no checks"),
]


@pytest.mark.parametrize(
    ("names", "checks", "reason", "why"), PROBLEMS, ids=[p[3] for p in PROBLEMS]
)
def test_check_problem(
    names: list[str], checks: dict[str, AdmissionCheck], reason: str | None, why: str
) -> None:
    """A ClusterQueue whose check is missing or inactive is inactive, with Kueue's reason."""
    found = check_problem([(n, frozenset()) for n in names], checks)
    assert (found[0] if found else None) == reason, why


DELAYS: list[tuple[int | None, int, float, str]] = [
    (30, 5, 30.0, "the answer's requeueAfterSeconds wins (KEP-3258)"),
    (None, 1, 10.0, "first retry: the base"),
    (None, 3, 40.0, "third retry: base * 2^2"),
    (None, 10, 100.0, "capped at backoffMaxSeconds"),
]


@pytest.mark.parametrize(
    ("after", "retries", "expected", "why"), DELAYS, ids=[d[3] for d in DELAYS]
)
def test_retry_delay(after: int | None, retries: int, expected: float, why: str) -> None:
    """How long a Retry-evicted workload waits (draw 0: no jitter)."""
    strategy = RequeuingStrategy(backoff_base_seconds=10, backoff_max_seconds=100)
    got = retry_delay(requeue_after_seconds=after, retries=retries, strategy=strategy, draw=0.0)
    assert got == expected, why


REF = WorkloadRef("default", "job", "uid-1")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _reserved(generation: int = 1) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        id=f"reserved-uid-1-{generation}",
        source="admission",
        workload=REF,
        cluster_queue="cq",
        local_queue="lq",
        priority=0,
        assignments=[_assignment("f")],
        generation=generation,
        admission_checks=["a", "b"],
        reserved_only=True,
        time=T0,
    )


def _answer(check: str, state: CheckState, generation: int = 1) -> AdmissionCheckUpdated:
    return AdmissionCheckUpdated(
        source="cli", workload=REF, check=check, state=state, generation=generation, time=T0
    )


def test_the_gate_admits_once_every_check_is_ready() -> None:
    """One Ready is not enough; the second admits the same generation, once."""
    gate = CheckGate()
    gate.apply(_reserved())
    gate.apply(_answer("a", "Ready"))
    assert gate.decide(0.0) == []
    gate.apply(_answer("b", "Ready"))
    decisions = gate.decide(0.0)
    assert [(v, type(e).__name__) for v, e in decisions] == [("Ready", "WorkloadAdmitted")]
    admitted = decisions[0][1]
    assert isinstance(admitted, WorkloadAdmitted)
    assert not admitted.reserved_only and admitted.generation == 1
    assert gate.decide(0.0) == [], "decided once"
    gate.apply(admitted)  # its echo
    assert REF.uid not in gate.waiting


IGNORED: list[tuple[AdmissionCheckUpdated, str, str]] = [
    (_answer("c", "Ready"), "checks are", "a check the reservation does not have"),
    (_answer("a", "Ready", generation=2), "current one is 1", "an answer to another reservation"),
]


@pytest.mark.parametrize(("answer", "why", "reason"), IGNORED, ids=[i[2] for i in IGNORED])
def test_answers_the_gate_does_not_take(
    answer: AdmissionCheckUpdated, why: str, reason: str
) -> None:
    """A stray answer changes nothing and says why (admission logs it)."""
    gate = CheckGate()
    gate.apply(_reserved())
    said = gate.apply(answer)
    assert said is not None and why in said, reason
    assert {n: s.state for n, s in gate.states[REF.uid].items()} == {"a": "Pending", "b": "Pending"}


def test_retry_evicts_with_a_backoff_and_a_new_reservation_starts_pending() -> None:
    """Retry: an eviction (reason AdmissionCheck) not queued before its requeue time; the
    next reservation's checks start Pending again, and the retry was counted."""
    gate = CheckGate()
    gate.apply(_reserved())
    gate.apply(_answer("a", "Retry"))
    [(found, event)] = gate.decide(100.0)
    assert found == "Retry" and isinstance(event, EvictionRequested)
    assert event.reason == "AdmissionCheck" and not event.deactivated
    assert event.requeue_at is not None and event.requeue_at.timestamp() >= 160.0  # base 60
    gate.apply(event)
    gate.apply(WorkloadEvicted(source="watcher", workload=REF, generation=1, reason="x"))
    assert gate.retries[REF.uid] == {"a": 1}
    gate.apply(_reserved(generation=2))
    assert {s.state for s in gate.states[REF.uid].values()} == {"Pending"}


def test_rejected_deactivates_naming_the_check() -> None:
    """Rejected: an eviction that deactivates, its message naming the check and why."""
    gate = CheckGate()
    gate.apply(_reserved())
    gate.apply(
        AdmissionCheckUpdated(
            source="cli", workload=REF, check="b", state="Rejected", message="no budget", time=T0
        )
    )
    [(found, event)] = gate.decide(0.0)
    assert found == "Rejected" and isinstance(event, EvictionRequested) and event.deactivated
    assert '"b" (no budget)' in event.message


def _queue_with(*checks: str) -> Any:
    return parse_object(_cq(admissionChecks=list(checks)))


SYNCED: list[tuple[tuple[str, ...], dict[str, str], list[str], str]] = [
    (("a", "b"), {"a": "Pending", "b": "Pending"}, [], "the same checks: nothing changes"),
    (("a",), {"a": "Pending"}, [], "a check removed from the queue no longer counts"),
    (("a", "b", "c"), {"a": "Pending", "b": "Pending", "c": "Pending"}, [], "one added: Pending"),
    ((), {}, ["Ready"], "no checks left: the reservation is admitted"),
]


@pytest.mark.parametrize(("checks", "states", "decided", "why"), SYNCED, ids=[s[3] for s in SYNCED])
def test_a_waiting_reservation_follows_its_queues_checks(
    checks: tuple[str, ...], states: dict[str, str], decided: list[str], why: str
) -> None:
    """Kueue's reconcileSyncAdmissionChecks, on a config change."""
    gate = CheckGate()
    gate.apply(_reserved())
    gate.set_config([_queue_with(*checks)])
    assert {n: s.state for n, s in gate.states[REF.uid].items()} == states, why
    assert [verdict for verdict, _ in gate.decide(0.0)] == decided, why


def test_a_zero_recovery_timeout_is_accepted() -> None:
    """recoveryTimeout 0s turns recovery timeouts off, as in Kueue: accepted, not refused."""
    configuration = parse_object(_configuration(enable=True, recoveryTimeout="0s"))
    assert isinstance(configuration, Configuration)
    settings = configuration.spec.wait_for_pods_ready
    assert settings is not None and settings.recovery_timeout == "0s"

"""Admission fair sharing's configuration (shared.config_fairness): accepted and refused."""

from __future__ import annotations

from typing import Any

import pytest

from shared.config import ClusterQueue, ConfigError, Configuration, LocalQueue, parse_object

BERTH = "berth.dev/v1alpha1"


def _configuration(afs: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": BERTH,
        "kind": "Configuration",
        "metadata": {"name": "berth"},
        "spec": {"admissionFairSharing": afs},
    }


def _local_queue(weight: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": "team"},
        "spec": {"clusterQueue": "cq", "fairSharing": {"weight": weight}},
    }


def _cluster_queue(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": spec,
    }


REFUSED = [
    ("a negative LocalQueue weight", _local_queue(-1), "`spec.fairSharing.weight`: quantity"),
    ("a LocalQueue weight that is no quantity", _local_queue("heavy"), "`spec.fairSharing.weight`"),
    (
        "a negative ClusterQueue weight",
        _cluster_queue(fairSharing={"weight": "-2"}),
        "`spec.fairSharing.weight`: quantity '-2' is negative",
    ),
    (
        "an admission mode Kueue does not have",
        _cluster_queue(admissionScope={"admissionMode": "Fair"}),
        "`$.spec.admissionScope.admissionMode`",
    ),
    (
        "a half-life that is no duration",
        _configuration({"usageHalfLifeTime": "a week"}),
        "`spec.admissionFairSharing.usageHalfLifeTime`: invalid duration 'a week'",
    ),
    (
        "no half-life: Kueue requires one",
        _configuration({"usageSamplingInterval": "1m"}),
        "missing required field `usageHalfLifeTime`",
    ),
    (
        "a sampling interval of 0 would sample without end",
        _configuration({"usageHalfLifeTime": "1h", "usageSamplingInterval": "0s"}),
        "`spec.admissionFairSharing.usageSamplingInterval` must be more than 0",
    ),
    (
        "a negative resource weight",
        _configuration({"usageHalfLifeTime": "1h", "resourceWeights": {"cpu": -1}}),
        "`spec.admissionFairSharing.resourceWeights.cpu` must not be negative",
    ),
]


@pytest.mark.parametrize(("why", "document", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_bad_fairness_settings_are_refused_naming_the_field(
    why: str, document: dict[str, Any], message: str
) -> None:
    """A bad value is refused at apply with one line naming the field."""
    with pytest.raises(ConfigError) as caught:
        parse_object(document, where="x.yaml: document 1")
    text = str(caught.value)
    assert message in text, why
    assert text.startswith("x.yaml: document 1") and "\n" not in text


def test_good_settings_parse_with_kueue_defaults() -> None:
    """Kueue's example values parse; the sampling interval defaults to 5 minutes."""
    configuration = parse_object(
        _configuration({"usageHalfLifeTime": "168h", "resourceWeights": {"cpu": 2.5}})
    )
    assert isinstance(configuration, Configuration)
    settings = configuration.spec.admission_fair_sharing
    assert settings is not None
    assert (settings.half_life, settings.sampling_interval) == (168 * 3600, 300)
    assert settings.resource_weights == {"cpu": 2.5}
    queue = parse_object(_cluster_queue(admissionScope={"admissionMode": "NoAdmissionFairSharing"}))
    assert isinstance(queue, ClusterQueue) and queue.spec.admission_scope is not None
    assert queue.spec.admission_scope.admission_mode == "NoAdmissionFairSharing"
    local_queue = parse_object(_local_queue(0))
    assert isinstance(local_queue, LocalQueue) and local_queue.spec.fair_sharing is not None

"""Admission's kept metric children (services/admission/labelled.py): the same series as
``labels()`` every time, and asked of the metric again once their queue is forgotten."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from services.admission import metrics
from services.admission.labelled import Children
from tests.labelled_samples import _names


def _counter() -> Counter:
    return Counter(
        f"kept_{next(_names)}", "a test counter", ["queue"], registry=CollectorRegistry()
    )


# (first call's values, second call's values, same metric, the same child expected, why)
KEEP_CASES = [
    (("a",), ("a",), True, True, "same metric and values: the kept child"),
    (("a",), ("b",), True, False, "changed values: another series, not the kept child"),
    (("a",), ("a",), False, False, "another metric with the same values: its own child"),
]


@pytest.mark.parametrize(
    ("first", "second", "same_metric", "same_child", "reason"),
    KEEP_CASES,
    ids=[c[4] for c in KEEP_CASES],
)
def test_kept_child(
    first: tuple[str, ...],
    second: tuple[str, ...],
    same_metric: bool,
    same_child: bool,
    reason: str,
) -> None:
    """A child is reused only for the same metric and the same label values."""
    kept = Children()
    one = _counter()
    other = one if same_metric else _counter()
    a, b = kept.of(one, *first), kept.of(other, *second)
    assert (a is b) == same_child, reason
    assert a is one.labels(*first) and b is other.labels(*second), reason


# (series the metric dropped, queues forgotten, the count the metric serves after, why)
FORGET_CASES = [
    (False, set(), 2.0, "nothing dropped or forgotten: the kept child counts on"),
    (True, {"a"}, 1.0, "queue deleted: forgotten, so the new series gets the count"),
    (
        True,
        {"b"},
        None,
        "another queue forgotten: the kept child is used, the dropped series not made again",
    ),
]


@pytest.mark.parametrize(
    ("dropped", "forgotten", "served", "reason"), FORGET_CASES, ids=[c[3] for c in FORGET_CASES]
)
def test_forget(dropped: bool, forgotten: set[str], served: float | None, reason: str) -> None:
    """After ``forget``, a child is asked of the metric again (here the metric had dropped
    its series, which only a fresh ``labels()`` brings back); others stay kept."""
    kept, counter = Children(), _counter()
    kept.of(counter, "a").inc()
    if dropped:
        counter.remove("a")
    kept.forget(lambda metric, values: metric is counter and values[0] in forgotten)
    kept.of(counter, "a").inc()
    samples = {
        s.labels["queue"]: s.value
        for m in counter.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert samples.get("a") == served, reason
    assert len(kept) == 1, reason


def _value(sample: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(sample, labels) or 0.0


def test_metrics_count_what_labels_counted() -> None:
    """Admission's counting functions serve the series and values ``labels()`` gave them:
    per ClusterQueue, per LocalQueue (name, namespace), one bucket per observation."""
    cq, lq, ns = "kept-cq", "kept-lq", "kept-ns"
    for waited in (0.2, 3.0):
        metrics.admitted(cluster_queue=cq, namespace=ns, local_queue=lq, waited=waited, late=True)
    metrics.admitted(
        cluster_queue=cq, namespace=ns, local_queue=lq, waited=1.0, late=False, reserved_only=True
    )
    metrics.pods_ready(cluster_queue=cq, namespace=ns, local_queue=lq, waited=4, since_admitted=1)
    metrics.evicted(cluster_queue=cq, namespace=ns, local_queue=lq, reason="Preempted")
    by_cq, by_lq = {"cluster_queue": cq}, {"name": lq, "namespace": ns}
    assert _value("berth_quota_reserved_workloads_total", **by_cq) == 3
    assert _value("berth_admitted_workloads_total", **by_cq) == 2
    assert _value("berth_local_queue_admitted_workloads_total", **by_lq) == 2
    assert _value("berth_admission_late_total", **by_cq) == 2
    assert _value("berth_admission_wait_time_seconds_bucket", **by_cq, le="0.25") == 1
    assert _value("berth_admission_wait_time_seconds_sum", **by_cq) == pytest.approx(3.2)
    # An admission counts its reservation too; a reservation alone is no admission.
    assert _value("berth_local_queue_quota_reserved_workloads_total", **by_lq) == 3
    assert _value("berth_quota_reserved_wait_time_seconds_sum", **by_cq) == pytest.approx(4.2)
    lq_reserved_wait = "berth_local_queue_quota_reserved_wait_time_seconds_sum"
    assert _value(lq_reserved_wait, **by_lq) == pytest.approx(4.2)
    lq_admission_wait = "berth_local_queue_admission_wait_time_seconds_sum"
    assert _value(lq_admission_wait, **by_lq) == pytest.approx(3.2)
    assert _value("berth_local_queue_ready_wait_time_seconds_count", **by_lq) == 1
    assert _value("berth_evicted_workloads_total", **by_cq, reason="Preempted") == 1
    assert _value("berth_local_queue_evicted_workloads_total", **by_lq, reason="Preempted") == 1


# (ClusterQueues kept, LocalQueues kept, children left of the 4 pods-ready ones, why)
QUEUE_CASES = [
    ({"fq-cq"}, {("fq-ns", "fq-lq")}, 4, "both queues exist: every child kept"),
    (set(), {("fq-ns", "fq-lq")}, 2, "ClusterQueue deleted: its two children dropped"),
    ({"fq-cq"}, set(), 2, "LocalQueue deleted: its two children dropped"),
    ({"fq-cq"}, {("other", "fq-lq")}, 2, "same name in another namespace is another queue"),
]


@pytest.mark.parametrize(
    ("cluster_queues", "local_queues", "left", "reason"),
    QUEUE_CASES,
    ids=[c[3] for c in QUEUE_CASES],
)
def test_forget_queues(
    cluster_queues: set[str], local_queues: set[tuple[str, str]], left: int, reason: str
) -> None:
    """forget_queues drops exactly the children labelled with a queue that is gone."""
    metrics.forget_queues(set(), set())  # start from no kept children of queues
    metrics.attempt(admitted_any=True, seconds=0.1)  # no queue label: never forgotten
    others = len(metrics._KEPT)
    metrics.pods_ready(
        cluster_queue="fq-cq", namespace="fq-ns", local_queue="fq-lq", waited=1, since_admitted=1
    )
    metrics.forget_queues(cluster_queues, local_queues)
    assert len(metrics._KEPT) == others + left, reason


def test_every_kept_queue_metric_is_forgettable() -> None:
    """Each labelled metric counted per queue is in one of forget_queues' sets."""
    queue_labels = {"cluster_queue", "name"}
    for metric in vars(metrics).values():
        if isinstance(metric, Counter | Histogram) and queue_labels & set(metric._labelnames):
            assert metric in metrics._BY_CLUSTER_QUEUE | metrics._BY_LOCAL_QUEUE, metric


# (second call's label values, forget between the calls, second call by another maker, the
# group made again, why)
GROUP_CASES = [
    (("a",), False, False, False, "same maker and values: the kept group, not made again"),
    (("b",), False, False, True, "changed values: another group"),
    (("a",), True, False, True, "a forget between: made again (its children may be gone)"),
    (("a",), False, True, True, "another maker, same values: its own group (other series)"),
]


@pytest.mark.parametrize(
    ("second", "forget", "other_maker", "made_again", "reason"),
    GROUP_CASES,
    ids=[c[4] for c in GROUP_CASES],
)
def test_group(
    second: tuple[str, ...], forget: bool, other_maker: bool, made_again: bool, reason: str
) -> None:
    """A group is kept by its maker and arguments, holds the children ``of`` gives, and is
    dropped by any ``forget``."""
    kept, counter = Children(), _counter()
    made: list[tuple[str, ...]] = []

    def make(*values: str) -> tuple[Counter]:
        made.append(values)
        return (kept.of(counter, *values),)

    def other(*values: str) -> tuple[Counter]:
        return make(*values)

    first = kept.group(make, "a")
    if forget:
        kept.forget(lambda metric, values: False)
    again = kept.group(other if other_maker else make, *second)
    assert made == [("a",), second] if made_again else [("a",)], reason
    assert (again is first) != made_again, reason
    assert again[0] is counter.labels(*second), reason


def test_counts_of_a_forgotten_queue_still_reach_its_series() -> None:
    """A tally whose queue is forgotten (its group dropped) with counts not yet on its
    children: the next read shows them all."""
    by_lq = {"name": "gone-lq", "namespace": "gone-ns"}
    before = _value("berth_local_queue_admitted_workloads_total", **by_lq)
    for _ in range(3):
        metrics.admitted(
            cluster_queue="gone-cq",
            namespace="gone-ns",
            local_queue="gone-lq",
            waited=0.3,
            late=False,
        )
    metrics.forget_queues(set(), set())
    assert _value("berth_local_queue_admitted_workloads_total", **by_lq) == before + 3
    count = _value("berth_local_queue_admission_wait_time_seconds_count", **by_lq)
    assert count == before + 3, "the wait histogram's count too (one workload each)"

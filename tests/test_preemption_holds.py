"""The room a preemption in flight holds in preemption's quota tree (services/preemption/holds.py).

Each case folds a script of events into a Cluster and checks, after every step, that the
incrementally kept tree equals the tree built from scratch with every hold applied (the rule
as the service applied it around each search before holds were kept), then the ClusterQueues'
usage it expects, then that a restarted service (a fresh Cluster replaying the same stream,
config first or last) holds exactly the same.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from services.preemption.cluster import Cluster
from services.preemption.deciding import decide
from shared.config import ConfigObject
from shared.events import (
    AnyEvent,
    ContestedResource,
    EvictionRequested,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
)
from shared.quota import QuotaTree
from tests.victims_search import cq

CPU = ("rf", "cpu")


def _config(*extra: str) -> list[ConfigObject]:
    """Cohort a (a1, a2), cohort b (b1), and ``extra`` ClusterQueues alone; 4 CPU each."""
    queues = [("a1", "a"), ("a2", "a"), ("b1", "b"), *((name, "") for name in extra)]
    return [
        cq(name, {"rf/cpu": 4}, cohort=cohort, within="LowerPriority", reclaim="Any")
        for name, cohort in queues
    ]


CONFIG = _config()


def ref(name: str) -> WorkloadRef:
    return WorkloadRef("default", name, name)


def admit(name: str, queue: str, cpus: int, generation: int = 1, priority: int = 0) -> AnyEvent:
    return WorkloadAdmitted(
        source="admission",
        workload=ref(name),
        cluster_queue=queue,
        local_queue="lq",
        priority=priority,
        assignments=[FlavorAssignment("main", 1, {"cpu": "rf"}, {"cpu": cpus * 1000})],
        generation=generation,
    )


def ask(name: str, queue: str, cpus: int, priority: int = 100) -> AnyEvent:
    return WorkloadPending(
        source="admission",
        workload=ref(name),
        cluster_queue=queue,
        reason="Pending",
        message="insufficient unused quota",
        priority=priority,
        preemption_may_help=True,
        contested=[ContestedResource("rf", "cpu", cpus * 1000)],
    )


def evict(victim: str, queue: str, preemptor: str, generation: int = 1) -> AnyEvent:
    return EvictionRequested(
        source="preemption",
        workload=ref(victim),
        cluster_queue=queue,
        generation=generation,
        reason="Preempted",
        preemptor=ref(preemptor),
    )


def evicted(name: str, generation: int = 1) -> AnyEvent:
    return WorkloadEvicted(
        source="watcher", workload=ref(name), generation=generation, reason="Preempted"
    )


def finished(name: str, generation: int = 1) -> AnyEvent:
    return WorkloadFinished(
        source="watcher", workload=ref(name), generation=generation, succeeded=True
    )


def deleted(name: str) -> AnyEvent:
    return WorkloadDeleted(source="watcher", workload=ref(name))


@dataclass(frozen=True)
class NewConfig:
    """A step that changes the config (the tree is rebuilt)."""

    objects: list[ConfigObject]


Step = AnyEvent | NewConfig

# Two victims of 2 CPU fill a1; p (in a1) needs 3.
FULL_A1: list[Step] = [admit("v1", "a1", 2), admit("v2", "a1", 2), ask("p", "a1", 3)]

CASES: list[tuple[str, list[Step], dict[str, int]]] = [
    (
        "ordered: its victim counts as gone (4 - 2) and the preemptor's needs as used (+ 3)",
        [*FULL_A1, evict("v1", "a1", "p")],
        {"a1": 5},
    ),
    (
        "a redelivered or echoed request holds once",
        [*FULL_A1, evict("v1", "a1", "p"), evict("v1", "a1", "p")],
        {"a1": 5},
    ),
    (
        "a victim that left stops holding; the other victim and the needs still hold",
        [*FULL_A1, evict("v1", "a1", "p"), evict("v2", "a1", "p"), evicted("v1")],
        {"a1": 2 - 2 + 3},
    ),
    (
        "the last victim gone: the flight ends and nothing is held",
        [*FULL_A1, evict("v1", "a1", "p"), evict("v2", "a1", "p"), evicted("v1"), evicted("v2")],
        {"a1": 0},
    ),
    (
        "a victim that finished on its own stops holding like an evicted one",
        [*FULL_A1, evict("v1", "a1", "p"), finished("v1")],
        {"a1": 2},
    ),
    (
        "the preemptor admitted while a victim still leaves: its hold ends at once",
        [
            *FULL_A1,
            evict("v1", "a1", "p"),
            evict("v2", "a1", "p"),
            evicted("v1"),
            admit("p", "a1", 3),
        ],
        {"a1": 2 + 3},
    ),
    (
        "the preemptor deleted: its hold ends (the order is abandoned)",
        [*FULL_A1, evict("v1", "a1", "p"), deleted("p")],
        {"a1": 4},
    ),
    (
        "a victim admitted again (a new generation) leaves its flight",
        [*FULL_A1, evict("v1", "a1", "p"), admit("v1", "a1", 2, generation=2)],
        {"a1": 4},
    ),
    (
        "an eviction of the victim's earlier generation changes nothing",
        [*FULL_A1, evict("v1", "a1", "p"), evicted("v1", generation=0)],
        {"a1": 5},
    ),
    (
        "a request for a workload not running holds nothing",
        [*FULL_A1, evict("ghost", "a1", "p")],
        {"a1": 4},
    ),
    (
        "a preemptor whose request predates the replay holds its victims, not its needs",
        [admit("v1", "a1", 2), admit("v2", "a1", 2), evict("v1", "a1", "p")],
        {"a1": 2},
    ),
    (
        "a hold stays in its cohort: b1's usage and cohort b's do not move",
        [*FULL_A1, admit("w", "b1", 3), evict("v1", "a1", "p")],
        {"a1": 5, "b1": 3},
    ),
    (
        "the preemptor's needs go to its own ClusterQueue, the victim's room from the other's",
        [admit("v1", "a2", 4), ask("p", "a1", 2), evict("v1", "a2", "p")],
        {"a1": 2, "a2": 0},
    ),
    (
        "a victim asked for by a second preemptor holds for that one only",
        [*FULL_A1, ask("q", "a2", 1), evict("v1", "a1", "p"), evict("v1", "a1", "q")],
        {"a1": 2, "a2": 1},
    ),
    (
        "a config change rebuilds the tree with every hold applied again",
        [*FULL_A1, evict("v1", "a1", "p"), NewConfig(_config("solo"))],
        {"a1": 5, "solo": 0},
    ),
    (
        "a ClusterQueue the config no longer knows holds nothing; known again, it holds again",
        [
            admit("v1", "solo", 2),
            ask("p", "solo", 3),
            NewConfig(_config("solo")),
            evict("v1", "solo", "p"),
            NewConfig(CONFIG),
            NewConfig(_config("solo")),
        ],
        {"solo": 3},
    ),
]


def _usage(tree: QuotaTree) -> dict[str, int]:
    nodes = [*tree.cluster_queues.items(), *(("cohort/" + n, v) for n, v in tree.cohorts.items())]
    return {name: node.usage.get(CPU, 0) for name, node in nodes}


def from_scratch(cluster: Cluster) -> dict[str, int]:
    """The tree as the service used to build it around every search: the real usage, then
    each flight's running victims taken out and its known preemptor's needs put in."""
    tree = QuotaTree.build(cluster.cluster_queues.values(), cluster.cohorts)
    for w in cluster.running.values():
        tree.add_usage(w.cluster_queue, w.usage)
    for flight in cluster.in_flight.values():
        for victim in flight.victims:
            leaving = cluster.running.get(victim)
            if leaving is not None:
                tree.remove_usage(leaving.cluster_queue, leaving.usage)
        if flight.preemptor is not None:
            tree.add_usage(flight.preemptor.cluster_queue, flight.preemptor.needs)
    return _usage(tree)


def fold(steps: list[Step], *, config_last: bool = False, check: bool = True) -> Cluster:
    cluster = Cluster()
    if not config_last:
        cluster.set_config(CONFIG)
    for step in steps:
        if isinstance(step, NewConfig):
            cluster.set_config(step.objects)
        else:
            cluster.apply(step)
        if check:
            assert _usage(cluster.tree) == from_scratch(cluster), step
    if config_last:
        cluster.set_config(CONFIG if not steps else _last_config(steps))
    return cluster


def _last_config(steps: list[Step]) -> list[ConfigObject]:
    configs = [s.objects for s in steps if isinstance(s, NewConfig)]
    return configs[-1] if configs else CONFIG


@pytest.mark.parametrize(
    ("steps", "expected"), [(s, e) for _, s, e in CASES], ids=[c[0] for c in CASES]
)
def test_holds(steps: list[Step], expected: dict[str, int]) -> None:
    cluster = fold(steps)
    usage = _usage(cluster.tree)
    assert {q: usage[q] // 1000 for q in expected} == expected
    # A restart: a fresh service replays the same stream (config read first, as run() does),
    # or gets its config only after the events: the same holds, the same tree.
    for restarted in (fold(steps, check=False), fold(steps, config_last=True, check=False)):
        assert restarted.holds.applied == cluster.holds.applied
        assert _usage(restarted.tree) == usage


def test_a_second_preemptor_does_not_count_on_room_held_for_the_first() -> None:
    """b1 is its cohort's only ClusterQueue (no room to borrow). p's victim v1 is leaving: its
    2 CPU are p's. q (same priority, needs 2) must take its
    own victim, v2, instead of being told it fits; and once p has its room and v1 is gone,
    the room q was promised stays q's."""
    low = [admit("v1", "b1", 2), admit("v2", "b1", 2)]
    cluster = fold([*low, ask("p", "b1", 2), evict("v1", "b1", "p"), ask("q", "b1", 2)])
    decision = decide(cluster, "q", wall=1e10)
    assert [v.workload.ref.name for v in decision.victims] == ["v2"]
    assert decide(cluster, "p", wall=1e10).victims == ()  # busy: its victim is leaving
    for event in (evict("v2", "b1", "q"), evicted("v1"), admit("p", "b1", 2)):
        cluster.apply(event)
    assert _usage(cluster.tree)["b1"] == 4000  # p 2 + (v2 2 - 2 held + q's 2 held)
    assert _usage(cluster.tree) == from_scratch(cluster)


def test_random_streams_keep_the_tree_equal_to_the_rule() -> None:
    """Seeded random streams of admissions, requests, evictions and ends, with redeliveries,
    stale generations and config changes: after every event the kept tree is the tree built
    from scratch, and a restarted fold holds the same."""
    rng = random.Random(20)
    names = [f"w{i}" for i in range(12)]
    queues = ["a1", "a2", "b1"]
    for _ in range(20):
        steps: list[Step] = []
        generation = dict.fromkeys(names, 0)
        for _ in range(120):
            name = rng.choice(names)
            roll = rng.random()
            if roll < 0.25:
                generation[name] += 1
                steps.append(admit(name, rng.choice(queues), rng.randint(1, 3), generation[name]))
            elif roll < 0.4:
                steps.append(ask(name, rng.choice(queues), rng.randint(1, 4)))
            elif roll < 0.65:
                steps.append(evict(name, rng.choice(queues), rng.choice(names), generation[name]))
            elif roll < 0.8:
                steps.append(evicted(name, rng.choice([generation[name], generation[name] - 1])))
            elif roll < 0.9:
                steps.append(finished(name, generation[name]))
            elif roll < 0.97:
                steps.append(deleted(name))
            else:
                steps.append(NewConfig(rng.choice([CONFIG, _config("solo"), CONFIG[:2]])))
        cluster = fold(steps)
        restarted = fold(steps, check=False)
        assert restarted.holds.applied == cluster.holds.applied
        assert _usage(restarted.tree) == _usage(cluster.tree)

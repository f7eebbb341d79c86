"""The victim search (services.preemption.victims) on the seed scenarios' own queues."""

from __future__ import annotations

from pathlib import Path

from shared.config import ClusterQueue, load_documents, parse_object
from tests.victims_search import cq, run, search, victims_of, wants

FIXTURES = Path(__file__).parent / "fixtures"


def _fixture_queues(name: str) -> list[ClusterQueue]:
    text = (FIXTURES / name).read_text()
    objects = [parse_object(doc) for doc in load_documents(text, source=name)]
    return [obj for obj in objects if isinstance(obj, ClusterQueue)]


def test_seed004_team_a_reclaims_while_borrowing() -> None:
    """Seed 004: team A's prod job (7 cpu + 2 gpu) evicts team B's borrowed dev job."""
    queues = _fixture_queues("seed004-kueue-resources.yaml")
    team_b = run("team-b-job", "team-b-cq", 100, {"default-flavor/cpu": 5})
    preemptor = wants("team-a-cq", 1000, {"default-flavor/cpu": 7, "gpu-flavor/nvidia.com/gpu": 2})
    result = search(queues, [team_b], preemptor)
    assert victims_of(result) == {"team-b-job": "InCohortReclaimWhileBorrowing"}


def test_seed003_prod_preempts_dev() -> None:
    """Seed 003: prod (1000) preempts dev (100) in the same ClusterQueue."""
    queues = _fixture_queues("seed003-kueue-resources.yaml")
    usage = {
        "default-flavor/cpu": 1,
        "default-flavor/memory": 1,
        "default-flavor/nvidia.com/gpu": 1,
    }
    dev = run("dev", "cluster-queue", 100, usage)
    result = search(queues, [dev], wants("cluster-queue", 1000, usage))
    assert victims_of(result) == {"dev": "InClusterQueue"}


def test_seed002_high_preempts_low() -> None:
    """Seed 002: a 6-cpu high-priority job preempts the 6-cpu low one in a 9-cpu queue."""
    queues = [cq("cluster-queue", {"default-flavor/cpu": 9}, within="LowerPriority")]
    low = run("low", "cluster-queue", 100, {"default-flavor/cpu": 6})
    result = search(queues, [low], wants("cluster-queue", 1000, {"default-flavor/cpu": 6}))
    assert victims_of(result) == {"low": "InClusterQueue"}

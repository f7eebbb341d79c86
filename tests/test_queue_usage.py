"""shared.queue_usage.quota_usage: a ClusterQueue's quotas paired with their usage, as the CLI's
describe and the console's quota table read them; table-driven with the reason per case."""

from __future__ import annotations

from typing import Any

import pytest

from shared.queue_usage import quota_usage

CPU = {"name": "cpu", "nominalQuota": "4"}
GPU = {"name": "gpu", "nominalQuota": "1"}


def _queue(flavors: list[dict[str, Any]], used: list[dict[str, Any]] | None) -> dict[str, Any]:
    queue: dict[str, Any] = {"spec": {"resourceGroups": [{"flavors": flavors}]}}
    if used is not None:
        queue["status"] = {"flavorsUsage": used}
    return queue


CASES: list[tuple[str, dict[str, Any], list[tuple[str, dict[str, Any], dict[str, Any]]]]] = [
    (
        "usage is matched by flavor and resource, not by position",
        _queue(
            [{"name": "a", "resources": [CPU, GPU]}],
            [
                {
                    "name": "a",
                    "resources": [{"name": "gpu", "total": "1"}, {"name": "cpu", "total": "2"}],
                }
            ],
        ),
        [("a", CPU, {"name": "cpu", "total": "2"}), ("a", GPU, {"name": "gpu", "total": "1"})],
    ),
    (
        "the same resource of another flavor is another quota",
        _queue(
            [{"name": "a", "resources": [CPU]}, {"name": "b", "resources": [CPU]}],
            [{"name": "b", "resources": [{"name": "cpu", "total": "3"}]}],
        ),
        [("a", CPU, {}), ("b", CPU, {"name": "cpu", "total": "3"})],
    ),
    (
        "no status yet: every quota with no usage",
        _queue([{"name": "a", "resources": [CPU]}], None),
        [("a", CPU, {})],
    ),
    (
        "usage of a flavor the spec does not name is not a quota",
        _queue([], [{"name": "z", "resources": [{"name": "cpu", "total": "3"}]}]),
        [],
    ),
]


@pytest.mark.parametrize(("reason", "queue", "expected"), CASES, ids=[c[0] for c in CASES])
def test_quota_usage(reason: str, queue: dict[str, Any], expected: list[Any]) -> None:
    assert quota_usage(queue) == expected, reason

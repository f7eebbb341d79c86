"""`berth up`'s supervision rules, as pure functions: restart back-off and its reset, the
publish-retry rule a service follows during a NATS outage, and a cluster node's config."""

from __future__ import annotations

import secrets

import pytest

from berth_cli.natsserver import ClusterSettings
from berth_cli.supervision import Restarts, crash_streak, restart_delay
from shared.bus import PUBLISH_ATTEMPTS, keep_publishing

# (crashes in a row so far, seconds the last run lasted, expected delay, why)
DELAY_CASES = [
    (0, 0.5, 1.0, "a first crash is retried after a second"),
    (1, 0.5, 2.0, "crashing again at once doubles the wait"),
    (2, 3.0, 4.0, "and again"),
    (4, 10.0, 16.0, "fifth crash in a row: 16 s"),
    (5, 10.0, 30.0, "the wait is capped at 30 s"),
    (40, 1.0, 30.0, "a crash loop stays at the cap"),
    (40, 59.9, 30.0, "a run just short of a minute is not stable yet"),
    (40, 60.0, 1.0, "a minute without crashing starts again from 1 s"),
    (7, 3600.0, 1.0, "so does a crash after an hour's run"),
]

ROUTE_PASSWORD = secrets.token_hex(8)  # made per run, as berth up makes its own


@pytest.mark.parametrize(
    ("streak", "ran_for", "delay", "reason"), DELAY_CASES, ids=[c[3] for c in DELAY_CASES]
)
def test_restart_delay(streak: int, ran_for: float, delay: float, reason: str) -> None:
    assert restart_delay(crash_streak(streak, ran_for)) == delay, reason


# (crashes in a row so far, seconds the last run lasted, expected delay, why)
NATS_DELAY_CASES = [
    (0, 0.5, 0.0, "NATS comes back at once: every service waits for it"),
    (1, 0.5, 1.0, "but a second crash in a row waits a second"),
    (2, 0.5, 2.0, "then doubles"),
    (40, 1.0, 30.0, "up to the same cap"),
    (40, 60.0, 0.0, "and a stable minute resets it"),
]


@pytest.mark.parametrize(
    ("streak", "ran_for", "delay", "reason"),
    NATS_DELAY_CASES,
    ids=[c[3] for c in NATS_DELAY_CASES],
)
def test_restart_delay_of_nats(streak: int, ran_for: float, delay: float, reason: str) -> None:
    assert restart_delay(crash_streak(streak, ran_for), awaited=True) == delay, reason


def test_restarts_bookkeeping_resets_after_a_stable_run() -> None:
    """Five quick crashes back off to 16 s; a stable run then brings the next back to 1 s
    (before, every crash after the fifth in the stack's life waited 30 s)."""
    restarts = Restarts()
    now = 0.0
    delays = []
    for _ in range(5):
        restarts.started(now)
        now += 0.5
        delays.append(restarts.crashed(now))
        assert not restarts.due(now)
        now = restarts.due_at or now
        assert restarts.due(now)
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0]
    restarts.started(now)
    assert restarts.count == 5
    assert restarts.crashed(now + 61.0) == 1.0


# (attempt, outage, stopping, publish again?, why)
PUBLISH_CASES = [
    (1, False, False, True, "an unknown outcome is retried (same message id)"),
    (PUBLISH_ATTEMPTS - 1, False, False, True, "up to the limit"),
    (PUBLISH_ATTEMPTS, False, False, False, "NATS up but not answering: give up, get restarted"),
    (PUBLISH_ATTEMPTS, True, False, True, "NATS away: a service waits for it"),
    (10_000, True, False, True, "however long the outage"),
    (PUBLISH_ATTEMPTS, True, True, False, "unless it is stopping"),
    (1, True, True, True, "a stopping service still tries a few times"),
]


@pytest.mark.parametrize(
    ("attempt", "outage", "stopping", "again", "reason"),
    PUBLISH_CASES,
    ids=[c[4] for c in PUBLISH_CASES],
)
def test_keep_publishing(
    attempt: int, outage: bool, stopping: bool, again: bool, reason: str
) -> None:
    assert keep_publishing(attempt, outage=outage, stopping=stopping) is again, reason


def test_cluster_node_config_authenticates_routes() -> None:
    """Routes listen on loopback, require the password, and dial the peers with it."""
    config = ClusterSettings(
        name="berth", port=6001, routes=(6002, 6003), user="route", password=ROUTE_PASSWORD
    ).as_config("127.0.0.1")
    assert 'listen: "127.0.0.1:6001"' in config
    assert f'authorization {{ user: "route", password: "{ROUTE_PASSWORD}" }}' in config
    assert f'"nats-route://route:{ROUTE_PASSWORD}@127.0.0.1:6002"' in config
    assert f'"nats-route://route:{ROUTE_PASSWORD}@127.0.0.1:6003"' in config
    assert "@127.0.0.1:6001" not in config  # a node does not route to itself

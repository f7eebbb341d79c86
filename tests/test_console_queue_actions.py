"""The console's queue stop/resume: an aiohttp app in process whose bus connection is the
``console`` user's own, on a real nats-server that enforces the permissions (shared/auth.py).

What a stop writes is shared/queue_stop.py's rule (tests/test_stopping.py); here: the token
guards it, the console user may write a queue and nothing else of the config, and the form
maps to the rule. The end-to-end test (admission holds work, then admits it again) drives a
`berth up` stack through the console process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession

from berth_console.model import Model
from berth_console.pages.base import Context
from berth_console.pending import PendingCache
from berth_console.queries import Queries
from shared.auth import CredentialStore
from shared.bus import CONFIG_BUCKET, Bus, BusTimeout, NoResponders
from shared.config import (
    ClusterQueue,
    LocalQueue,
    decode_object,
    encode_object,
    object_key,
    parse_object,
)
from tests.conftest import connect_as
from tests.console_data import serving

TOKEN = "queue-operator-token"
CQ_KEY = "clusterqueue._.cq"
LQ_KEY = "localqueue.team-a.lq"
FLAVOR_KEY = "resourceflavor._.default-flavor"


@pytest.fixture
async def admin(secured_url: str, store: CredentialStore) -> AsyncIterator[Bus]:
    """An operator's connection that applied a flavor, a ClusterQueue and a LocalQueue."""
    bus = await connect_as(secured_url, store, "admin")
    kv = await bus.kv(CONFIG_BUCKET)
    for document in (
        {"kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
        {
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [{"name": "cpu", "nominalQuota": 4}],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "team-a"},
            "spec": {"clusterQueue": "cq"},
        },
    ):
        obj = parse_object({"apiVersion": "kueue.x-k8s.io/v1beta1", **document}, where="test")
        await kv.put(object_key(obj), encode_object(obj))
    try:
        yield bus
    finally:
        await bus.close()


@pytest.fixture
async def console(secured_url: str, store: CredentialStore, admin: Bus) -> AsyncIterator[str]:
    """The console's HTTP app, its bus connection made with the `console` seed."""
    bus = await connect_as(secured_url, store, "console")
    model = Model()
    model.set_queues(
        [{"metadata": {"name": "cq"}, "spec": {}}],
        [{"metadata": {"name": "lq", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}}],
    )
    context = Context(
        model=model, queries=Queries(bus), pending=PendingCache(None), actions_enabled=True
    )
    try:
        async with serving(context, TOKEN) as url:
            yield url
    finally:
        await bus.close()


async def _policy(bus: Bus, key: str) -> str:
    entry = await (await bus.kv(CONFIG_BUCKET)).get(key)
    assert entry.value is not None
    obj = decode_object(entry.value)
    assert isinstance(obj, ClusterQueue | LocalQueue)
    return obj.spec.stop_policy


async def _post(http: ClientSession, url: str, data: dict[str, str]) -> tuple[int, str, str]:
    """POST a form without following the redirect: (status, Location, body)."""
    async with http.post(url, data=data, allow_redirects=False) as response:
        return response.status, response.headers.get("Location", ""), await response.text()


REFUSED = [
    ({}, "no token at all"),
    ({"token": "guess"}, "a wrong token"),
    ({"token": TOKEN[:-1]}, "a token one character short"),
]


@pytest.mark.parametrize(("data", "reason"), REFUSED, ids=[c[1] for c in REFUSED])
async def test_a_queue_action_without_the_token_writes_nothing(
    console: str, admin: Bus, data: dict[str, str], reason: str
) -> None:
    """Refused with 403 and the queue's stored object untouched (its revision too)."""
    kv = await admin.kv(CONFIG_BUCKET)
    before = {key: (await kv.get(key)).revision for key in (CQ_KEY, LQ_KEY)}
    async with ClientSession() as http:
        for path in ("/cq/cq/stop", "/cq/cq/resume", "/lq/team-a/lq/stop"):
            status, _, body = await _post(http, console + path, data)
            assert status == 403, (reason, path)
            assert "token is missing or wrong" in body, reason
    assert {key: (await kv.get(key)).revision for key in (CQ_KEY, LQ_KEY)} == before, reason


# (path, form, key, policy stored, notice, why)
STEPS = [
    ("/cq/cq/stop", {}, CQ_KEY, "HoldAndDrain", "queue-drained", "stop drains, as kueuectl"),
    (
        "/cq/cq/stop",
        {},
        CQ_KEY,
        "HoldAndDrain",
        "queue-unchanged",
        "stopping twice changes nothing",
    ),
    (
        "/cq/cq/stop",
        {"keep_already_running": "on"},
        CQ_KEY,
        "Hold",
        "queue-held",
        "the ticked box keeps what runs (Hold)",
    ),
    ("/cq/cq/resume", {}, CQ_KEY, "None", "queue-resumed", "resume clears the policy"),
    (
        "/cq/cq/resume",
        {"keep_already_running": "on"},
        CQ_KEY,
        "None",
        "queue-unchanged",
        "resume ignores the box; the queue already runs",
    ),
    ("/lq/team-a/lq/stop", {}, LQ_KEY, "HoldAndDrain", "queue-drained", "a LocalQueue"),
    ("/lq/team-a/lq/resume", {}, LQ_KEY, "None", "queue-resumed", "and its resume"),
]


async def test_with_the_token_the_queue_is_stopped_and_resumed(console: str, admin: Bus) -> None:
    """Each step (see the reasons) stores kueuectl's policy through the console's own bus
    user and redirects to the ClusterQueue's page with a notice saying what happened."""
    async with ClientSession() as http:
        for path, form, key, policy, notice, reason in STEPS:
            status, location, _ = await _post(http, console + path, {"token": TOKEN, **form})
            assert status == 303, reason
            assert location == f"/cq/cq?notice={notice}", reason
            assert await _policy(admin, key) == policy, reason
        async with http.get(console + "/cq/cq?notice=queue-drained") as response:
            assert "nothing new is admitted" in await response.text()


async def test_bearer_token_and_unknown_queues(console: str, admin: Bus) -> None:
    """A script may send the token as a bearer header; a queue that is not there is a 404
    naming it, and nothing is created."""
    async with ClientSession() as http:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with http.post(
            console + "/cq/cq/stop", headers=bearer, allow_redirects=False
        ) as response:
            assert response.status == 303
        assert await _policy(admin, CQ_KEY) == "HoldAndDrain"
        for path, named in (
            ("/cq/missing/stop", "ClusterQueue missing not found"),
            ("/lq/other/lq/stop", "LocalQueue lq in namespace other not found"),
        ):
            status, _, body = await _post(http, console + path, {"token": TOKEN})
            assert (status, named in body) == (404, True), body
        kv = await admin.kv(CONFIG_BUCKET)
        assert [key async for key in _keys(kv)] == sorted([CQ_KEY, FLAVOR_KEY, LQ_KEY])


async def _keys(kv: object) -> AsyncIterator[str]:
    for key in sorted(await kv.keys()):  # type: ignore[attr-defined]
        yield key


async def test_the_console_user_writes_queues_and_nothing_else(
    secured_url: str, store: CredentialStore, admin: Bus
) -> None:
    """Through JetStream with the console's seed: a queue's update is stored, a flavor's is
    refused by the server (the rule the token guards is the only config it can touch)."""
    bus = await connect_as(secured_url, store, "console")
    try:
        kv = await bus.kv(CONFIG_BUCKET)
        entry = await kv.get(CQ_KEY)
        assert entry.value is not None
        await kv.update(CQ_KEY, entry.value, last=entry.revision)
        flavor = await kv.get(FLAVOR_KEY)
        assert flavor.value is not None
        # The server drops a publish it refuses: no stream answers (nats-py: a timeout).
        with pytest.raises((BusTimeout, NoResponders)):
            await kv.put(FLAVOR_KEY, flavor.value)
    finally:
        await bus.close()
    assert (await (await admin.kv(CONFIG_BUCKET)).get(FLAVOR_KEY)).revision == flavor.revision

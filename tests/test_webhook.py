"""The mutating admission webhook over real HTTP on loopback, and its TLS loading."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.watcher.kube.webhook import WebhookSettings, serve_webhook, tls_context
from tests.certificates import self_signed_certificate


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def url() -> AsyncIterator[str]:
    port = free_port()
    runner = await serve_webhook(WebhookSettings(host="127.0.0.1", port=port))
    yield f"http://127.0.0.1:{port}/mutate"
    await runner.cleanup()


async def review(url: str, obj: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "r1", "operation": "CREATE", "object": obj},
    }
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        assert response.status == 200
        result: dict[str, Any] = (await response.json())["response"]
    assert result["uid"] == "r1" and result["allowed"] is True
    return result


def operations(result: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in result:
        return []
    assert result["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(result["patch"]))
    return patch


LABELS = {"kueue.x-k8s.io/queue-name": "team-a"}


async def test_labelled_job_is_suspended(url: str) -> None:
    """A labelled Job created running is answered with a patch setting spec.suspend."""
    job = {"kind": "Job", "metadata": {"labels": LABELS}, "spec": {"suspend": False}}
    assert operations(await review(url, job)) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


async def test_labelled_pod_is_gated(url: str) -> None:
    """A labelled standalone Pod gets the admission gate, appended to existing gates."""
    pod = {
        "kind": "Pod",
        "metadata": {"labels": LABELS},
        "spec": {"schedulingGates": [{"name": "x"}]},
    }
    assert operations(await review(url, pod)) == [
        {
            "op": "add",
            "path": "/spec/schedulingGates/-",
            "value": {"name": "kueue.x-k8s.io/admission"},
        }
    ]
    bare = {"kind": "Pod", "metadata": {"labels": LABELS}, "spec": {}}
    assert operations(await review(url, bare))[0]["path"] == "/spec/schedulingGates"


async def test_unlabelled_and_owned_objects_are_untouched(url: str) -> None:
    """Objects without the queue label, and pods owned by a controller, are allowed as they are."""
    assert operations(await review(url, {"kind": "Job", "metadata": {}, "spec": {}})) == []
    owned = {
        "kind": "Pod",
        "metadata": {"labels": LABELS, "ownerReferences": [{"kind": "Job", "controller": True}]},
        "spec": {},
    }
    assert operations(await review(url, owned)) == []


async def test_malformed_review_is_a_400(url: str) -> None:
    """A body that is not an AdmissionReview is refused with 400."""
    async with aiohttp.ClientSession() as session, session.post(url, data=b"nope") as response:
        assert response.status == 400


def test_settings_from_environment() -> None:
    """Cert, key and port come from BERTH_WEBHOOK_*; the port defaults to 9443."""
    settings = WebhookSettings.from_environment(
        {"BERTH_WEBHOOK_CERT": "c", "BERTH_WEBHOOK_KEY": "k"}
    )
    assert (settings.cert, settings.key, settings.port, settings.tls_configured) == (
        "c",
        "k",
        9443,
        True,
    )
    assert not WebhookSettings.from_environment({}).tls_configured


async def test_tls_serves_with_a_self_signed_certificate(tmp_path: Path) -> None:
    """The TLS context loads a PEM pair and the webhook answers over HTTPS with it."""
    cert, key = map(str, self_signed_certificate(tmp_path, "localhost"))
    port = free_port()
    settings = WebhookSettings(cert=cert, key=key, host="127.0.0.1", port=port)
    runner = await serve_webhook(settings)
    try:
        client = ssl.create_default_context(cafile=cert)
        client.check_hostname = False
        body = {"request": {"uid": "t", "object": {"kind": "Job", "metadata": {}}}}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"https://127.0.0.1:{port}/mutate", json=body, ssl=client) as response,
        ):
            assert (await response.json())["response"]["uid"] == "t"
    finally:
        await runner.cleanup()


def test_bad_tls_files_fail_loudly(tmp_path: Path) -> None:
    """A missing certificate file is an error at start-up, not a silent plain-HTTP server."""
    with pytest.raises(OSError):
        tls_context(str(tmp_path / "missing.crt"), str(tmp_path / "missing.key"))

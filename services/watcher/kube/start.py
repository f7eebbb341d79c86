"""The watcher's cluster backend started: its settings read once, the webhook, then the backend
in the replica that leads."""

from __future__ import annotations

import os

from services.watcher.backend import Backend
from services.watcher.kube.api import KubeClient
from services.watcher.kube.backend import KubernetesBackend
from services.watcher.kube.settings import KubeSettings
from services.watcher.kube.webhook import WebhookSettings, serve_webhook
from shared.service import Runtime

__all__ = ["run_kubernetes"]


async def run_kubernetes(runtime: Runtime) -> None:
    """``BERTH_WATCHER_BACKEND=kubernetes``: the backend, and the webhook if TLS is configured."""
    settings = KubeSettings.from_environment(os.environ)  # the one read of the environment
    client = await KubeClient.from_environment()
    webhook_settings = WebhookSettings.from_environment(os.environ)
    runner = None
    try:
        if webhook_settings.tls_configured:
            runner = await serve_webhook(webhook_settings)
        # The webhook is stateless: every replica serves it (a ready standby is one of the
        # Service's endpoints). The backend runs only in the replica that leads.
        if not await runtime.stand_by():
            return
        backend: Backend = KubernetesBackend(
            runtime,
            client=client,
            status=settings.status,
            image=settings.image,
            namespaces=settings.namespaces,
        )
        await backend.observe()
    finally:
        if runner is not None:
            await runner.cleanup()
        await client.close()

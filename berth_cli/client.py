"""How the CLI reaches a running Berth: the NATS URL, the buckets and admission's read API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import click
import msgspec

from berth_cli.exit_codes import ExitCode
from shared.auth import ClientAuth
from shared.bus import API_SUBJECT, Bus, BusError, BusSettings, BusTimeout, NoResponders

__all__ = ["CliError", "connect", "one_workload", "query_all"]

T = TypeVar("T")


class CliError(click.ClickException):
    """A one-line error for the user; the CLI exits 1 (:attr:`ExitCode.ERROR`)."""

    exit_code = ExitCode.ERROR


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[Bus]:
    """A short-lived connection for one command, as the ``cli`` user whose seed the
    environment names (:meth:`ClientAuth.from_env`); a clear error if Berth is not running,
    or if a bus setting in the environment is malformed (named as such)."""
    try:
        settings = BusSettings.from_env()
    except ValueError as error:
        raise CliError(str(error)) from error
    try:
        bus = await Bus.connect(
            url,
            source="cli",
            retry=False,
            auth=ClientAuth.from_env("cli"),
            settings=settings,
        )
    except (BusError, ValueError) as error:
        raise CliError(
            f"{error} (is `berth up` running? set --nats-url or BERTH_NATS_URL)"
        ) from error
    try:
        yield bus
    finally:
        bus.closing = True
        await bus.nc.close()


async def query_all(bus: Bus, resource: str, **request: Any) -> list[dict[str, Any]]:
    """Ask admission for every item of a resource, page by page."""
    items: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        payload = msgspec.json.encode({**request, "offset": offset})
        try:
            reply = await bus.request(f"{API_SUBJECT}.admission.{resource}", payload, wait=5.0)
        except NoResponders as error:
            raise CliError("the admission service is not running (no responder)") from error
        except BusTimeout as error:
            raise CliError("the admission service did not answer within 5s") from error
        body = msgspec.json.decode(reply.data)
        if "error" in body:
            raise CliError(f"admission: {body['error']}")
        items.extend(body["items"])
        offset = body.get("next")
    return items


async def one_workload(bus: Bus, name: str, namespace: str) -> dict[str, Any]:
    """The workload ``namespace/name`` as admission shows it; a clear error if there is none."""
    items = await query_all(bus, "workloads", namespace=namespace, names=[f"{namespace}/{name}"])
    if not items:
        raise CliError(f'workload "{name}" not found in namespace "{namespace}"')
    return items[0]

"""How the CLI reaches a running Berth: the NATS URL, the buckets and admission's read API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import click
import msgspec

from berth_cli.exit_codes import ExitCode
from shared.auth import SEED_SUFFIX, ClientAuth, permissions_for
from shared.bus import (
    API_SUBJECT,
    Bus,
    BusError,
    BusSettings,
    BusTimeout,
    KeyNotFound,
    NoResponders,
    PermissionDenied,
)
from shared.bus.violations import RememberingClient
from shared.subjects import subject_matcher

__all__ = ["CliError", "connect", "denied_message", "key_exists", "one_workload", "query_all"]

T = TypeVar("T")


class CliError(click.ClickException):
    """A one-line error for the user; the CLI exits 1 (:attr:`ExitCode.ERROR`)."""

    exit_code = ExitCode.ERROR


class CliBus(Bus):
    """The CLI's bus: its client remembers the subjects it published, so that a refused one
    is named as it was sent (nats-py lowercases the server's error: shared/bus/violations.py)."""

    client_type = RememberingClient


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[Bus]:
    """A short-lived connection for one command, as the ``cli`` user whose seed the
    environment names (:meth:`ClientAuth.from_env`); a clear error if Berth is not running,
    if a bus setting in the environment is malformed (named as such), or at once when NATS
    refuses the credentials a permission the command needs (:func:`denied_message`)."""
    try:
        settings = BusSettings.from_env()
    except ValueError as error:
        raise CliError(str(error)) from error
    auth = ClientAuth.from_env("cli")
    try:
        bus = await CliBus.connect(url, source="cli", retry=False, auth=auth, settings=settings)
    except (BusError, ValueError) as error:
        raise CliError(
            f"{error} (is `berth up` running? set --nats-url or BERTH_NATS_URL)"
        ) from error
    try:
        async with bus.violations.interrupting():
            yield bus
    except PermissionDenied as error:
        raise CliError(denied_message(auth, error)) from None
    finally:
        bus.closing = True
        await bus.nc.close()


def denied_message(auth: ClientAuth, denied: PermissionDenied) -> str:
    """The line for an operation NATS refused the command's credentials: the credential file
    (and its user, by the file's name) and the subject refused; and, when the ``cli`` user
    may do what was refused, that the command needs its credentials (its seed beside the
    given one, if there is one there)."""
    if auth.seed is None:
        return f'a connection without credentials may not {denied.action} to "{denied.subject}"'
    user = f" (user {auth.user})" if auth.user is not None else ""
    line = f'the credentials {auth.seed}{user} may not {denied.action} to "{denied.subject}"'
    cli = permissions_for("cli")
    allowed = cli.publish if denied.action == "publish" else cli.subscribe
    if auth.user == "cli" or not subject_matcher(allowed)(denied.subject):
        return line
    line += ": this command needs the cli user's credentials"
    beside = auth.seed.with_name(f"cli{SEED_SUFFIX}")
    return f"{line} (BERTH_CREDS={beside})" if beside.is_file() else line


async def key_exists(kv: Any, key: str) -> bool:
    """Whether the bucket holds ``key`` (stored, and its last entry not a deletion)."""
    try:
        entry = await kv.get(key)
    except KeyNotFound:
        return False
    return entry.value is not None


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

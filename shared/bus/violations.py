"""What NATS refuses a connection: one publish or subscription outside its user's permissions,
on a connection it keeps open (:class:`Violations`); or the credentials themselves
(:func:`refused_credentials`, :func:`refusal`).

NATS answers an operation outside the user's permissions with an asynchronous ``-ERR
'Permissions Violation for Publish to "<subject>"'`` (or ``for Subscription to``) and keeps
the connection; nats-py hands it to the error callback, and to nothing else. A request whose
publish was refused simply never gets its reply: whoever awaits it waits out its timeout (and
any retries) and then reports a timeout. A caller that cannot do without its permissions (a
CLI command) awaits inside :meth:`Violations.interrupting` instead, and fails at once.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from nats.aio.client import Client

from shared.auth import SEED_SUFFIX, USERS, ClientAuth
from shared.bus.errors import PermissionDenied

__all__ = [
    "SENT_REMEMBERED",
    "RememberingClient",
    "Violation",
    "Violations",
    "refusal",
    "refused_credentials",
    "violation_in",
]

# nats-py's text for the server's -ERR, which its parser lowercases:
# 'nats: permissions violation for publish to "<subject>"', '... for subscription to
# "<subject>"' (a queue subscription's goes on: ' using queue "<queue>"'), or '... for
# publish with reply of "<subject>"' (a reply subject the user may not subscribe to).
_VIOLATION = re.compile(
    r'permissions violation for (publish|subscription) (?:to|with reply of) "([^"]*)"'
)
SENT_REMEMBERED = 256  # publishes remembered to name a refused subject as it was sent


@dataclass(frozen=True)
class Violation:
    """One operation NATS refused: ``publish`` or ``subscribe``, on ``subject``."""

    action: str
    subject: str


def violation_in(error: BaseException, sent: Iterable[str] = ()) -> Violation | None:
    """The violation nats-py's error reports, or None if it reports something else.

    nats-py lowercases the server's text and subjects are case-sensitive, so a refused
    publish is named by the newest subject in ``sent`` (the subjects published, oldest
    first) that differs only in case; a subscription's subject as nats-py gives it."""
    found = _VIOLATION.search(str(error))
    if found is None:
        return None
    action, subject = found.groups()
    if action == "subscription":
        return Violation("subscribe", subject)
    as_sent = next((s for s in reversed(list(sent)) if s.lower() == subject), subject)
    return Violation("publish", as_sent)


class RememberingClient(Client):
    """nats-py's client, remembering the last :data:`SENT_REMEMBERED` subjects it published
    to (requests and JetStream calls included: nats-py publishes them through here), so a
    refused one is named as it was sent (:func:`violation_in`)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: deque[str] = deque(maxlen=SENT_REMEMBERED)

    # Not a coroutine of its own: the publish path stays one coroutine deep, as nats-py's.
    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> Coroutine[Any, Any, None]:
        self.sent.append(subject)
        return super().publish(subject, payload, reply, headers)


class Violations:
    """One connection's permissions violations and the tasks each interrupts."""

    def __init__(self) -> None:
        # task awaiting inside interrupting() -> the violation that interrupted it, if any
        self._waiting: dict[asyncio.Task[Any], Violation | None] = {}

    def report(self, error: BaseException, sent: Iterable[str]) -> None:
        """Interrupt every task waiting inside :meth:`interrupting` if ``error`` (told to
        the connection's error callback) is a permissions violation."""
        violation = violation_in(error, sent)
        if violation is None:
            return
        for task, seen in self._waiting.items():
            if seen is None:
                self._waiting[task] = violation
                task.cancel()

    def interrupting(self) -> _Interrupting:
        """``async with bus.violations.interrupting():`` -- the rule: the first permissions
        violation NATS reports on this connection while the task is inside interrupts what it
        awaits, and the block raises :class:`PermissionDenied` naming the action and subject
        refused, instead of waiting for a reply that will never come. Only the tasks inside
        are interrupted (a service that meets a violation logs it and carries on); a
        cancellation from elsewhere (Ctrl-C) stays a cancellation."""
        return _Interrupting(self._waiting)


class _Interrupting:
    """The block of :meth:`Violations.interrupting`, as :func:`asyncio.timeout` is made: the
    violation cancels the task, and leaving the block turns that cancellation into the
    error (``uncancel`` takes back what the violation added to the task's cancel count)."""

    def __init__(self, waiting: dict[asyncio.Task[Any], Violation | None]) -> None:
        self._waiting = waiting
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("interrupting() is used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        self._waiting[task] = None

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._task is not None
        violation = self._waiting.pop(self._task)
        if violation is None:
            return
        cancelled_elsewhere = self._task.uncancel() > self._cancelling
        if cancelled_elsewhere and isinstance(error, asyncio.CancelledError):
            return
        # Also when the block swallowed the cancellation: it went on without a permission.
        raise PermissionDenied(violation.action, violation.subject) from None


def refused_credentials(error: BaseException) -> bool:
    """NATS answered, and said no: retrying with the same credentials cannot help."""
    text = str(error).lower()
    return "authorization violation" in text or "authentication" in text


def refusal(url: str, source: str, auth: ClientAuth, error: BaseException) -> str:
    """Why NATS said no, naming the credential at fault: the seed file it refused, or, when
    the caller gave none, the seed the user ``source`` signs in with (``<source>.nk``)."""
    remedy = "set BERTH_CREDS to a seed file made by `berth up` or `berth creds init`"
    if auth.seed is not None:
        return f"NATS at {url} refused the credentials in {auth.seed} ({error}); {remedy}"
    needed = f"{source}{SEED_SUFFIX}" if source in USERS else "a user's seed (<user>.nk)"
    return (
        f"NATS at {url} refused the credentials ({error}): none were given,"
        f" {needed} is missing; {remedy}"
    )

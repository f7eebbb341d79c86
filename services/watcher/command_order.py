"""Whether a create command still stands, by the order of a workload's commands on the stream.

A ``CreateWorkload`` (recovery's managed-job attempt) or ``SubmitWorkload`` (``berth
submit``) can reach the watcher again after the workload was cancelled: the consumer
redelivers what it had not acked when a watcher restarted or lost its lease, and a batch that
failed is handled again. Carried out a second time it would create the object anew, after the
cancel had deleted it, and the job would run although it was cancelled. Neither backend keeps
a tombstone that survives a restart; the event stream does, so both ask it (one request per
create: the newest ``berth.cmd.*.<namespace>.<name>``) and apply :func:`create_verdict`.
"""

from __future__ import annotations

import msgspec
from nats.js import JetStreamContext

from shared.bus import STREAM, NotFound, bus_call
from shared.events import (
    SUBJECT_ROOT,
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    RemoveWorkload,
    SubmitWorkload,
    decode_event,
    subject_token,
)
from shared.logging import get_logger

__all__ = ["create_stands", "create_verdict", "newest_command"]

log = get_logger("watcher")


def create_verdict(command: CreateWorkload | SubmitWorkload, newest: AnyEvent | None) -> str | None:
    """The rule: a create command is carried out unless a newer command about the same
    workload name is on the stream that voids it. Returns why it is void, or None.

    ``newest`` is the newest create, submit, delete or remove command on the stream for the
    command's namespace and name (stream order is the order the commands were given):

    - none, or the command itself: it is the last word, carry it out;
    - a create or submit for the same uid: a copy of the same request, idempotent, carry
      it out;
    - a delete or remove naming the command's uid, or no uid (``berth delete`` names
      none): the workload was cancelled after this command, do not create it again;
    - a delete or remove naming another uid: it removes another object of that name, not
      this one, carry it out;
    - a create or submit for another uid: a newer object of that name was asked for, and
      creating this old one now would take its name, do not.
    """
    if newest is None or newest.id == command.id:
        return None
    uid = command.workload.uid
    if isinstance(newest, CreateWorkload | SubmitWorkload):
        if newest.workload.uid == uid:
            return None
        return f"superseded by a newer create of that name ({type(newest).__name__} {newest.id})"
    if isinstance(newest, DeleteWorkload | RemoveWorkload):
        if newest.workload.uid in ("", uid):
            return f"cancelled after it was sent ({type(newest).__name__} {newest.id})"
        return None
    return None


async def newest_command(js: JetStreamContext, namespace: str, name: str) -> AnyEvent | None:
    """The newest create, submit, delete or remove command stored for a workload name."""
    subject = f"{SUBJECT_ROOT}.cmd.*.{subject_token(namespace)}.{subject_token(name)}"
    try:
        message = await bus_call(js.get_last_msg(STREAM, subject))
    except NotFound:
        return None
    try:
        return decode_event(message.data or b"")
    except msgspec.DecodeError:
        return None  # a poison message is the consumer's to dead-letter; it voids nothing


async def create_stands(js: JetStreamContext, command: CreateWorkload | SubmitWorkload) -> bool:
    """Apply :func:`create_verdict` to the stream's newest command; log a void one."""
    ref = command.workload
    reason = create_verdict(command, await newest_command(js, ref.namespace, ref.name))
    if reason is None:
        return True
    log.info(
        "create_skipped",
        workload=ref.key,
        uid=ref.uid,
        type=type(command).__name__,
        by=command.source,
        reason=reason,
    )
    return False

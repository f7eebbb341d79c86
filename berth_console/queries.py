"""Questions the console asks over the bus: admission's status API, the watcher's logs,
recovery's cancel, and one workload's history read from the event stream by subject.

Every failure becomes a :class:`QueryError` with a sentence a page can show as it is.
"""

from __future__ import annotations

from typing import Any

import msgspec
from nats.js import api

from shared.bus import (
    API_SUBJECT,
    CONFIG_BUCKET,
    STREAM,
    Bus,
    BusError,
    BusTimeout,
    NoResponders,
    bus_call,
)
from shared.bus.view import ViewReading
from shared.events import AnyEvent, subject_for, subject_token
from shared.fencing import LEASE_SUBJECTS, Fence, Verdict
from shared.logging import get_logger
from shared.queue_stop import QueueBusy, StopOutcome, StopPolicy, set_stop_policy

__all__ = ["Queries", "QueryError"]

log = get_logger("console.queries")
TIMEOUT_S = 5.0
LOG_TAIL_BYTES = 64 * 1024  # a page shows at most this much of each log file at first


class QueryError(RuntimeError):
    """A service did not answer, or answered with an error."""


class Queries:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def ask(self, service: str, verb: str, request: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = await self.bus.request(
                f"{API_SUBJECT}.{service}.{verb}", msgspec.json.encode(request), wait=TIMEOUT_S
            )
        except NoResponders as error:
            raise QueryError(f"the {service} service is not running (no responder)") from error
        except BusTimeout as error:
            raise QueryError(f"the {service} service did not answer within 5s") from error
        except BusError as error:
            raise QueryError(f"the bus refused the request: {error}") from error
        body: dict[str, Any] = msgspec.json.decode(reply.data)
        if "error" in body:
            raise QueryError(f"{service}: {body['error']}")
        return body

    async def admission(self, resource: str, **request: Any) -> list[dict[str, Any]]:
        """Every item of one of admission's resources, page by page."""
        items: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            body = await self.ask("admission", resource, {**request, "offset": offset})
            items.extend(body["items"])
            offset = body.get("next")
        return items

    async def logs(
        self, namespace: str, name: str, offsets: dict[str, int]
    ) -> list[dict[str, Any]]:
        """New output of a workload's log files after ``offsets`` (file -> byte offset),
        which is updated; ``new`` marks a file seen for the first time (shown from its last
        64 KiB)."""
        body = await self.ask(
            "watcher", "logs", {"namespace": namespace, "name": name, "offsets": offsets}
        )
        files: list[dict[str, Any]] = body.get("files", [])
        for item in files:
            item["new"] = item["file"] not in offsets
            if item["new"] and len(item["data"]) > LOG_TAIL_BYTES:
                item["data"] = "[...]\n" + item["data"][-LOG_TAIL_BYTES:]
            offsets[item["file"]] = item["offset"]
        return files

    async def cancel(self, job_id: int) -> dict[str, Any]:
        return await self.ask("recovery", "cancel", {"id": job_id, "name": None})

    async def set_stop_policy(
        self, kind: str, name: str, namespace: str, policy: StopPolicy
    ) -> StopOutcome:
        """Write a queue's stopPolicy (shared/queue_stop.py, as ``berth stop`` does);
        :class:`QueueNotFound` for a queue that is not there, QueryError for the bus's refusal."""
        try:
            kv = await self.bus.kv(CONFIG_BUCKET)
            return await set_stop_policy(kv, kind, name, namespace, policy)
        except QueueBusy as error:
            raise QueryError(str(error)) from error
        except (TimeoutError, BusError) as error:
            raise QueryError(f"the bus refused the change: {error!r}") from error

    async def history(self, namespace: str, name: str) -> list[tuple[int, str, AnyEvent]]:
        """Every stored event about one workload, in stream order, read by subject.

        An ephemeral consumer filtered on the workload's subjects: where the deployment keeps
        the per-workload copies, the server finds them in its subject index, so this costs
        the same with ten or ten million other events; where it does not
        (``BERTH_BUS_COPIES``), the batches of those families are read and matched here
        (shared/bus/view.py). The leaders' markers come along (they are few), so the fence
        leaves out what a deposed leader published too late, as the services do.
        """
        tail = f"{subject_token(namespace)}.{subject_token(name)}"
        try:
            copies = await self.bus.view_copies()
        except BusError as error:
            raise QueryError(f"cannot read the event stream: {error}") from error
        reading = ViewReading.of([f"berth.*.*.{tail}", f"berth.cq.*.*.{tail}"], copies)
        config = api.ConsumerConfig(
            filter_subjects=[*reading.filters, LEASE_SUBJECTS],
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.ALL,
            inactive_threshold=30.0,
            mem_storage=True,
        )
        try:
            subscription = await bus_call(
                self.bus.js.pull_subscribe("", stream=STREAM, config=config)
            )
        except BusError as error:
            raise QueryError(f"cannot read the event stream: {error}") from error
        found: list[tuple[int, str, AnyEvent]] = []
        fence = Fence()
        try:
            remaining = (await bus_call(subscription.consumer_info())).num_pending or 0
            while remaining > 0:
                messages = await bus_call(
                    subscription.fetch(min(remaining, 256), timeout=TIMEOUT_S)
                )
                remaining -= len(messages)
                for msg in messages:
                    seq = msg.metadata.sequence.stream
                    try:
                        shown = reading.events(msg)
                    except msgspec.DecodeError:  # a malformed batch: nothing to show
                        continue
                    for event in (item.event for item in shown if item.event is not None):
                        if fence.judge(event) is Verdict.KEEP:
                            found.append((seq, subject_for(event), event))
        except (TimeoutError, BusError) as error:
            raise QueryError(f"reading the event stream failed: {error!r}") from error
        finally:
            try:
                # a pull subscription left open hangs drain()
                await bus_call(subscription.unsubscribe())
            except (BusError, ValueError):
                pass
        return found

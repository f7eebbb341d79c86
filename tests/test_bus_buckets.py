"""The bus's key-value buckets against a real nats-server: compare-and-swap, plain
updates, and watches that stop at once and resume after a restart."""

import asyncio
import time

import pytest
from nats.js.kv import KeyValue

from berth_cli.natsserver import NatsServer
from shared.bus import BucketWatch, BusError, KeyExists, watching
from tests.unbatched_bus import _bus


async def test_lost_compare_and_swap_fails_at_once(nats_url: str) -> None:
    """A pipelined key update against a stale revision raises, promptly (nats-py's own
    publish_async left such a future unresolved), and a fresh one goes through."""
    bus = await _bus(nats_url)
    try:
        kv = await bus.kv("swap-test")
        first = await kv.put("key", b"one")
        second = await bus.update_key(kv, "key", b"two", last=first)
        assert second > first and (await kv.get("key")).value == b"two"
        started = time.monotonic()
        with pytest.raises(KeyExists):
            await bus.update_key(kv, "key", b"stale", last=first)
        assert time.monotonic() - started < 1
        assert (await kv.get("key")).value == b"two"
    finally:
        await bus.close()


async def test_a_plain_key_update_is_stored_as_kv_put_stores_it(nats_url: str) -> None:
    """A pipelined update without a revision to swap (the watcher's statuses) is a plain
    message, headers and all, as nats-py's kv.put writes it, and reads back the same."""
    bus = await _bus(nats_url)
    try:
        kv = await bus.kv("plain-test")
        await kv.put("by-put", b"one")
        [revision] = await (
            await bus.send_key_updates(kv, [("by-update", b"two", None)])
        ).outcomes()
        assert isinstance(revision, int) and (await kv.get("by-update")).value == b"two"
        stored = [
            await bus.js.get_last_msg("KV_plain-test", f"$KV.plain-test.{key}")
            for key in ("by-put", "by-update")
        ]
        assert (stored[0].hdrs, stored[0].headers) == (stored[1].hdrs, stored[1].headers)
    finally:
        await bus.close()


@pytest.mark.parametrize("follow", ["follow", "follow_batches"])
async def test_a_stop_ends_a_bucket_follow_at_once(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, follow: str
) -> None:
    """A follow loop ends as soon as its stop flag is set, whatever its idle timeout."""
    monkeypatch.setattr(watching, "WATCH_IDLE_TIMEOUT_S", 30.0)
    bus = await _bus(nats_url)
    try:
        kv = await bus.kv("follow-test")
        await kv.put("a", b"1")
        watch, initial = await BucketWatch.start(kv)
        assert [entry.key for entry in initial] == ["a"]
        seen: list[str] = []
        changed = asyncio.Event()

        async def handle_one(entry: KeyValue.Entry) -> None:
            seen.append(entry.key)
            changed.set()

        async def handle_many(entries: list[KeyValue.Entry]) -> None:
            seen.extend(entry.key for entry in entries)
            changed.set()

        stopping = asyncio.Event()
        handler = handle_one if follow == "follow" else handle_many
        task = asyncio.create_task(getattr(watch, follow)(handler, stopping=stopping))
        await kv.put("b", b"2")
        await asyncio.wait_for(changed.wait(), 5)
        assert seen == ["b"]
        stopping.set()
        await asyncio.wait_for(task, 5)
    finally:
        await bus.close()


async def test_a_bucket_watch_resumes_after_nats_restarts(nats_server: NatsServer) -> None:
    """A watch whose server restarted (its consumer gone with it) hands over the changes made
    after the restart, each once: it resumes after the last revision it saw, not from the
    bucket's current values again."""
    bus = await _bus(nats_server.url)
    try:
        kv = await bus.kv("resume-test")
        await kv.put("a", b"1")
        watch, initial = await BucketWatch.start(kv)
        assert [entry.key for entry in initial] == ["a"]
        seen: list[str] = []
        changed = asyncio.Event()

        async def handle(entry: KeyValue.Entry) -> None:
            seen.append(entry.key)
            changed.set()

        stopping = asyncio.Event()
        task = asyncio.create_task(watch.follow(handle, stopping=stopping))
        await kv.put("b", b"2")
        await asyncio.wait_for(changed.wait(), 5)
        changed.clear()
        nats_server.stop()
        nats_server.start()
        for _ in range(100):  # until JetStream is back
            try:
                await kv.put("c", b"3")
                break
            except (BusError, TimeoutError):
                await asyncio.sleep(0.1)
        await asyncio.wait_for(changed.wait(), 15)
        await asyncio.sleep(0.2)  # room for a copy of "a" or "b", which must not come
        assert seen == ["b", "c"]
        stopping.set()
        await asyncio.wait_for(task, 5)
    finally:
        await bus.close()

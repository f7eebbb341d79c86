"""The config bucket mirrored in memory: every service that reads config uses this.

It loads what `berth apply` (or the kubernetes backend's mirroring) stored, then follows each
change; an entry that fails validation (not JSON, not a valid object, or stored under another
object's key) is dead-lettered (shared/deadletter.py: one log line, a count, a copy in
BERTH_DLQ) and left out, never half applied; the previous valid version of that key stays.
``changed`` is set on every change so a decision loop can pick it up between passes;
``behind`` says whether more of the same burst is on its way (the rest of a config applied
at once, one key at a time), so such a loop can take the burst whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TypeVar

import msgspec
from nats.js.kv import KeyValue

from shared.bus import CONFIG_BUCKET, BucketWatch, live_value
from shared.config import ConfigError, ConfigObject, decode_object, object_key
from shared.deadletter import DeadLetters, dead_letters
from shared.logging import get_logger
from shared.service import Runtime

__all__ = ["ConfigMirror"]

log = get_logger("config")
T = TypeVar("T")


class ConfigMirror:
    def __init__(self) -> None:
        self.objects: dict[str, ConfigObject] = {}  # bucket key -> object
        self.changed = asyncio.Event()
        # Changes the server still had for this watch when it sent the last one handed over
        # (its num_pending): each of them comes after it. 0: caught up, as far as it knew.
        self.behind = 0
        self.letters: DeadLetters | None = None  # set by start()

    async def start(self, runtime: Runtime) -> None:
        """Load the current config, then follow changes in a task the runtime owns."""
        self.letters = dead_letters(runtime.bus, runtime.name)
        watch, initial = await BucketWatch.start(await runtime.bus.kv(CONFIG_BUCKET))
        for entry in initial:
            self._observe(entry)
        runtime.spawn(
            watch.follow(self._on_change, stopping=runtime.stopping),
            name=f"{runtime.name}.config",
        )

    def _observe(self, entry: KeyValue.Entry) -> None:
        value = live_value(entry)
        if value is None:
            self.objects.pop(entry.key, None)
            return
        try:
            obj = decode_object(value)
        except (ConfigError, msgspec.DecodeError) as error:
            self._malformed(entry, str(error), value)
            return
        if object_key(obj) != entry.key:  # it would shadow the object that key names
            self._malformed(
                entry, f"stored under key {entry.key!r}, not {object_key(obj)!r}", value
            )
            return
        self.objects[entry.key] = obj

    def _malformed(self, entry: KeyValue.Entry, reason: str, value: bytes) -> None:
        source = f"{CONFIG_BUCKET}/{entry.key}"
        if self.letters is None:
            log.error("malformed_config", source=source, reason=reason)
            return
        self.letters.post("config", source, reason, value, identity=f"{entry.key}@{entry.revision}")

    async def _on_change(self, entry: KeyValue.Entry) -> None:
        self._observe(entry)
        self.behind = entry.delta or 0
        self.changed.set()

    def take_change(self) -> bool:
        """Whether config changed since the last call (and forget that it did)."""
        if not self.changed.is_set():
            return False
        self.changed.clear()
        return True

    def values(self) -> Iterable[ConfigObject]:
        return self.objects.values()

    def of_kind(self, kind: type[T]) -> list[T]:
        return [obj for obj in self.objects.values() if isinstance(obj, kind)]

    def __contains__(self, key: str) -> bool:
        return key in self.objects

"""The config bucket mirrored in memory: every service that reads config uses this.

It loads what `berth apply` (or the kubernetes backend's mirroring) stored, then follows each
change; an object that fails validation is logged with its reason and left out, never half
applied. ``changed`` is set on every change so a decision loop can pick it up between passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TypeVar

import msgspec
from nats.js.kv import KeyValue

from shared.bus import CONFIG_BUCKET, BucketWatch, live_value
from shared.config import ConfigError, ConfigObject, decode_object
from shared.logging import get_logger
from shared.service import Runtime

__all__ = ["ConfigMirror"]

log = get_logger("config")
T = TypeVar("T")


class ConfigMirror:
    def __init__(self) -> None:
        self.objects: dict[str, ConfigObject] = {}  # bucket key -> object
        self.changed = asyncio.Event()

    async def start(self, runtime: Runtime) -> None:
        """Load the current config, then follow changes in a task the runtime owns."""
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
            self.objects[entry.key] = decode_object(value)
        except (ConfigError, msgspec.DecodeError) as error:
            log.error("invalid_config_object", key=entry.key, reason=str(error))

    async def _on_change(self, entry: KeyValue.Entry) -> None:
        self._observe(entry)
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

"""Metrics every service shares: gauges read from memory at scrape time, and bus lag.

Names follow Kueue's with ``berth_`` in place of ``kueue_`` wherever Kueue has the metric
(``kueue_pending_workloads`` is ``berth_pending_workloads``, same labels and meaning), so a
Kueue dashboard needs only its prefix changed; Berth's own metrics say ``berth_`` too and
have no Kueue counterpart. docs/metrics.md lists them all (a test keeps it in step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nats.js import JetStreamContext
from prometheus_client import REGISTRY, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from shared.bus import STREAM, BusError, bus_call
from shared.logging import get_logger

if TYPE_CHECKING:
    from shared.service import Runtime

__all__ = [
    "CONSUMER_ACK_PENDING",
    "CONSUMER_PENDING",
    "GaugeSpec",
    "Samples",
    "StateGauges",
    "sample_consumer_lag",
]

log = get_logger("metrics")

LAG_SAMPLE_SECONDS = 5.0

CONSUMER_PENDING = Gauge(
    "berth_bus_consumer_pending_messages",
    "Messages in the event stream not yet delivered to this service's consumer (NATS"
    " num_pending: how far behind the stream it is), sampled every 5 s.",
    ["consumer"],
)
CONSUMER_ACK_PENDING = Gauge(
    "berth_bus_consumer_ack_pending_messages",
    "Messages delivered to this service's consumer and not yet acknowledged (NATS"
    " num_ack_pending; 0 for a consumer that does not ack), sampled every 5 s.",
    ["consumer"],
)


@dataclass(frozen=True)
class GaugeSpec:
    name: str
    documentation: str
    labels: tuple[str, ...]


# Per gauge name: (label values, value) of each sample.
Samples = Mapping[str, Iterable[tuple[Sequence[str], float]]]


class StateGauges(Collector):
    """Gauges computed from a service's in-memory state when Prometheus scrapes.

    Why at scrape time: the state changes with every event, and reading it every 15-30 s
    costs less than keeping gauges in step on the hot path. The service sets ``read``
    once it has state to show; until then (and in a process that never sets it) the gauges
    have no samples. The scrape runs on the service's event loop (aiohttp's handler), so
    ``read`` sees the state between two of its steps, never half-changed.
    """

    def __init__(self, *specs: GaugeSpec, registry: CollectorRegistry = REGISTRY) -> None:
        self.specs = specs
        self.read: Callable[[], Samples] | None = None
        registry.register(self)

    def _families(self) -> dict[str, GaugeMetricFamily]:
        return {
            spec.name: GaugeMetricFamily(spec.name, spec.documentation, labels=list(spec.labels))
            for spec in self.specs
        }

    def describe(self) -> Iterable[Metric]:
        return list(self._families().values())

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        if self.read is not None:
            for name, samples in self.read().items():
                family = families[name]
                for labels, value in samples:
                    family.add_metric(list(labels), value)
        yield from families.values()


async def sample_consumer_lag(
    runtime: Runtime,
    *,
    consumer: str,
    subscription: JetStreamContext.PullSubscription | None = None,
    every: float = LAG_SAMPLE_SECONDS,
) -> None:
    """Keep ``berth_bus_consumer_*{consumer}`` up to date until the service stops: the
    consumer of ``subscription``, else the durable consumer named ``consumer``. A consumer
    that does not exist (yet) or a NATS hiccup skips one sample."""
    while not runtime.stopping.is_set():
        try:
            if subscription is not None:
                info = await bus_call(subscription.consumer_info())
            else:
                info = await bus_call(runtime.bus.js.consumer_info(STREAM, consumer))
        except (BusError, TimeoutError) as error:
            log.debug("consumer_lag_unknown", consumer=consumer, error=repr(error))
        else:
            CONSUMER_PENDING.labels(consumer=consumer).set(info.num_pending or 0)
            CONSUMER_ACK_PENDING.labels(consumer=consumer).set(info.num_ack_pending or 0)
        try:
            await asyncio.wait_for(runtime.stopping.wait(), every)
        except TimeoutError:
            pass

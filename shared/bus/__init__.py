"""The message bus: NATS JetStream streams, durable consumers and key-value buckets.

- :mod:`~shared.bus.settings`: the stream's and buckets' names, what a deployment sets;
- :mod:`~shared.bus.connection`: connecting, riding out outages, opening streams and buckets
  (:mod:`~shared.bus.buckets`: a bucket that raises the bus's errors and names itself);
- :mod:`~shared.bus.publishing` (with :mod:`~shared.bus.acks`): pipelined publishes, retried
  with the same message id while their outcome is unknown;
- :mod:`~shared.bus.consuming` (with :mod:`~shared.bus.pulling` and
  :mod:`~shared.bus.handing`): batches handed to a handler in pieces and acked once handled,
  past the fence read by :mod:`~shared.bus.fences`;
- :mod:`~shared.bus.batches`: a round's events published as one message per subject family,
  and expanded by consumers (:mod:`~shared.bus.filters`: what the server sends each one);
- :mod:`~shared.bus.watching` (with :mod:`~shared.bus.keywatch`): buckets as list+watch;
- :mod:`~shared.bus.errors`: what callers catch (nats-py's errors never leave the package:
  buckets raise these, and :func:`bus_call` / :func:`translated` wrap any other call on a
  nats-py object);
- :mod:`~shared.bus.violations`: the operations NATS refused a connection for want of a
  permission, and the tasks each interrupts instead of leaving them to wait for a reply.

Import from here: ``from shared.bus import Bus, STREAM``.
"""

from shared.bus.acks import AckTimeout
from shared.bus.buckets import Bucket
from shared.bus.client import Bus
from shared.bus.connection import Served
from shared.bus.consuming import Handler, Settling
from shared.bus.errors import (
    BucketNotFound,
    BusError,
    BusTimeout,
    ConsumerGone,
    KeyExists,
    KeyNotFound,
    NoResponders,
    NotFound,
    PermissionDenied,
    Refused,
    bus_call,
    translated,
)
from shared.bus.publishing import (
    PUBLISH_ATTEMPTS,
    KeyBatch,
    KeyUpdates,
    SentEvents,
    keep_publishing,
)
from shared.bus.pulling import EVENTS_PER_HANDLING, decode_batch
from shared.bus.settings import (
    API_SUBJECT,
    CONFIG_BUCKET,
    DEFAULT_NATS_URL,
    JOBS_BUCKET,
    OBJECTS_BUCKET,
    STATUS_BUCKET,
    STREAM,
    STREAM_SUBJECTS,
    BusSettings,
    nats_url_from_env,
)
from shared.bus.watching import BucketWatch, live_value

__all__ = [
    "API_SUBJECT",
    "CONFIG_BUCKET",
    "DEFAULT_NATS_URL",
    "EVENTS_PER_HANDLING",
    "JOBS_BUCKET",
    "OBJECTS_BUCKET",
    "PUBLISH_ATTEMPTS",
    "STATUS_BUCKET",
    "STREAM",
    "STREAM_SUBJECTS",
    "AckTimeout",
    "Bucket",
    "BucketNotFound",
    "BucketWatch",
    "Bus",
    "BusError",
    "BusSettings",
    "BusTimeout",
    "ConsumerGone",
    "Handler",
    "KeyBatch",
    "KeyExists",
    "KeyNotFound",
    "KeyUpdates",
    "NoResponders",
    "NotFound",
    "PermissionDenied",
    "Refused",
    "SentEvents",
    "Served",
    "Settling",
    "bus_call",
    "decode_batch",
    "keep_publishing",
    "live_value",
    "nats_url_from_env",
    "translated",
]

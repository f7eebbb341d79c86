"""The garbage collector's setting for a service process: every service (through
shared/service.py ``run_service``) and the benchmarks that build a service in-process
(bench/million_pending.py) apply the same rule, :func:`tune_gc`."""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping

__all__ = ["GC_VARIABLE", "MIDDLE_THRESHOLD", "OLD_THRESHOLD", "YOUNG_THRESHOLD", "tune_gc"]

GC_VARIABLE = "BERTH_GC_TUNING"
YOUNG_THRESHOLD = 50_000  # net allocations of tracked objects between young collections
# Python collects a generation once the collections of the one below it since its last exceed
# its threshold: 1 includes the middle generation in every third collection (after two young).
MIDDLE_THRESHOLD = 1
# More than 43 middle collections (each every third): a full one is considered at the same
# collection as with Python's (10, 10), then under Python's 25% rule.
OLD_THRESHOLD = 43


def tune_gc(environ: Mapping[str, str] | None = None) -> bool:
    """Collect young objects every 50,000 net allocations instead of Python's 700; include
    the middle generation in every third collection, after two young ones (threshold 1, not
    Python's 10: every twelfth, after eleven); consider a full collection after 44 middle ones
    (threshold 43), which is at the same collection as with Python's (10, 10): the full
    collections keep their cadence. ``BERTH_GC_TUNING=0`` keeps Python's defaults; any value
    but ``0`` or ``1`` is refused (``ValueError``). Returns whether it applied.

    Why the young threshold: a service allocates many short-lived containers for every event
    it reads (decoded messages, lists of decisions, log lines), so at 700 it runs a young
    collection every few events, and each promotes the objects of the batch in hand, still
    alive, to the older generations, whose collections then rescan the state the service
    keeps (every pending workload). At 50,000 almost everything is freed by its reference
    count before a collection looks at it, and fewer survivors reach the full collections.
    The cost: cyclic garbage waits longer, at most some hundreds of thousands of objects (tens
    of MB), before it is freed; the benchmarks print peak RSS, and docs/kueue-benchmark.md
    ("What each change saved") states both ways.

    Why the middle threshold: a middle collection scans every survivor of the young
    collections since the last one, and a service keeps most of what survives (its state
    grows with every workload). With Python's middle threshold that was twelve young
    collections' worth in one pause, which every event arriving meanwhile waited out; now it
    is at most three: about the same work (each survivor is scanned once young and once in
    the middle generation), in pieces a quarter the size. Survivors reach the old generation
    sooner, but a full collection is considered no more often (the old threshold above)."""
    env = os.environ if environ is None else environ
    value = env.get(GC_VARIABLE, "1")
    if value not in ("0", "1"):
        raise ValueError(f"{GC_VARIABLE} must be 0 or 1, not {value!r}")
    if value == "0":
        return False
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
    return True

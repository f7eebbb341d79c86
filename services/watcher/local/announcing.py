"""When the local backend sends the ``WorkloadSubmitted`` reports it has in hand
(:func:`gather_for`)."""

from __future__ import annotations

__all__ = ["ANNOUNCE_FULL", "ANNOUNCE_WINDOW_S", "gather_for"]

ANNOUNCE_WINDOW_S = 0.002  # how long a few reports wait for more to share their batch
ANNOUNCE_FULL = 64  # reports in hand that make a batch worth sending at once


def gather_for(in_hand: int) -> float:
    """Seconds to let new objects gather before the ``in_hand`` reports of new workloads
    are sent: :data:`ANNOUNCE_WINDOW_S` for 1 to :data:`ANNOUNCE_FULL` - 1 of them, none for
    none (nothing to send) or for a batch that is full enough already.

    Why: objects arrive one or two at a time even in a burst (each as the store takes it),
    and every batch is a message that the watcher, nats-server and each service reading it
    pays for once (a round of 1.6 reports on average in the Kueue benchmark: one batch
    message per 1.6 workloads). Waiting a moment, the objects that arrive meanwhile share
    the next batch; a report is late by at most the window, which nothing waits on at that
    scale (admission queues a workload for far longer).
    """
    return ANNOUNCE_WINDOW_S if 0 < in_hand < ANNOUNCE_FULL else 0.0

"""The starvation bound holds against an adversary, on the real decision cores
(bench/starvation_world.py; the long run is `make bench-starvation`)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.starvation_world import Params, simulate


@st.composite
def worlds(draw: st.DrawFn) -> Params:
    return Params(
        seed=draw(st.integers(0, 2**32 - 1)),
        jobs=200,
        queues=draw(st.integers(1, 3)),
        nominal=(2, draw(st.integers(2, 12))),
        pressure=draw(st.integers(1, 4)),
        waves=(draw(st.sampled_from([10.0, 60.0])), draw(st.sampled_from([2.0, 20.0]))),
        managed=draw(st.sampled_from([0.3, 0.7])),
        runtime=(0.5, draw(st.sampled_from([5.0, 30.0]))),
        reserve_after=draw(st.sampled_from([0.0, 3.0, 20.0])),
        protect_for=draw(st.sampled_from([0.0, 2.0, 8.0])),
        minimum_run_time=draw(st.sampled_from([0.0, 1.0, 4.0])),
        grace=draw(st.sampled_from([0.0, 1.0, 5.0])),
        per_hour=draw(st.integers(1, 4)),
        share=draw(st.sampled_from([0.25, 0.5, 1.0])),
        crosscheck=True,  # the simulation's incremental index against admission's own
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_no_aged_workload_waits_past_its_shown_bound(params: Params) -> None:
    """Under a stream that keeps every ClusterQueue full: every aged workload is admitted by
    every bound shown during its wait, no run is preempted inside its protection, no
    workload beyond its preemption budget, reservations within their share; and the world
    drains (nothing starves for good)."""
    report = simulate(params, max_seconds=50_000)
    assert report.violations == [], report.violations[:5]
    assert report.finished == report.arrived, "something never ran"
    # Every wait is counted once: with a bound, or under why it showed none.
    assert report.bounded_waits + sum(report.unbounded.values()) == report.aged_waits

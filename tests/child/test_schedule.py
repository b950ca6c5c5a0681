"""The harness-owned arrival schedule (harness.child.schedule): the gaps each kind draws,
the ramp, and the schedule on a real event loop (every sample once, in time order, none early)."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from harness.child.schedule import ArrivalPlan, Schedule, TracePlan, operational_to_time, precise_loop

N = 20_000


def cv(gaps: np.ndarray) -> float:
    return float(gaps.std(ddof=1) / gaps.mean())


@pytest.mark.parametrize("shape", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_cv_one_over_sqrt_shape(shape: float):
    plan = ArrivalPlan("gamma", rate=500.0, shape=shape, seed=3)
    gaps = np.diff(np.concatenate([[0], plan.offsets_ns(N)])) / 1e9
    assert gaps.mean() == pytest.approx(1 / 500, rel=4 * math.sqrt(1 / (shape * N)))  # sd of a mean of N gaps
    # Delta method on CV = s/m for gamma(k, 1/k): var 1/k, third central moment 2/k^2, fourth
    # (3k + 6)/k^3, so Var(CV) ~ (k + 1) / (2 k^2 N); four of its sd
    sd = math.sqrt((shape + 1) / (2 * shape**2 * N))
    assert abs(cv(gaps) - 1 / math.sqrt(shape)) <= 4 * sd, (cv(gaps), sd)


def test_poisson_is_cv_one_and_constant_is_even():
    poisson = np.diff(ArrivalPlan("poisson", rate=100.0, seed=1).offsets_ns(N)) / 1e9
    assert abs(cv(poisson) - 1) <= 4 * math.sqrt(1 / N)  # gamma with k = 1: Var(CV) ~ 1/N
    constant = ArrivalPlan("constant", rate=2000.0).offsets_ns(5)
    assert constant.tolist() == [500_000, 1_000_000, 1_500_000, 2_000_000, 2_500_000]


def test_offsets_are_one_stream_whatever_the_query_sizes():
    whole = ArrivalPlan("gamma", rate=50.0, shape=0.5, seed=9).offsets_ns(10)
    split = ArrivalPlan("gamma", rate=50.0, shape=0.5, seed=9)
    assert np.array_equal(np.concatenate([split.offsets_ns(4), split.offsets_ns(6)]), whole)


def test_a_ramp_offers_the_integral_of_its_rate():
    # rate 0 -> 100/s over 10 s, then 100/s: Λ(t) = 5 t^2 in the ramp, 500 + 100 (t - 10) after
    assert operational_to_time(np.array([125.0, 500.0, 1500.0]), 100.0, 0.0, 10.0) == pytest.approx([5, 10, 20])
    t = ArrivalPlan("poisson", rate=100.0, seed=2, ramp_from=0.0, ramp_s=10.0).offsets_ns(3000) / 1e9
    # Poisson counts: expected Λ, sd sqrt(Λ); four sd
    for lo, hi, expected in ((0, 5, 125), (5, 10, 375), (10, 20, 1000)):
        got = int(((t >= lo) & (t < hi)).sum())
        assert abs(got - expected) <= 4 * math.sqrt(expected), (lo, hi, got)


class _Loop:
    """A precise loop in a thread, as the event-loop SUT runs it."""

    def __enter__(self) -> asyncio.AbstractEventLoop:
        self.loop = precise_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        return self.loop

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def test_the_schedule_sends_every_sample_once_in_time_order_never_early(tmp_path):
    sent: list[tuple[int, int, int, int]] = []
    done = threading.Event()
    plan = TracePlan(np.array([0.030, 0.010, 0.020, 0.010, 0.0]), "trace:test")

    with _Loop() as loop:
        def dispatch(items: list[tuple[int, int, int]]) -> None:
            now = time.perf_counter_ns()
            sent.extend((*item, now) for item in items)
            if len(sent) == 5:
                done.set()

        schedule = Schedule(plan, loop, dispatch, tmp_path / "schedule.parquet")
        # LoadGen's order is not the trace's: row j leaves at its own time whatever its position
        samples = [SimpleNamespace(id=100 + i, index=j) for i, j in enumerate((3, 0, 4, 1, 2))]
        issued = time.perf_counter_ns()
        loop.call_soon_threadsafe(schedule.put, samples, issued)
        assert done.wait(5)
    schedule.close()
    assert sorted(s[1] for s in sent) == [0, 1, 2, 3, 4]  # each row once
    due = {j: issued + round(plan_s * 1e9) for j, plan_s in enumerate((0.030, 0.010, 0.020, 0.010, 0.0))}
    assert [s[1] for s in sent][0] == 4 and [s[1] for s in sent][-1] == 0  # time order
    assert all(at >= due[j] for _, j, _, at in sent)  # never before its time
    table = pq.read_table(tmp_path / "schedule.parquet").to_pydict()
    by_id = {s[0]: s[1] for s in sent}
    assert {q: t for q, t in zip(table["query_id"], table["scheduled_ns"], strict=True)} == {
        q: due[j] for q, j in by_id.items()}


def test_arrivals_keep_loadgen_order_and_a_second_query_merges_by_time(tmp_path):
    sent: list[tuple[int, int, int, int]] = []
    done = threading.Event()
    plan = ArrivalPlan("constant", rate=200.0)  # one every 5 ms

    with _Loop() as loop:
        def dispatch(items: list[tuple[int, int, int]]) -> None:
            sent.extend((*item, time.perf_counter_ns()) for item in items)
            if len(sent) == 6:
                done.set()

        schedule = Schedule(plan, loop, dispatch, None)
        first = [SimpleNamespace(id=i, index=10 + i) for i in range(4)]  # due at 5, 10, 15, 20 ms
        issued = time.perf_counter_ns()
        loop.call_soon_threadsafe(schedule.put, first, issued)
        # a second query while the first is pending: its two samples are positions 5 and 6
        # of the stream (25, 30 ms after its own issue), merged with what is left
        second = [SimpleNamespace(id=100 + i, index=i) for i in range(2)]
        loop.call_soon_threadsafe(schedule.put, second, issued)
        assert done.wait(5)
    assert [s[0] for s in sent] == [0, 1, 2, 3, 100, 101]
    assert schedule.sent_due == [issued + k * 5_000_000 for k in range(1, 7)]
    assert all(at >= due for (*_, at), due in zip(sent, schedule.sent_due, strict=True))
    assert [s[2] for s in sent] == [issued] * 6  # each keeps LoadGen's issue time

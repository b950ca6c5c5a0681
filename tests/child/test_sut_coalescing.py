"""Completion coalescing in the tensor SUT: fewer QuerySamplesComplete calls under a
backlog of fast calls, each result held at most the bound, slow calls never held.

The SUT is driven directly with LoadGen's own QuerySample/QuerySampleResponse types and a
completion function that stamps when each call arrives, so the hold time of every result
is known exactly (LoadGen's own latency only shows it blurred with its scheduling).
"""

from __future__ import annotations

import threading
import time

import mlperf_loadgen as lg
import numpy as np
import pytest

from backends.base import LoadContext
from backends.synthetic import SyntheticBackend
from harness.child.record_writer import RecordWriter
from harness.child.tensor_sut import TensorSUT
from harness.data.datasets import SyntheticTensors
from harness.results.records import read_records


class CompletionLog:
    """Stands where mlperf_loadgen.QuerySamplesComplete goes: stamps every call."""

    def __init__(self, expected: int) -> None:
        self.calls: list[tuple[int, list[int]]] = []
        self._left = expected
        self.all_done = threading.Event()

    def __call__(self, responses: list) -> None:
        self.calls.append((time.perf_counter_ns(), [r.id for r in responses]))
        self._left -= len(responses)
        if self._left <= 0:
            self.all_done.set()


def run_backlog(tmp_path, n: int, coalesce_us: float, service_time_ms: float = 0.0):
    """Queue n one-sample queries before the worker starts, serve them all, return
    (completion log, records)."""
    backend = SyntheticBackend(SyntheticBackend.Options(service_time_ms=service_time_ms))
    backend.load(LoadContext(None, 1, "Server"))
    dataset = SyntheticTensors(backend.inputs(), 64, seed=0)
    dataset.load(range(64))
    records = RecordWriter(tmp_path)
    log = CompletionLog(n)
    sut = TensorSUT(
        backend, dataset, records, log, lg.QuerySampleResponse,
        workers=1, max_batch=1, batch_timeout_ms=0, return_outputs=False, coalesce_us=coalesce_us,
    )
    for i in range(n):  # Server issues one sample per query
        sut.issue([lg.QuerySample(1000 + i, i % 64)])
    sut.start()
    assert log.all_done.wait(60), "not every sample was completed"
    sut.stop()
    records.close()
    return log, read_records(tmp_path).columns


def hold_ms(log: CompletionLog, rec) -> np.ndarray:
    """For each completion call: how long its oldest result had waited since its call ended."""
    done = dict(zip(rec["query_id"].tolist(), rec["complete_ns"].tolist()))
    return np.array([(at - min(done[i] for i in ids)) / 1e6 for at, ids in log.calls])


def completed_once(log: CompletionLog, n: int) -> bool:
    ids = [i for _, batch in log.calls for i in batch]
    return sorted(ids) == list(range(1000, 1000 + n))


def test_fast_calls_under_a_backlog_complete_together_within_the_bound(tmp_path):
    n = 5000
    log, rec = run_backlog(tmp_path, n, coalesce_us=200)
    assert completed_once(log, n)
    assert len(np.unique(rec["batch_id"])) == n  # still one backend call per sample
    assert len(log.calls) < n / 5  # ~µs calls: many results per completion
    held = hold_ms(log, rec)
    # Held at most the bound plus one call; the slack covers a preempted thread.
    assert np.percentile(held, 95) < 0.2 + 1.0
    # Without a bound the first result would wait for the whole backlog (tens of ms).
    assert np.median(held) < 1.0


def test_slow_calls_are_completed_at_once(tmp_path):
    n = 20
    log, rec = run_backlog(tmp_path, n, coalesce_us=200, service_time_ms=1.0)
    assert completed_once(log, n)
    assert len(log.calls) == n  # a 1 ms call could not end inside a 0.2 ms bound
    assert np.median(hold_ms(log, rec)) < 0.5


def test_zero_bound_completes_every_call(tmp_path):
    n = 300
    log, rec = run_backlog(tmp_path, n, coalesce_us=0)
    assert completed_once(log, n)
    assert len(log.calls) == n


@pytest.mark.parametrize("coalesce_us", [0, 200])
def test_server_run_is_valid_and_agrees_with_loadgen_either_way(run_harness, coalesce_us):
    _, s = run_harness(
        backend="synthetic", scenario="Server", target_qps=2000, target_latency_ms=50,
        completion_coalesce_us=coalesce_us, min_duration_s=1.0, min_query_count=1000,
    )
    assert s["validity"]["result"] == "VALID"
    ours, lg = s["harness"], s["loadgen"]
    assert ours["samples"] == lg["query_count"] >= 1000 and ours["failed"] == 0
    assert s["agreement"]["throughput"] == pytest.approx(1.0, abs=0.02)
    # LoadGen times from its own stamp, before our callback, and to the completion call,
    # after a held result's end: its p50 may only be the larger, by a fraction of a ms: the
    # hold, plus LoadGen's issue thread running late, which belongs to the machine and is
    # allowed as measured (the mean gap past the hold: 0.28 ms at p50 seen on a busy VM), as
    # tests/child/test_scenarios.py allows it; a harness stalling that thread shows ms.
    gap = s["agreement"]["issue_delay_ms"]
    assert 0 <= gap < 1.0
    late = max(0.0, gap - coalesce_us / 1e3)
    assert 0 <= lg["latency_ms"]["p50"] - ours["latency_ms"]["p50"] < 0.25 + late

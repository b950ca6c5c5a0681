"""Completion coalescing in the tensor SUT: fewer QuerySamplesComplete calls under a
backlog of fast calls, each result held only as the bound allows, slow calls never held.

The SUT is driven directly with LoadGen's own QuerySample/QuerySampleResponse types and a
completion function that stamps when each call arrives, so every hold is checked against
the rule on the stamps the SUT decided with (LoadGen's own latency only shows it blurred
with its scheduling).
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
from tests.support.loadgen_gap import split_of


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


def check_holds(log: CompletionLog, rec, coalesce_us: float) -> None:
    """What the SUT decided, checked on the stamps it decided with (the records keep each
    call's dispatch and end as the worker took them), so no machine speed can change the
    verdict: a result was held only while one more call as long as the last would still end
    inside the bound counted from the first held result's end; a hold ended at the first
    call past that (every group but the last: all n were queued before the worker started,
    so the queue was never empty before); and the held results were completed before the
    worker served its next call. How long the completion then took is the machine's (a
    preempted thread), not the rule's."""
    calls = dict(zip(rec["query_id"].tolist(), zip(rec["dispatch_ns"].tolist(), rec["complete_ns"].tolist())))
    groups = [(at, sorted(calls[i] for i in ids)) for at, ids in log.calls]
    bound_ns = coalesce_us * 1e3
    for g, (at, served) in enumerate(groups):
        first_done = served[0][1]
        within = [2 * done - dispatch - first_done < bound_ns for dispatch, done in served]
        assert all(within[:-1]), f"group {g}: a result held past the bound: {served}"
        if g < len(groups) - 1:
            assert not within[-1], f"group {g} ended inside the bound with calls queued: {served}"
            assert at <= groups[g + 1][1][0][0], f"group {g} completed after the next call began"
        assert at >= served[-1][1]


def completed_once(log: CompletionLog, n: int) -> bool:
    ids = [i for _, batch in log.calls for i in batch]
    return sorted(ids) == list(range(1000, 1000 + n))


def test_fast_calls_under_a_backlog_complete_together_within_the_bound(tmp_path):
    n = 5000
    log, rec = run_backlog(tmp_path, n, coalesce_us=200)
    assert completed_once(log, n)
    assert len(np.unique(rec["batch_id"])) == n  # still one backend call per sample
    check_holds(log, rec, coalesce_us=200)
    # ~us calls inside a 0.2 ms bound: results were coalesced (how many a completion
    # carries follows the calls' speed, which the rule above was checked against)
    assert len(log.calls) < n


def test_slow_calls_are_completed_at_once(tmp_path):
    n = 20
    log, rec = run_backlog(tmp_path, n, coalesce_us=200, service_time_ms=1.0)
    assert completed_once(log, n)
    assert len(log.calls) == n  # a 1 ms call could not end inside a 0.2 ms bound
    check_holds(log, rec, coalesce_us=200)  # each completed before the next call began


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
        enable_trace=True,
    )
    assert s["validity"]["result"] == "VALID"
    ours, lg = s["harness"], s["loadgen"]
    assert ours["samples"] == lg["query_count"] >= 1000 and ours["failed"] == 0
    assert s["agreement"]["throughput"] == pytest.approx(1.0, abs=0.02)
    # LoadGen times from its scheduled issue to its completion stamp, the harness from its
    # callback to the end of the backend's call: the gap is LoadGen's thread issuing late
    # (the machine's: reported, not bounded; 1.26 ms mean failed a fixed 1 ms bound beside
    # the suite's parallel pass) plus the hand-over both ways, which is the harness's.
    late, hand, measured = split_of(s)
    # The harness's share for the median sample: the hand-over's 0.2 ms (as the replicas'
    # test allows it) plus the coalescing hold, the harness's by design, up to the bound.
    assert 0 <= hand["p50"] < 0.2 + coalesce_us / 1e3, measured

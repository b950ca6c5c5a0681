"""LoadGen's trace matched to our records (harness.results.loadgen_trace): the split of
LoadGen's latency from ours needs every sample paired with its own row."""

from __future__ import annotations

import numpy as np
import pytest

from harness.results.loadgen_trace import TraceSamples, split_against

pytestmark = pytest.mark.parallel


def _trace(calls: list[list[int]], lateness: list[int], latency: list[int]) -> TraceSamples:
    """A trace as read_trace_samples returns it: issue order, each call's samples by index."""
    call = np.array([c for c, samples in enumerate(calls) for _ in samples], dtype=np.int64)
    index = np.array([i for samples in calls for i in sorted(samples)], dtype=np.int64)
    return TraceSamples(call, index, np.array(lateness, dtype=np.int64), np.array(latency, dtype=np.int64))


def test_two_calls_the_trace_joins_are_still_paired_sample_by_sample():
    # LoadGen issued samples 434 then 323 in two calls 1 us apart: its trace groups them as
    # one call (sorted by index), our records keep two issue stamps (434 first). Seen at
    # 2,000 queries/s, where the split was dropped whole.
    trace = _trace([[461], [434, 323], [77]], lateness=[10, 20, 30, 40], latency=[110, 220, 330, 440])
    sample_index = np.array([461, 434, 323, 77])
    issue_ns = np.array([1_000, 2_000, 2_003, 9_000])
    ours = np.array([50, 60, 70, 80])  # complete - issue, per row
    split = split_against(trace, sample_index, issue_ns, issue_ns + ours, np.ones(4, bool))
    assert split is not None
    # rows in the trace's order: 461, 323, 434, 77 -> ours 50, 70, 60, 80
    assert split["loadgen_issue_lateness"].tolist() == [10, 20, 30, 40]
    assert split["handover"].tolist() == [110 - 10 - 50, 220 - 20 - 70, 330 - 30 - 60, 440 - 40 - 80]


def test_records_that_hold_other_samples_give_no_split():
    trace = _trace([[461], [434, 323], [77]], lateness=[0] * 4, latency=[1] * 4)
    issue_ns = np.array([1_000, 2_000, 2_003, 9_000])
    for other in ([461, 434, 324, 77], [461, 77, 323, 434]):  # a sample not traced; one from another call
        assert split_against(trace, np.array(other), issue_ns, issue_ns + 1, np.ones(4, bool)) is None

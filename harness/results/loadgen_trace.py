"""LoadGen's per-sample timing from its trace (`enable_trace`), to split its latency from ours.

LoadGen times a sample from its *scheduled* issue time; the harness from its issue callback.
So per sample, LoadGen's latency = its issue lateness (scheduled -> its own issue stamp: its
thread waiting for a core or for the GIL) + the hand-over (its stamp -> our callback's) + our
latency + the hand-back (our completion stamp -> LoadGen's, inside QuerySamplesComplete).
The trace's `Sample` events carry the first and the total per sample (`issue_start_ns`,
`complete_ns`, both from the scheduled time), so the harness's own share of the gap, the
hand-over and the hand-back together, is what is left. A gap that is lateness is LoadGen's
thread waiting; one that is hand-over is the harness's and a defect.

The file is not valid JSON (LoadGen writes some `LogDetail` keys with doubled quotes), so the
sample lines are read with a pattern, one line each as LoadGen writes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.results import folder

_SAMPLE = re.compile(
    rb'"name":"Sample".*?"ph":"b".*?"ts":([0-9.]+).*?"sample_seq":(\d+),"query_seq":\d+,"sample_idx":(\d+),'
    rb'"issue_start_ns":(-?\d+),"complete_ns":(-?\d+)'
)
# Samples LoadGen issued in one call (a late Server issues its backlog at once when
# server_coalesce_queries is on) share their issue stamp: the trace's ts is in us, to 1 ns.
_SAME_CALL_NS = 2_000


@dataclass(frozen=True)
class TraceSamples:
    """LoadGen's samples in issue order; within one issue call (`call`) by sample index."""

    call: np.ndarray  # 0, 1, ...: the issue call each sample came in
    sample_index: np.ndarray
    lateness_ns: np.ndarray  # scheduled -> LoadGen's issue stamp
    latency_ns: np.ndarray  # scheduled -> LoadGen's completion stamp: its latency


def read_trace_samples(run_dir: Path) -> TraceSamples | None:
    """The trace's samples, or None when the run wrote no trace (the default) or it is empty."""
    path = run_dir / folder.LOADGEN_TRACE
    if not path.is_file() or path.stat().st_size == 0:
        return None
    rows = sorted((int(seq), round(float(ts) * 1e3), int(idx), int(late), int(lat))
                  for ts, seq, idx, late, lat in (m.groups() for m in _SAMPLE.finditer(path.read_bytes())))
    if not rows:
        return None
    a = np.array(rows, dtype=np.int64)
    issued = a[:, 1] + a[:, 3]
    call = np.concatenate(([0], np.cumsum(np.abs(np.diff(issued)) > _SAME_CALL_NS)))
    order = np.lexsort((a[:, 2], call))
    return TraceSamples(call[order], a[order, 2], a[order, 3], a[order, 4])


def _matched_order(trace: TraceSamples, sample_index: np.ndarray, issue_ns: np.ndarray) -> np.ndarray | None:
    """Our rows in the trace's order (issue order, then sample index within a call), or None
    when the two do not hold the same samples in that order."""
    order = np.lexsort((sample_index, issue_ns))
    if len(order) != len(trace.sample_index):
        return None
    if np.array_equal(sample_index[order], trace.sample_index):
        return order
    # The trace groups a call by LoadGen's issue stamps (within _SAME_CALL_NS), ours by our
    # callbacks' stamps: two calls LoadGen made 2 us apart are one call in the trace and two
    # stamps here (seen at 2,000 queries/s), so the same samples stand in another order.
    # Take our rows in the trace's calls, by position, each call's by sample index, and
    # check again: a real disagreement still gives None.
    order = order[np.lexsort((sample_index[order], trace.call))]
    return order if np.array_equal(sample_index[order], trace.sample_index) else None


def split_against(trace: TraceSamples, sample_index: np.ndarray, issue_ns: np.ndarray, complete_ns: np.ndarray,
                  ok: np.ndarray) -> dict[str, np.ndarray] | None:
    """Per successful sample: LoadGen's lateness, and the harness's hand-over and hand-back
    together (LoadGen's latency - lateness - ours). Samples are matched in issue order, which
    both sides share, and by sample index within one issue call; None when the two do not
    hold the same samples in that order (a truncated trace, a find-peak run's several
    rounds) rather than a wrong pairing."""
    order = _matched_order(trace, sample_index, issue_ns)
    if order is None:
        return None
    ours = (complete_ns - issue_ns)[order]
    keep = ok[order]
    return {
        "loadgen_issue_lateness": trace.lateness_ns[keep],
        "handover": (trace.latency_ns - trace.lateness_ns - ours)[keep],
    }


def split_queries_against(trace: TraceSamples, sample_index: np.ndarray, issue_ns: np.ndarray,
                          complete_ns: np.ndarray) -> dict[str, np.ndarray] | None:
    """MultiStream's split, per query (one issue call): LoadGen's query latency runs from
    the query's scheduled time to its last sample's completion, the harness's from its
    callback to that same sample. The query's lateness and the hand-over (LoadGen's stamp
    to our callback, our last completion to LoadGen's) add up to the gap. Matched as
    `split_against` matches samples; None when the two do not hold the same samples."""
    order = _matched_order(trace, sample_index, issue_ns)
    if order is None:
        return None
    calls = len(trace.call) and int(trace.call[-1]) + 1
    first = np.full(calls, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.zeros(calls, dtype=np.int64)
    np.minimum.at(first, trace.call, issue_ns[order])
    np.maximum.at(last, trace.call, complete_ns[order])
    lg_latency = np.zeros(calls, dtype=np.int64)
    np.maximum.at(lg_latency, trace.call, trace.latency_ns)
    lateness = np.zeros(calls, dtype=np.int64)
    np.maximum.at(lateness, trace.call, trace.lateness_ns)  # one stamp per call: its samples share it
    return {
        "loadgen_issue_lateness": lateness,
        "handover": lg_latency - lateness - (last - first),
    }

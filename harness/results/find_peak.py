"""LoadGen's FindPeakPerformance mode: one test, many rounds, one answer.

In this mode LoadGen runs a Server performance round at one QPS after another (it first
doubles the rate to bracket the peak, then bisects), waits for each round to finish before
the next, and reports one of them: its summary and `result_*` keys are the last round that
met the constraints, the one at the QPS it settled on. That is not always the last round
run: when the final midpoint fails, the reported round is an earlier one. The harness's
records hold every round, so its own figures would merge them (1,776 samples against
LoadGen's 144). `final_round` keeps the records of the reported round only: LoadGen issues
the rounds one after another, so by issue time round i is the samples after the first
sum(counts[:i]) x samples_per_query.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

FIND_PEAK = "FindPeakPerformance"
# the rate each round ran at: the base one, the upper end of each bracket tried, each midpoint
_TESTED = re.compile(r"(?:Check validity of the base settings field:|FindBoundaries: Checking fields \[[0-9.]+,|"
                     r"Testing the mid value of bounds .*?\):)\s*([0-9.]+)")
_FOUND = re.compile(r"Found peak performance field:\s*([0-9.]+)")


def final_round_size(lg: dict[str, Any]) -> int | None:
    count = lg.get("result_query_count")
    if not isinstance(count, int):
        return None
    return count * _per_query(lg)


def _per_query(lg: dict[str, Any]) -> int:
    return int(lg.get("effective_samples_per_query") or 1)


def _rounds(lg: dict[str, Any]) -> tuple[list[float], list[int], float | None]:
    messages = [str(m) for m in lg.get("generic_messages") or []]
    tested = [float(m.group(1)) for m in (_TESTED.search(x) for x in messages) if m]
    found = next((float(m.group(1)) for m in (_FOUND.search(x) for x in messages) if m), None)
    counts = [int(c) for c in lg.get("generated_query_counts") or [] if isinstance(c, int)]
    return tested, counts, found


def reported_round(lg: dict[str, Any]) -> int | None:
    """Which round LoadGen's summary is of: the last one run at the QPS it settled on."""
    tested, counts, found = _rounds(lg)
    if found is None or len(tested) != len(counts):
        return None
    at_peak = [i for i, q in enumerate(tested) if abs(q - found) <= 1e-6 * max(found, 1.0)]
    return at_peak[-1] if at_peak else None


def final_round(columns: dict[str, np.ndarray], lg: dict[str, Any]) -> dict[str, np.ndarray]:
    """The records of the round LoadGen reported (all of them when it cannot be told)."""
    n = len(columns["issue_ns"])
    order = np.argsort(columns["issue_ns"], kind="stable")
    _, counts, _ = _rounds(lg)
    i = reported_round(lg)
    if i is not None and sum(counts) * _per_query(lg) == n:
        start = sum(counts[:i]) * _per_query(lg)
        keep = np.sort(order[start:start + counts[i] * _per_query(lg)])
        return {k: v[keep] for k, v in columns.items()}
    want = final_round_size(lg)  # the round messages are missing: the last round, as sized
    if want is None or want >= n:
        return columns
    keep = np.sort(order[n - want:])
    return {k: v[keep] for k, v in columns.items()}


def summary_section(lg: dict[str, Any], all_samples: int) -> dict[str, Any]:
    """The rounds LoadGen tried and the QPS it settled on, from its own messages."""
    tested, counts, found = _rounds(lg)
    i = reported_round(lg)
    return {
        "peak_qps": found,
        "rounds": [{"target_qps": q, "queries": c, "reported": j == i}
                   for j, (q, c) in enumerate(zip(tested, counts, strict=False))],
        "round_count": len(counts),
        "reported_round": i,
        "samples_all_rounds": all_samples,
        "samples_final_round": final_round_size(lg),
        "note": "the harness's figures are of the round LoadGen reports: the last one that met its constraints",
    }

"""LoadGen's FindPeakPerformance mode: one test, many rounds, one answer.

In this mode LoadGen runs a Server performance round at one QPS after another (it first
doubles the rate to bracket the peak, then bisects), waits for each round to finish before
the next, and reports only the final round: its summary and `result_*` keys are the round at
the QPS it settled on. The harness's records hold every round, so its own figures would
merge them (1,776 samples against LoadGen's 144). `final_round` keeps the records of the
last round only: LoadGen issues the rounds one after another, so they are the last
`result_query_count` x `samples_per_query` samples by issue time.
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
    return count * int(lg.get("effective_samples_per_query") or 1)


def final_round(columns: dict[str, np.ndarray], lg: dict[str, Any]) -> dict[str, np.ndarray]:
    """The records of the round LoadGen reported (all of them when the size is unknown)."""
    want = final_round_size(lg)
    n = len(columns["issue_ns"])
    if want is None or want >= n:
        return columns
    keep = np.sort(np.argsort(columns["issue_ns"], kind="stable")[n - want:])
    return {k: v[keep] for k, v in columns.items()}


def summary_section(lg: dict[str, Any], all_samples: int) -> dict[str, Any]:
    """The rounds LoadGen tried and the QPS it settled on, from its own messages."""
    messages = [str(m) for m in lg.get("generic_messages") or []]
    tested = [float(m.group(1)) for m in (_TESTED.search(x) for x in messages) if m]
    found = next((float(m.group(1)) for m in (_FOUND.search(x) for x in messages) if m), None)
    counts = [int(c) for c in lg.get("generated_query_counts") or [] if isinstance(c, int)]
    return {
        "peak_qps": found,
        "rounds": [{"target_qps": q, "queries": c} for q, c in zip(tested, counts, strict=False)],
        "round_count": len(counts),
        "samples_all_rounds": all_samples,
        "samples_final_round": final_round_size(lg),
        "note": "the harness's figures are of the final round, the one LoadGen reports",
    }

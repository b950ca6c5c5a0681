"""LoadGen's latency against the harness's, through the split its trace gives.

With `enable_trace`, summary.json's `agreement.latency_split` holds, per sample (per query in
MultiStream), LoadGen's latency minus ours cut in two: `loadgen_issue_lateness` (its own
thread issuing after the scheduled time: waiting for a core or the GIL, the machine's) and
`handover` (its issue stamp to our callback, our completion to its own stamp: the
harness's). A test reports the first and bounds only the second (docs/testing.md, "The
rule for a timing bound").
"""

from __future__ import annotations

from typing import Any

PERCENTILES = ("p50", "p90", "p99", "max")


def split_of(s: dict[str, Any], section: str = "latency_ms") -> tuple[dict, dict, str]:
    """(lateness, hand-over, a line of what was measured), after checking what holds on any
    machine: the two parts add up to the mean gap, ours never exceeds LoadGen's at the
    median, and at each percentile LoadGen's lies above ours by no less than the least
    per-sample gap and no more than the largest (what holds for every sample holds for
    each percentile)."""
    ours, lg = s["harness"][section], s["loadgen"]["latency_ms"]
    split = s["agreement"]["latency_split"]
    assert split is not None, "no latency split: the run needs enable_trace, and every sample matched"
    late, hand = split["loadgen_issue_lateness"], split["handover"]
    measured = f"LoadGen {lg}, ours {ours}; lateness {late}; hand-over {hand}"
    # means add up; 1 us of the trace's rounding
    assert abs(s["agreement"]["issue_delay_ms"] - (late["mean"] + hand["mean"])) <= 1e-3, measured
    assert ours["p50"] <= lg["p50"], measured  # our stamps lie inside LoadGen's
    for k in PERCENTILES:
        gap = lg[k] - ours[k]
        assert late["min"] + hand["min"] - 1e-3 <= gap <= late["max"] + hand["max"] + 1e-3, (k, measured)
    return late, hand, measured

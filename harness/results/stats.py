"""The statistics behind every figure the harness reports; no other module computes a percentile.

Percentiles over samples follow LoadGen's nearest-rank rule (loadgen/results.cc:
`sorted[n * p]`, the product truncated), so the harness's p50 of the same latencies is
LoadGen's p50, and the list is LoadGen's (results.h: .50 .90 .95 .97 .99 .999). A
percentile is given here in percent (99.9) because that names its key (`p99_9`);
`p / 100` is one ulp above LoadGen's literal 0.999 for p99.9, which picks the same rank
for every n (the product lies at least 0.001 from an integer unless it is one, and then
both round to it).

The weighted rule (`weighted_distribution`) is the same rule over values each counted
`weight` times: with integer weights it picks what the plain rule picks on the expanded
array, and with unit weights what it picks on the values themselves. Inter-token latency
uses it with tokens as weights.

Figures over a handful of repeated runs are a different question (is a change real?), so
they use the ordinary interpolated median and a Student-t interval (`over_runs`), withheld
when it would leave the range of a figure that cannot be negative.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

#: LoadGen's percentiles, in percent; every latency block of summary.json carries these.
PERCENTILES: tuple[float, ...] = (50, 90, 95, 97, 99, 99.9)
NS_PER_MS = 1e6


def percentile_key(p: float) -> str:
    """summary.json's key for a percentile: 50 -> "p50", 99.9 -> "p99_9"."""
    return f"p{p:g}".replace(".", "_")


PERCENTILE_KEYS: tuple[str, ...] = tuple(percentile_key(p) for p in PERCENTILES)


def rank(n: int, p: float) -> int:
    """Index of the p-th percentile (p in percent) in n sorted values: LoadGen's int(p * n),
    clamped to the last value (only reachable at p = 100)."""
    return min(n - 1, int(p / 100 * n))


def weighted_rank(cumulative: np.ndarray, p: float) -> int:
    """Index of the p-th percentile in values sorted by value, given their cumulative weights:
    the first value whose cumulative weight exceeds p % of the total."""
    return min(len(cumulative) - 1, int(np.searchsorted(cumulative, p / 100 * cumulative[-1], side="right")))


def is_sorted(values: np.ndarray) -> bool:
    """Ascending already (one pass, no copy of the values)."""
    return bool(len(values) < 2 or (values[1:] >= values[:-1]).all())


def percentile(sorted_values: np.ndarray, p: float) -> float:
    """The p-th percentile of values already sorted ascending."""
    return float(sorted_values[rank(len(sorted_values), p)])


def _empty(percentiles: Sequence[float]) -> dict[str, float | None]:
    return {**{percentile_key(p): None for p in percentiles}, "mean": None, "min": None, "max": None}


def distribution(values: np.ndarray, unit: float = 1.0, percentiles: Sequence[float] = PERCENTILES) -> dict[str, float | None]:
    """Percentiles (LoadGen's rule), mean, min and max, each divided by `unit` (NS_PER_MS:
    ns -> ms); every figure None when there are no values."""
    if len(values) == 0:
        return _empty(percentiles)
    values = np.asarray(values)
    # Already sorted (a report's latencies are sorted once for its CDF): no second sort.
    s = values if is_sorted(values) else np.sort(values)
    n = len(s)
    out: dict[str, float | None] = {percentile_key(p): float(s[rank(n, p)]) / unit for p in percentiles}
    out.update(mean=float(s.mean()) / unit, min=float(s[0]) / unit, max=float(s[-1]) / unit)
    return out


def weighted_distribution(
    values: np.ndarray, weights: np.ndarray | None = None, unit: float = 1.0, percentiles: Sequence[float] = PERCENTILES
) -> dict[str, float | None]:
    """`distribution` with each value counted `weight` times (None: once); the mean is the
    weighted mean."""
    if len(values) == 0:
        return _empty(percentiles)
    v = np.asarray(values, dtype=np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    total = cum[-1]
    out: dict[str, float | None] = {percentile_key(p): float(v[weighted_rank(cum, p)]) / unit for p in percentiles}
    out.update(mean=float((v * w).sum() / total) / unit, min=float(v[0]) / unit, max=float(v[-1]) / unit)
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is unknown or b is 0 (no ratio, rather than inf)."""
    return a / b if a is not None and b else None


def mean(values: np.ndarray) -> float | None:
    """The mean, or None for no values (numpy would warn and return nan)."""
    return float(np.mean(values)) if len(values) else None


# --- one figure over repeated runs --------------------------------------------------------

# Two-sided 95 % Student t quantiles by degrees of freedom; beyond 30 the normal 1.96.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)  # fmt: skip


def median(values: Sequence[float]) -> float | None:
    """The median of a few runs' figures (the middle two averaged for an even count); None for none."""
    return statistics.median(values) if values else None


def over_runs(values: list[float]) -> dict[str, Any]:
    """Median and spread of one figure over runs; ci95 is the t interval of the mean.

    A figure that cannot be negative (every value >= 0: a latency, a rate) gets no interval
    when the t interval would reach below zero: with so few runs and so much spread the
    normal approximation behind it does not hold, and "-0.63 – 7.92 ms" would claim a
    negative latency is plausible. ci95 is then None and `ci95_note` says why.
    """
    n = len(values)
    if n == 0:
        return {"n": 0, "values": [], "median": None, "min": None, "max": None, "mean": None, "stdev": None,
                "ci95": None, "ci95_note": "no runs", "relative_spread": None}  # fmt: skip
    avg = statistics.fmean(values)
    mid = statistics.median(values)
    sd = statistics.stdev(values) if n > 1 else None
    ci = None
    note = None
    if sd is None:
        note = "one run: no interval"
    else:
        half = (_T95[n - 2] if n - 1 <= len(_T95) else 1.96) * sd / math.sqrt(n)
        ci = [avg - half, avg + half]
        if min(values) >= 0 and ci[0] < 0:
            ci = None
            note = f"too few runs for this spread: the t interval of the mean would go below 0 (n={n})"
    return {
        "n": n, "values": values, "median": mid, "min": min(values), "max": max(values), "mean": avg,
        "stdev": sd, "ci95": ci, "ci95_note": note,
        "relative_spread": (max(values) - min(values)) / abs(mid) if mid else None,
    }  # fmt: skip

"""How far a client shard's clock is from the driver's: round-trip exchanges, as NTP does.

In one exchange the driver stamps t0 and sends; the shard answers with its own clock, t1;
the driver stamps t2 on arrival. Whatever the two hops took, the shard read its clock
between t0 and t2 of the driver's, so its offset (shard minus driver) lies in
[t1 - t2, t1 - t0]. Every exchange bounds it; the intersection of all the bounds is the
estimate, and half its width the uncertainty (a few microseconds over a socket pair,
about a millisecond through Ray here). An empty intersection means a clock moved during
the exchanges: then the shortest round trip alone is used, with its own bound.

On one host every process reads the same CLOCK_MONOTONIC (`perf_counter_ns`), so the
offset is zero by construction: `same_clock` says so, and the estimate is kept as a check
rather than applied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

#: exchanges per estimate: the shortest of 64 round trips is near the floor even on a busy host
EXCHANGES = 64


class ClockEstimate(TypedDict):
    offset_ns: int  # shard's clock minus the driver's
    uncertainty_ns: int  # the offset is within +- this
    rtt_min_ns: int  # the shortest round trip
    exchanges: int


def estimate_offset(exchanges: list[tuple[int, int, int]]) -> ClockEstimate:
    """The shard's offset from (t0, t1, t2) exchanges; see the module's docstring."""
    if not exchanges:
        raise ValueError("no clock exchanges")
    lo = max(t1 - t2 for t0, t1, t2 in exchanges)
    hi = min(t1 - t0 for t0, t1, t2 in exchanges)
    t0, t1, t2 = min(exchanges, key=lambda e: e[2] - e[0])
    if lo > hi:  # a clock moved between exchanges: trust the single best one
        lo, hi = t1 - t2, t1 - t0
    return {"offset_ns": (lo + hi) // 2, "uncertainty_ns": (hi - lo + 1) // 2, "rtt_min_ns": t2 - t0,
            "exchanges": len(exchanges)}


def clock_identity() -> str:
    """Which monotonic clock this process reads: the kernel's boot id. Processes with equal
    ids share CLOCK_MONOTONIC (same host, same boot); elsewhere the offset must be measured."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:  # not Linux: treat every process as its own clock
        import os
        import socket

        return f"{socket.gethostname()}:{os.getpid()}"


def describe(start: ClockEstimate, end: ClockEstimate | None, same_clock: bool, applied_ns: int) -> dict[str, Any]:
    """cluster.json's clock entry of one shard: both estimates, what was applied, the drift."""
    return {
        "same_clock": same_clock,
        "applied_offset_ns": applied_ns,
        "start": start,
        "end": end,
        "drift_ns": None if end is None else end["offset_ns"] - start["offset_ns"],
    }

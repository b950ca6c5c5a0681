"""How well a timed harness-owned schedule (arrivals, a trace) was kept, from the results
folder alone: the lag fields of summary.json's `schedule` section (harness.results.schedule
says whose schedule it is).

`schedule.parquet` (written by harness.child.schedule) holds each dispatched sample's
scheduled time; records.parquet its dispatch time. Their difference, per request, is the
schedule lag: the time a request left after it should have. A lag p99 above the run's
`schedule_lag_limit_ms` calls the run **degraded**: its figures describe a late replay,
and a slow-looking server may only be a late client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from harness.results import folder
from harness.results.records import Records, numpy_of
from harness.results.stats import NS_PER_MS, distribution

SCHEDULE_FILE = folder.SCHEDULE
DEFAULT_LAG_LIMIT_MS = 2.0  # run_config's default, for folders whose run.yaml predates the setting


def read_schedule(run_dir: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(query ids, scheduled ns) of every dispatched sample; None for a run without a schedule."""
    path = run_dir / SCHEDULE_FILE
    if not path.exists():
        return None
    import pyarrow.parquet as pq

    from harness.errors import ResultsError

    try:
        table = pq.read_table(path)
        return numpy_of(table["query_id"]), numpy_of(table["scheduled_ns"])
    except Exception as e:  # noqa: BLE001 - pyarrow's many error types: one line naming the file
        raise ResultsError(f"{path} is damaged ({type(e).__name__}: {e}); re-run the test") from e


def lags_ns(rec: Records, scheduled: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(scheduled ns, dispatch - scheduled ns) per request, in scheduled order: requests
    matched by query id; one never dispatched (a crash) has no lag."""
    qids, due = scheduled
    c = rec.columns
    order = np.argsort(c["query_id"], kind="stable")
    sorted_ids = c["query_id"][order]
    at = np.searchsorted(sorted_ids, qids)
    found = (at < len(sorted_ids)) & (sorted_ids[np.minimum(at, len(sorted_ids) - 1)] == qids)
    dispatch = c["dispatch_ns"][order][at[found]]
    due = due[found]
    by_time = np.argsort(due, kind="stable")
    return due[by_time], (dispatch - due)[by_time]


def per_second(due: np.ndarray, lag: np.ndarray) -> list[list[float]]:
    """[second from the first scheduled, requests scheduled, requests dispatched, worst lag ms]
    for each second: offered vs achieved load over time, with the lag."""
    t0 = due[0]
    sched = ((due - t0) // 1_000_000_000).astype(np.int64)
    sent = ((due + lag - t0) // 1_000_000_000).astype(np.int64)
    seconds = int(max(sched.max(), sent.max())) + 1
    offered = np.bincount(sched, minlength=seconds)
    achieved = np.bincount(np.maximum(sent, 0), minlength=seconds)
    worst = np.full(seconds, np.nan)
    np.fmax.at(worst, sched, lag / NS_PER_MS)
    return [[s, int(offered[s]), int(achieved[s]), None if np.isnan(worst[s]) else float(worst[s])]
            for s in range(seconds)]


def lag_section(run_dir: Path, rec: Records | None, config: dict[str, Any],
                child: dict[str, Any]) -> dict[str, Any] | None:
    """The schedule's figures (what was offered, when it left, the lag, degraded or not);
    None for a run with no timed schedule."""
    scheduled = read_schedule(run_dir)
    if scheduled is None or rec is None or not len(rec):
        return None
    due, lag = lags_ns(rec, scheduled)
    if not len(due):
        return None
    arrivals = config.get("arrivals") or {}
    dataset = child.get("dataset") or {}
    limit = config.get("schedule_lag_limit_ms", DEFAULT_LAG_LIMIT_MS)
    span_s = float(due[-1] - due[0]) / 1e9
    sent = due + lag
    sent_span_s = float(sent.max() - sent.min()) / 1e9
    lag_ms = distribution(lag, unit=NS_PER_MS)
    section: dict[str, Any] = {
        # poisson, gamma, constant, or the trace's format (`kind` is the schedule in words)
        "source": arrivals.get("kind") if arrivals else dataset.get("kind", "trace"),
        "requests": int(len(due)),
        # n requests over the span from the first to the last: n - 1 gaps
        "span_s": span_s,
        "offered_per_s": (len(due) - 1) / span_s if span_s > 0 else None,
        "achieved_per_s": (len(due) - 1) / sent_span_s if sent_span_s > 0 else None,
        "lag_ms": lag_ms,
        "lag_limit_ms": limit,
        "degraded": bool(lag_ms["p99"] is not None and lag_ms["p99"] > limit),
        "per_second": per_second(due, lag),
    }
    if arrivals:
        section["arrivals"] = arrivals
    else:
        section["trace"] = {k: dataset.get(k) for k in ("path", "format", "rows", "time_scale", "start_s", "end_s",
                                                        "max_idle_s", "skipped_failed_rows")}
    return section


def degraded_line(section: dict[str, Any]) -> str:
    """The report's one line for a degraded run."""
    lag = section["lag_ms"]
    return (f"DEGRADED: send lag p99 {_ms(lag['p99'])} ms > {_ms(section['lag_limit_ms'])} ms, "
            "a late client, not a slow server")


def _ms(v: float) -> str:
    """12,345 or 1.05: never 1.23e+04 (the line must fit 80 columns)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"

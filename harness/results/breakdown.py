"""Where each request's time went, and whether the load that was asked for was delivered.

Stages of one successful request, from records.parquet (one monotonic clock per run):

    queue       issue → dispatch            waited in the harness for a free worker
    service     dispatch → first token      (generative), first byte (HTTP), or completion
    generation  first token/byte → complete (0 for non-streaming backends)

They partition the request exactly: queue + service + generation = complete − issue,
so the stage that dominates is the one to fix. On a schedule the harness owns (a closed
loop: harness.results.schedule) LoadGen issues every sample at once and the queue stage is
that backlog, held by the harness until a slot frees: views name it so (`stage_labels`). A backend may also report its own stages
(e.g. tokenize, inference) in `stages.jsonl`, one line per request:
`{"query_id": 1, "stages_ms": {"inference": 1.9}}`; they subdivide service time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.results import folder
from harness.results.loadgen_log import loadgen_scenario
from harness.results.records import ok_mask
from harness.results.schedule import BACKLOG
from harness.results.stats import NS_PER_MS, distribution

STAGES = ("queue", "service", "generation")
#: completed below this fraction of the offered rate: the SUT did not keep up
SATURATION_RATIO = 0.95


def stage_labels(backlog: bool) -> dict[str, str]:
    """Each stage's name in the views; `backlog`: the run's schedule is the harness's own, so
    issue → dispatch is the backlog LoadGen issued at once, not a queue of the system."""
    return {"queue": BACKLOG if backlog else "queue", "service": "service", "generation": "generation"}


def _first_answer(columns: Mapping[str, Any]) -> np.ndarray:
    """The first sign of an answer: first token if the backend streams tokens, else first
    byte (HTTP), else nothing before completion."""
    first = np.where(columns["first_token_ns"] > 0, columns["first_token_ns"], columns["first_byte_ns"])
    return np.where(first > 0, first, columns["complete_ns"])


def stage_ns(columns: Mapping[str, Any], name: str, rows: np.ndarray | None = None) -> np.ndarray:
    """One stage's durations (ns), of the rows of the mask `rows` (all rows when None).

    One stage at a time: a run of 10^7 records holds one array of durations, not four."""
    if name == "queue":
        start, end = columns["issue_ns"], columns["dispatch_ns"]
    elif name == "e2e":
        start, end = columns["issue_ns"], columns["complete_ns"]
    elif name == "service":
        start, end = columns["dispatch_ns"], _first_answer(columns)
    elif name == "generation":
        start, end = _first_answer(columns), columns["complete_ns"]
    else:
        raise KeyError(name)
    if rows is None or (len(rows) and rows.all()):  # every row: no masked copies
        return end - start
    out = end[rows]
    out -= start[rows]  # in place: two arrays of the rows at a time, not three
    return out


def stage_times_ns(columns: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Per-request stage durations (ns) for every row, failed ones included."""
    return {name: stage_ns(columns, name) for name in (*STAGES, "e2e")}


def _stats_ms(values_ns: np.ndarray) -> dict[str, float | None]:
    d = distribution(values_ns, unit=NS_PER_MS, percentiles=(50, 99))
    return {"mean_ms": d["mean"], "p50_ms": d["p50"], "p99_ms": d["p99"]}


def aggregate(columns: Mapping[str, Any], ok: np.ndarray | None = None) -> dict[str, Any]:
    """Stage statistics over successful requests (`ok`: their mask, computed when None);
    `share` is of the mean end-to-end latency.

    Means add up (percentiles do not), so the shares of the mean sum to 1 and name the
    dominant stage honestly.
    """
    ok = ok_mask(columns) if ok is None else ok
    e2e = stage_ns(columns, "e2e", ok)
    e2e_stats = _stats_ms(e2e)
    e2e_mean = float(e2e.mean()) if len(e2e) else 0.0
    del e2e
    stages: dict[str, dict[str, float | None]] = {}
    for name in STAGES:
        times = stage_ns(columns, name, ok)
        st = _stats_ms(times)
        st["share"] = float(times.mean()) / e2e_mean if e2e_mean > 0 else None
        stages[name] = st
    streaming = bool(((columns["first_token_ns"] > 0) | (columns["first_byte_ns"] > 0))[ok].any())
    dominant = max(STAGES, key=lambda k: stages[k]["share"] or 0.0) if e2e_mean > 0 else None
    return {
        "requests": int(ok.sum()),
        "e2e": e2e_stats,
        "stages": stages,
        "dominant": dominant,
        "service_ends_at": "first token or first byte" if streaming else "completion",
    }


def aggregate_from_summary(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The same aggregate from summary.json alone, for runs where nothing streamed.

    summary.json's queue and service figures use these definitions on the same successful
    records (queue + service = latency when there is no first token), so reading a
    multi-GB records.parquet again would only repeat them. None when that does not hold.
    """
    ours = summary.get("harness") or {}
    if summary.get("tokens") or not ours.get("succeeded") or "queue_ms" not in ours:
        return None
    e2e_mean = ours["latency_ms"]["mean"] or 0.0
    stages: dict[str, dict[str, float | None]] = {}
    for name, block in (("queue", ours["queue_ms"]), ("service", ours["service_ms"])):
        stages[name] = {"mean_ms": block["mean"], "p50_ms": block["p50"], "p99_ms": block["p99"],
                        "share": block["mean"] / e2e_mean if e2e_mean > 0 else None}
    stages["generation"] = {"mean_ms": 0.0, "p50_ms": 0.0, "p99_ms": 0.0, "share": 0.0 if e2e_mean > 0 else None}
    lat = ours["latency_ms"]
    return {
        "requests": int(ours["succeeded"]),
        "e2e": {"mean_ms": lat["mean"], "p50_ms": lat["p50"], "p99_ms": lat["p99"]},
        "stages": stages,
        "dominant": max(STAGES, key=lambda k: stages[k]["share"] or 0.0) if e2e_mean > 0 else None,
        "service_ends_at": "completion",
    }


def backend_stages(run_dir: Path) -> dict[str, dict[str, float | None]] | None:
    """Mean and p99 of each stage a backend reported in stages.jsonl; None when there is no file."""
    if not (run_dir / folder.STAGES).is_file():
        return None
    values: dict[str, list[float]] = {}
    for entry in folder.read_jsonl(run_dir, folder.STAGES):
        for name, ms in (entry.get("stages_ms") or {}).items():
            values.setdefault(str(name), []).append(float(ms))
    out: dict[str, dict[str, float | None]] = {}
    for name, v in values.items():
        d = distribution(np.asarray(v), percentiles=(99,))
        out[name] = {"mean_ms": d["mean"], "p99_ms": d["p99"], "requests": len(v)}
    return out


def rates(summary: dict[str, Any]) -> dict[str, Any]:
    """Target vs offered vs achieved rate, and a plain verdict when the load was not delivered.

    Target is what was asked (Server: target_qps), offered is what LoadGen scheduled,
    completed counts every answered sample, succeeded only the good ones. A gap between
    target and offered means the load generator (the client) fell behind; between offered
    and completed, the SUT did.
    """
    scenario = loadgen_scenario(summary["run"]["scenario"])
    lg = summary.get("loadgen") or {}
    ours = summary.get("harness") or {}
    eff = lg.get("effective_settings") or {}
    target = float(eff["target_qps"]) if scenario == "Server" and eff.get("target_qps") else None
    peak = (summary.get("find_peak") or {}).get("peak_qps")
    if peak:  # FindPeakPerformance: the reported round ran at the rate LoadGen settled on
        target = float(peak)
    offered = lg.get("scheduled_samples_per_s") if scenario == "Server" else None
    duration = ours.get("duration_s") or 0.0
    completed = ours["samples"] / duration if ours.get("samples") and duration > 0 else None
    succeeded = ours.get("throughput_per_s")
    notes: list[str] = []
    saturated = None
    client_behind = None
    if target and completed is not None:
        # Judge the SUT against what LoadGen really offered: Poisson arrivals over a short
        # run miss the target by a few percent by chance (1 s at 300/s: ±17 queries, 1 sigma).
        basis = offered or target
        saturated = completed < SATURATION_RATIO * basis
        expected = target * duration
        client_behind = offered is not None and expected > 0 and (target - offered) * duration > 3 * np.sqrt(expected)
        if client_behind:
            notes.append(
                f"LoadGen scheduled only {offered:,.1f}/s of the {target:,.1f}/s target, more than chance "
                "explains: the load generator (client side) fell behind"
            )
        if saturated:
            notes.append(
                f"the SUT completed {completed:,.1f}/s of {basis:,.1f}/s offered: it is saturated, "
                "so queue time grows for the whole run"
            )
    return {
        "target_per_s": target,
        "offered_per_s": offered,
        "completed_per_s": completed,
        "succeeded_per_s": succeeded,
        "achieved_ratio": completed / target if target and completed is not None else None,
        "saturated": saturated,
        "client_behind": client_behind,
        "notes": notes,
    }


def time_series(columns: Mapping[str, Any], bins: int | None = None, ok: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Completions per second and mean stage times in equal time bins from the first issue.

    By default about 20 requests per bin (5 to 60 bins): fewer per bin and the rates and
    means are mostly noise, or empty bins.
    """
    issue, complete = columns["issue_ns"], columns["complete_ns"]
    if bins is None:
        bins = int(np.clip(len(issue) // 20, 5, 60))
    ok = ok_mask(columns) if ok is None else ok
    t0 = int(issue.min())
    span = (int(complete.max()) - t0) / 1e9 if len(complete) else 0.0
    edges = np.linspace(0.0, max(span, 1e-6), bins + 1)
    width = edges[1] - edges[0]
    # Bins over integer ns (edges rounded up): no float copy of every time is made.
    edges_ns = t0 + np.ceil(edges * 1e9).astype(np.int64)
    edges_ns[-1] = max(int(edges_ns[-1]), int(complete.max()) if len(complete) else t0)

    def per_bin(times_ns: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(edges_ns, times_ns, side="right") - 1, 0, bins - 1)

    idx = per_bin(complete[ok])
    counts = np.bincount(idx, minlength=bins)
    means: dict[str, np.ndarray] = {}
    for name in STAGES:
        sums = np.bincount(idx, weights=stage_ns(columns, name, ok), minlength=bins)
        means[name] = np.divide(sums, counts, out=np.zeros(bins), where=counts > 0) / 1e6
    return {
        "edges_s": edges,
        "ok_per_s": counts / width,
        "failed_per_s": np.bincount(per_bin(complete[~ok]), minlength=bins) / width,
        "issued_per_s": np.bincount(per_bin(issue), minlength=bins) / width,
        "ok_count": counts,
        **{f"{k}_mean_ms": v for k, v in means.items()},
    }

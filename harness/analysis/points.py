"""One sweep point from its results folder: the figures a curve plots, and whether it meets
the targets (and, when not, which constraint bound it).

A sweep (harness.run.sweep) and a capacity search (harness.run.capacity) are folders of
ordinary runs; `point_entry` is what their sweep.json keeps per run, so the curves, the
knee, the capacity and the diagnosis are all computed from these entries and traceable to
each run's own summary.json.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from harness.analysis.compare import headline
from harness.errors import ResultsError
from harness.results import folder
from harness.results.loadgen_log import loadgen_scenario
from harness.results.records import read_records, records_path
from harness.results.schedule import timed_from_dispatch
from harness.results.summary import read_summary, success_rate_failed

#: a run whose completed rate falls this far below what LoadGen offered is saturated
SATURATED = 0.95


def point_entry(run_dir: Path, values: dict[str, Any], role: str = "point") -> dict[str, Any]:
    """The figures of one finished run, by name, for sweep.json."""
    summary = read_summary(run_dir)
    lg = summary.get("loadgen") or {}
    ours = summary.get("harness") or {}
    tokens = summary.get("tokens") or {}
    eff = lg.get("effective_settings") or {}
    scenario = loadgen_scenario(summary["run"]["scenario"])
    latency_mean = (ours.get("latency_ms") or {}).get("mean")
    queue_mean = (ours.get("queue_ms") or {}).get("mean")
    offered = lg.get("scheduled_samples_per_s") if scenario == "Server" else None
    config = folder.read_run_config(run_dir, required=False) or {}
    concurrency = config.get("concurrency")
    # whose schedule (harness.results.schedule); a timed one's offered rate is in it too
    schedule = summary.get("schedule") if isinstance(summary.get("schedule"), dict) else None
    goodput = tokens.get("goodput") or _e2e_goodput(run_dir, summary)
    succeeded = ours.get("succeeded") or 0
    token_run = bool(config.get("use_token_latencies"))
    lg_bounds = (tokens.get("loadgen") or {}) if token_run else {}
    figures = headline(run_dir)  # timed from dispatch on a schedule the harness owns
    from_dispatch = timed_from_dispatch(summary)
    # the share of the latency from issue spent before dispatch: a queue in the client on
    # LoadGen's schedule; on the harness's own, the backlog LoadGen issued at once
    queue_share = queue_mean / latency_mean if queue_mean is not None and latency_mean else None
    if schedule is not None and schedule.get("offered_per_s") is not None:
        offered = schedule["offered_per_s"]  # a timed schedule's offered rate (harness.results.schedule_lag)
    if from_dispatch:
        service = ours.get("service_ms") or {}
        latency_mean = service.get("mean") if service else latency_mean
    return {
        "values": values,
        "concurrency": concurrency,
        "latency_from": "dispatch" if from_dispatch else "issue",
        # what queue_share measures: the harness's own backlog, not a wait for the system
        "backlog": from_dispatch,
        "role": role,
        "status": summary["status"],
        "samples": ours.get("samples"),
        "incomplete_reason": summary.get("incomplete_reason"),
        "scenario": summary["run"]["scenario"],
        "validity": summary["validity"]["result"],
        "reasons": list(summary["validity"].get("reasons") or []),
        "flags": {k: summary["validity"].get(k) for k in
                  ("min_duration_met", "min_queries_met", "perf_constraints_met", "early_stopping_met")},
        "success_rate_ok": not success_rate_failed(summary),
        "clock_ok": (summary["validity"].get("harness") or {}).get("clock_ok"),
        "target_qps": eff.get("target_qps") if scenario == "Server" else None,
        "offered_per_s": offered,
        # LoadGen's figure where it has one (the headline), the harness's otherwise
        "completed_per_s": lg.get("throughput_per_s") or ours.get("throughput_per_s"),
        "metrics": figures,
        "loadgen_latency_ms": {k: (lg.get("latency_ms") or {}).get(k) for k in ("min", "p50", "p99")},
        "latency_mean_ms": latency_mean,
        "latency_bound_ms": (eff.get("target_latency_ns") or 0) / 1e6 or None,
        "latency_percentile": eff.get("target_latency_percentile") if scenario == "Server" else None,
        # the TTFT/TPOT bounds LoadGen judged by (its detail log's requested ones: an LLM
        # benchmark's come from mlperf.conf, Interactive's tighter), else the run's settings
        "ttft_bound_ms": lg_bounds.get("ttft_bound_ms") or (config.get("ttft_latency_ms") if token_run else None),
        "tpot_bound_ms": lg_bounds.get("tpot_bound_ms") or (config.get("tpot_latency_ms") if token_run else None),
        "queue_ms": queue_mean,
        "queue_share": queue_share,
        "goodput_rate": goodput.get("rate"),
        "goodput_per_s": goodput.get("per_s"),
        "slo": (tokens.get("slo") or {}).get("attainment") or goodput.get("attainment"),
        "input_tokens_mean": tokens["input_tokens"] / succeeded if tokens.get("input_tokens") and succeeded else None,
        "output_tokens_mean": tokens.get("output_tokens_per_request_mean"),
        "cost_per_success": (folder.read_json(run_dir, folder.COST) or {}).get("per_successful_task"),
        # the answers' accuracy at this point (its CI and answer length), for the diagnosis
        "text_accuracy": _text_accuracy(summary),
        # why a point whose dataset has references got no score (None: scored, or nothing to score)
        "text_accuracy_not_scored": _not_scored(run_dir, summary),
        # telemetry's verdict on the load generator (None: not measured)
        "client_saturated": ((summary.get("telemetry") or {}).get("client") or {}).get("saturated"),
        "client_signals": ((summary.get("telemetry") or {}).get("client") or {}).get("signals") or [],
    }


def _text_accuracy(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The headline text score of a point (ROUGE-1, else exact match), its 95 % interval,
    answer count and tokens per answer; None when the run's answers were not scored."""
    section = summary.get("text_accuracy") or {}
    rouge, exact = section.get("rouge"), section.get("exact_match")
    if rouge:
        figure, value, ci, tokens = "rouge1", rouge["rouge1"], (rouge.get("ci95") or {}).get("rouge1"), rouge.get("tokens_per_sample")
    elif exact:
        figure, value, ci, tokens = "accuracy", exact["exact_match"], exact.get("ci95"), exact.get("tokens_per_sample")
    else:
        return None
    return {"figure": figure, "value": value, "ci95": ci, "answers": section.get("answers"),
            "tokens_per_sample": tokens, "label": section.get("label")}


def _not_scored(run_dir: Path, summary: dict[str, Any]) -> str | None:
    """Why a run with references has no text score: the scorer's error, or no answer given."""
    section = summary.get("text_accuracy")
    if isinstance(section, dict) and section.get("error"):
        return str(section["error"])
    if section is None and (run_dir / folder.REFERENCES).is_file():
        return "no answer was recorded (every request failed, or no tokens.jsonl)"
    return None


def _e2e_goodput(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """For a run without token figures (a tensor backend): the share of its requests that
    succeeded within the config's `slo.e2e_ms`, from the records ({} when no target)."""
    import numpy as np

    target = ((folder.read_run_config(run_dir, required=False) or {}).get("slo") or {}).get("e2e_ms")
    if not target or records_path(run_dir) is None:
        return {}
    c = read_records(run_dir).columns
    n = len(c["status"])
    # from dispatch on a schedule the harness owns, as the headline (its issue starts the backlog)
    start = c["dispatch_ns"] if timed_from_dispatch(summary) else c["issue_ns"]
    met = (np.asarray(c["status"]) == "ok") & ((c["complete_ns"] - start) / 1e6 <= target)
    span_s = (summary.get("harness") or {}).get("duration_s") or 0.0
    rate = float(met.sum()) / n if n else None
    return {"rate": rate, "per_s": float(met.sum()) / span_s if span_s else None,
            "attainment": {"e2e_ms": {"target": target, "met": int(met.sum()), "rate": rate}}}


def saturated(entry: dict[str, Any]) -> bool:
    """The SUT completed clearly less than LoadGen offered (Server only).

    LoadGen's completed rate counts to the last completion, its offered rate to the last
    issue: even an idle system trails by the last request's latency, at least the shortest
    one LoadGen measured. Over a run of N queries offered at λ that is a share of about
    λ x latency / N: 1/N for a short latency (16 LLM queries: 6 % short at a rate they
    met), but 20 queries at 32/s whose every answer takes 700 ms (Little's law: 22 in
    flight) trail by half the run while the server keeps up. So a deficit counts as
    saturation past 5 %, or past (2 + λ x shortest latency) / N, whichever is larger. A
    saturated server's deficit grows with its queue, not with its shortest latency."""
    offered, completed = entry.get("offered_per_s"), entry.get("completed_per_s")
    n = entry.get("samples") or 0
    shortest = (entry.get("loadgen_latency_ms") or {}).get("min")  # absent in older sweep.json
    in_flight = offered * shortest / 1e3 if offered and shortest else 0.0
    allowed = max(1 - SATURATED, (2 + in_flight) / n if n else 0.0)
    return bool(offered and completed is not None and completed < (1 - allowed) * offered)


def verdict(entry: dict[str, Any], attainment: float | None = None) -> tuple[bool, str | None]:
    """(passed, the constraint that bound it). Without `attainment`: LoadGen's VALID and the
    harness's success-rate rule. With it: the share of requests meeting every `slo` target
    (goodput / requests) must reach `attainment`, and the success rate its minimum."""
    if entry.get("status") == "crashed":
        return False, "crashed"
    if entry.get("status") != "complete":
        return False, "incomplete"
    if not entry.get("success_rate_ok", True):
        return False, "success rate"
    if entry.get("clock_ok") is False:
        return False, "clock stepped"
    if attainment is not None:
        rate = entry.get("goodput_rate")
        if rate is None:
            return False, "no SLO figures (set slo.* targets)"
        if rate >= attainment:
            return True, None
        worst = min((entry.get("slo") or {}).items(), key=lambda kv: kv[1].get("rate") or 0.0, default=None)
        return False, f"SLO {worst[0]}" if worst else "SLO attainment"
    if entry.get("validity") == "VALID":
        return True, None
    return False, bound_of_invalid(entry)


def bound_of_invalid(entry: dict[str, Any]) -> str:
    """The constraint an INVALID run broke, most specific first, in a word or two: client
    saturated (telemetry says the load generator could not keep up), saturated, p99 latency (Server; p90 latency at a 0.9 target percentile) or latency
    bound, TTFT p99, TPOT p99, early stopping (too few queries to bound the percentile),
    too short (min_duration_s/min_query_count)."""
    flags = entry.get("flags") or {}
    if entry.get("client_saturated"):
        # the load generator, not the SUT, may have been the limit: what the SUT could do is unknown
        return "client saturated"
    if saturated(entry):
        return "saturated"
    if flags.get("perf_constraints_met") is False:
        ttft_bound, tpot_bound = entry.get("ttft_bound_ms"), entry.get("tpot_bound_ms")
        m = entry.get("metrics") or {}
        if ttft_bound and (m.get("ttft_p99") or 0) > ttft_bound:
            return "TTFT p99"
        if tpot_bound and (m.get("tpot_p99") or 0) > tpot_bound:
            return "TPOT p99"
        if loadgen_scenario(entry.get("scenario") or "") != "Server":
            return "latency bound"
        return f"p{(entry.get('latency_percentile') or 0.99) * 100:g} latency"
    if flags.get("early_stopping_met") is False:
        return "early stopping"
    if flags.get("min_duration_met") is False or flags.get("min_queries_met") is False:
        return "too short"
    return "LoadGen"


def crashed_entry(values: dict[str, Any], error: str, run_dir: Path | None, role: str = "point") -> dict[str, Any]:
    return {"values": values, "role": role, "status": "crashed", "error": error,
            "run_dir_hint": str(run_dir) if run_dir else None}


def knee(entries: list[dict[str, Any]]) -> int | None:
    """Index (into `entries`, in load order) of the point after which mean latency rises
    faster than throughput: between it and the next point, latency's relative rise exceeds
    throughput's. (Mean, not p99: a tail of a few hundred samples is too noisy to place it;
    for a single-server queue this is where the utilization passes about one half.)
    None with fewer than three usable points."""
    usable = [
        (i, e["completed_per_s"], e.get("latency_mean_ms"))
        for i, e in enumerate(entries)
        if e.get("status") == "complete" and e.get("completed_per_s") and e.get("latency_mean_ms")
    ]
    if len(usable) < 3:
        return None
    for (i, t0, l0), (_, t1, l1) in itertools.pairwise(usable):
        if (l1 - l0) / l0 > max((t1 - t0) / t0, 0.0):
            return i
    return None


def load_sweep(sweep_dir: Path) -> dict[str, Any]:
    """sweep.json of a sweep or capacity folder, checked enough that every view can index it."""
    data = folder.read_json(sweep_dir, folder.SWEEP, required=True) or {}
    points = data.get("points")
    if not isinstance(points, list) or not all(isinstance(p, dict) and isinstance(p.get("index"), int) for p in points):
        raise ResultsError(f"{sweep_dir / folder.SWEEP} is damaged: `points` is not a list of entries with an index")
    for key in ("kind", "state", "scenario", "backend"):
        if not isinstance(data.get(key), str):
            raise ResultsError(f"{sweep_dir / folder.SWEEP} is damaged: no {key!r}")
    return data


def is_sweep(path: Path) -> bool:
    return (path / folder.SWEEP).is_file()

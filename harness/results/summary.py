"""summary.json: LoadGen's figures and ours, side by side, built only from the results folder.

Ours come from records.parquet: latency = complete - issue of each *successful* sample (a
failed sample never counts as a fast success), queue = dispatch - issue, service =
complete - dispatch. LoadGen's come from mlperf_log_detail.txt. `agreement` holds the
ratio ours/LoadGen for the figures both measure, so a drift is visible, and tests pin it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ResultsError
from harness.results import folder
from harness.results.breakdown import rates
from harness.results.explain import explain
from harness.results.folder import SCHEMA_VERSION
from harness.results.loadgen_trace import read_trace_samples, split_against, split_queries_against
from harness.results.media import media_summary
from harness.results.loadgen_log import LOG_SPAN_MS, effective_settings, loadgen_scenario, read_accuracy_log, read_detail
from harness.results.text_accuracy import summary_section as text_accuracy
from harness.results.transcription import transcription_section
from harness.results.find_peak import FIND_PEAK, final_round
from harness.results.find_peak import summary_section as find_peak_section
from harness.results.records import Records, read_records, records_path
from harness.results.rerank import rerank_section
from harness.results.schedule import schedule_section
from harness.results.schedule_lag import lag_section
from harness.results.stats import NS_PER_MS, PERCENTILES, distribution, percentile_key, ratio
from harness.results.sessions import session_summary
from harness.results.vector_metrics import vector_summary
from harness.results.token_metrics import read_token_entries, token_summary
from harness.results.distribute import replica_summary, shard_summary
from harness.results.telemetry import telemetry_summary


def percentiles_ms(values_ns: np.ndarray) -> dict[str, float | None]:
    """A latency block of summary.json: LoadGen's percentiles of ns values, mean, min, max, in ms."""
    return distribution(values_ns, unit=NS_PER_MS)


def _loadgen_latency_ms(lg: dict[str, Any], per_query: bool) -> dict[str, float | None]:
    mid = "per_query_" if per_query else ""
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        v = lg.get(f"result_{p:.2f}_percentile_{mid}latency_ns")
        out[percentile_key(p)] = v / NS_PER_MS if v is not None else None
    q = "query_" if per_query else ""
    for stat in ("mean", "min", "max"):
        v = lg.get(f"result_{stat}_{q}latency_ns")
        out[stat] = v / NS_PER_MS if v is not None else None
    return out


def _loadgen_throughput(scenario: str, lg: dict[str, Any]) -> float | None:
    key = {
        "Offline": "result_samples_per_second",
        "Server": "result_completed_samples_per_sec",
        "SingleStream": "result_qps_with_loadgen_overhead",
    }.get(scenario)
    v = lg.get(key) if key else None
    return float(v) if v is not None else None


def _accuracy(run_dir: Path, child: dict[str, Any]) -> dict[str, Any] | None:
    entries = read_accuracy_log(run_dir)
    fmt = child.get("response_format")
    labels_path = run_dir / folder.LABELS
    if not entries or not fmt:
        return None
    dtype = np.dtype(fmt["dtype"])
    result: dict[str, Any] = {"logged_samples": len(entries)}
    if not labels_path.exists():
        result["metric"] = None
        result["note"] = "the dataset has no labels: outputs logged, no metric computed"
        return result
    labels = np.load(labels_path)
    seen: dict[int, int] = {}
    for e in entries:
        data = bytes.fromhex(e["data"])
        if not data:
            continue  # a failed sample: no output to score, counted wrong below
        out = np.frombuffer(data, dtype=dtype)
        seen[int(e["qsl_idx"])] = int(out.argmax())
    idx = sorted({int(e["qsl_idx"]) for e in entries})
    correct = sum(1 for i in idx if seen.get(i) == int(labels[i]))
    result.update(metric="top1", value=correct / len(idx) if idx else None, scored_samples=len(idx), correct=correct)
    return result


#: RunConfig.min_success_rate's default (results cannot import config; a test pins that they agree)
DEFAULT_MIN_SUCCESS_RATE = 0.95


def harness_validity(
    loadgen_result: str | None, ours: dict[str, Any], min_success_rate: float, clock_ok: bool | None = None
) -> dict[str, Any]:
    """summary.json's validity.harness: LoadGen's VALID speaks of latencies only (a failed
    sample is timed like any other), so the harness also fails a run whose samples failed,
    and one during which the wall clock LoadGen times with was stepped (`clock_check`)."""
    rate = ours.get("success_rate") if ours.get("samples") else None
    ok = None if rate is None else bool(rate >= min_success_rate)
    rejected = ok is False or clock_ok is False
    return {"result": "INVALID" if rejected else loadgen_result, "min_success_rate": min_success_rate,
            "success_rate_ok": ok, "clock_ok": clock_ok}


#: LoadGen's clock and the harness's may disagree by this much (s, or share of the test)
CLOCK_SLACK_S, CLOCK_SLACK = 1.0, 0.10


def clock_check(lg: dict[str, Any], test_s: Any) -> tuple[bool | None, str | None]:
    """(clock_ok, the reason when not). LoadGen stamps its log and times its queries with
    std::chrono::high_resolution_clock, which is the wall clock in libstdc++; the child
    times the test with a monotonic clock. If the wall clock was stepped during the test
    (NTP, a VM's time sync: seen here, a 0.5 s test whose LoadGen log spans 10.5 s, every
    latency 10 s), the two disagree, and LoadGen's latencies and rates are wrong."""
    span_ms = lg.get(LOG_SPAN_MS)
    if not isinstance(test_s, (int, float)) or not isinstance(span_ms, (int, float)) or test_s <= 0:
        return None, None
    span_s = span_ms / 1e3
    if abs(span_s - test_s) <= max(CLOCK_SLACK_S, CLOCK_SLACK * test_s):
        return True, None
    return False, (
        f"the system clock was stepped during the test: LoadGen's log spans {span_s:.3g} s, the test took "
        f"{test_s:.3g} s by a monotonic clock; LoadGen times with the wall clock, so its latencies and rates are wrong"
    )


def success_rate_failed(summary: dict[str, Any]) -> bool:
    """Too many samples failed (validity.harness)."""
    validity = summary.get("validity")
    harness = validity.get("harness") if isinstance(validity, dict) else None
    return isinstance(harness, dict) and harness.get("success_rate_ok") is False


def harness_rejected(summary: dict[str, Any]) -> bool:
    """The harness's verdict is negative whatever LoadGen says: too many samples failed,
    or the clock was stepped during the test (validity.harness)."""
    validity = summary.get("validity")
    harness = validity.get("harness") if isinstance(validity, dict) else None
    return success_rate_failed(summary) or (isinstance(harness, dict) and harness.get("clock_ok") is False)


#: what every reader indexes without a guard: section -> (its type, {key: the key's types})
_SHAPE: dict[str, tuple[type, dict[str, tuple[type, ...]]]] = {
    "run": (dict, {"name": (str,), "scenario": (str,), "mode": (str,), "backend": (str,)}),
    "status": (str, {}),
    "validity": (dict, {"reasons": (list,), "fixes": (list,)}),
    "loadgen": (dict, {"latency_ms": (dict,)}),
    "harness": (dict, {"samples": (int,)}),
}
#: the harness section's figures, present whenever it counted samples
_COUNTED = {"succeeded": (int,), "failed": (int,), "success_rate": (int, float), "failures_by_reason": (dict,),
            "latency_ms": (dict,), "queue_ms": (dict,), "service_ms": (dict,)}
_OPTIONAL = ("agreement", "schedule", "tokens", "accuracy", "text_accuracy", "timings_s", "sut", "backend", "dataset",
             "rerank")


#: sections of figures, less their keys that hold text or settings
_NUMERIC = {
    "harness": (),
    "agreement": ("latency_note",),
    "timings_s": (),
    "loadgen": ("errors", "warnings", "version", "effective_settings"),
}


def _numbers(value: Any, where: str) -> str | None:
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _numbers(item, f"{where}.{key}")
            if problem:
                return problem
        return None
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return None
    return f"{where} is a {type(value).__name__}, not a number"


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def shape_problem(summary: dict[str, Any]) -> str | None:
    """What makes a summary.json unreadable for the renderers and verbs, in words; None if
    nothing. A file edited by hand or cut off is named, never a KeyError deep in a report."""
    for section, (kind, keys) in _SHAPE.items():
        value = summary.get(section)
        if not isinstance(value, kind):
            what = "missing" if section not in summary else f"a {type(value).__name__}, not a {kind.__name__}"
            return f"section {section!r} is {what}"
        if section == "harness" and value.get("samples"):
            keys = keys | _COUNTED
        for key, types in keys.items():
            item = value.get(key)
            if not isinstance(item, types) or isinstance(item, bool):
                what = "missing" if key not in value else f"a {type(item).__name__}"
                return f"{section}.{key} is {what}, not a {' or '.join(t.__name__ for t in types)}"
    for section, texts in _NUMERIC.items():  # figures the renderers format as numbers
        value = summary.get(section)
        if isinstance(value, dict):
            problem = _numbers({k: v for k, v in value.items() if k not in texts}, section)
            if problem:
                return problem
    lg = summary["loadgen"]
    for key in ("errors", "warnings"):
        if lg.get(key) is not None and not _strings(lg[key]):
            return f"loadgen.{key} is not a list of text"
    if lg.get("effective_settings") is not None and not isinstance(lg["effective_settings"], dict):
        return "loadgen.effective_settings is not an object"
    for key in ("reasons", "fixes"):
        if not _strings(summary["validity"][key]):
            return f"validity.{key} is not a list of text"
    verdict = summary["validity"].get("harness")
    if verdict is not None and not (
        isinstance(verdict, dict) and isinstance(verdict.get("min_success_rate"), (int, float))
        and verdict.get("success_rate_ok") in (True, False, None)
    ):
        return "validity.harness is not {result, min_success_rate, success_rate_ok}"
    for section in _OPTIONAL:
        if summary.get(section) is not None and not isinstance(summary[section], dict):
            return f"section {section!r} is a {type(summary[section]).__name__}, not an object"
    return None


def check_shape(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    problem = shape_problem(summary)
    if problem:
        raise ResultsError(
            f"{run_dir / folder.SUMMARY} is damaged: {problem} (cut off or edited by hand); rebuild it with "
            "harness.results.summary.write_summary(DIR, {}) or re-run the test"
        )
    return summary


def read_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json, with the sections every reader indexes checked: damage is a ResultsError."""
    return check_shape(run_dir, folder.load_summary(run_dir))


def min_success_rate_of(config: dict[str, Any]) -> float:
    value = config.get("min_success_rate")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else DEFAULT_MIN_SUCCESS_RATE


def _harness_section(rec: Records | None, multistream: bool) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """Ours, from the records: the successful samples' latency, queue and service times,
    failures by reason, and the window the samples span (the telemetry's window too)."""
    if rec is None or not len(rec):
        return {"samples": 0}, None
    c = rec.columns
    ok = rec.ok()
    n, n_ok = len(rec), int(ok.sum())
    latency = (c["complete_ns"] - c["issue_ns"])[ok]
    window = (int(c["issue_ns"].min()), int(c["complete_ns"].max()))
    span_ns = window[1] - window[0]
    failures: Counter[str] = Counter()
    if n_ok < n:
        for error, k in rec.text_counts("error", ~ok).items():
            failures[error.split(":", 1)[0] or "error"] += k
    ours: dict[str, Any] = {
        "samples": n,
        "succeeded": n_ok,
        "failed": n - n_ok,
        "success_rate": n_ok / n,
        "failures_by_reason": dict(failures),
        "duration_s": span_ns / 1e9,
        "throughput_per_s": n_ok / (span_ns / 1e9) if span_ns > 0 else None,
        "latency_ms": percentiles_ms(latency),
        "queue_ms": percentiles_ms((c["dispatch_ns"] - c["issue_ns"])[ok]),
        "service_ms": percentiles_ms((c["complete_ns"] - c["dispatch_ns"])[ok]),
        "batches": rec.distinct("batch_id"),
    }
    ours["mean_batch_size"] = n / ours["batches"] if ours["batches"] else None
    if multistream:
        # LoadGen's MultiStream latency is per query: the samples issued in one call.
        _, first = np.unique(c["issue_ns"], return_inverse=True)
        done = np.zeros(first.max() + 1, dtype=np.int64)
        np.maximum.at(done, first, c["complete_ns"])
        starts = np.unique(c["issue_ns"])
        ours["query_latency_ms"] = percentiles_ms(done - starts)
    return ours, window


def _agreement_section(run_dir: Path, rec: Records, scenario: str, lg: dict[str, Any],
                       ours: dict[str, Any]) -> dict[str, Any]:
    """Ours over LoadGen's for each figure both measure, and where the gap comes from."""
    c = rec.columns
    lg_tput = _loadgen_throughput(scenario, lg)
    agreement: dict[str, Any] = {"throughput": ratio(ours["throughput_per_s"], lg_tput)}
    if ours["failed"]:
        # LoadGen times failed samples like any other (often as very fast ones); ours
        # exclude them, so latency figures are not expected to agree.
        agreement["latency_note"] = f"{ours['failed']} failed samples are in LoadGen's latency, not in ours"
    elif scenario in ("Server", "SingleStream", "MultiStream"):
        per_query = scenario == "MultiStream"  # MultiStream's latency is a query's (its samples)
        lgl = _loadgen_latency_ms(lg, per_query=per_query)
        name = "query_latency" if per_query else "latency"
        mine = ours[f"{name}_ms"]
        for k in ("p50", "p90", "p99"):
            agreement[f"{name}_{k}"] = ratio(mine[k], lgl[k])
        # LoadGen times from its own issue stamp, the harness from its callback: the
        # mean gap is LoadGen's hand-over delay, shown so it is never mistaken for SUT time.
        if lgl["mean"] is not None and mine["mean"] is not None:
            agreement["issue_delay_ms"] = lgl["mean"] - mine["mean"]
        trace = read_trace_samples(run_dir)
        if trace and per_query:
            split = split_queries_against(trace, c["sample_index"], c["issue_ns"], c["complete_ns"])
        elif trace:
            split = split_against(trace, c["sample_index"], c["issue_ns"], c["complete_ns"], rec.ok())
        else:
            split = None
        if split:
            agreement["latency_split"] = {k: percentiles_ms(v) for k, v in split.items()}
    elif scenario == "Offline" and lg_tput:
        # LoadGen's rate is samples / its longest latency, timed from its own stamp of the
        # one query; the harness's span starts in its callback. The difference is the
        # query's hand-over (LoadGen to the binding to the callback: 0.5 s for 275,000
        # samples seen), time the SUT spent, which LoadGen's figure rightly counts.
        agreement["issue_delay_ms"] = (ours["samples"] / lg_tput - ours["duration_s"]) * 1e3
    return agreement


def _validity_section(scenario: str, lg: dict[str, Any], ours: dict[str, Any], child: dict[str, Any],
                      config: dict[str, Any]) -> dict[str, Any]:
    """LoadGen's verdict, the harness's own (success rate, clock), and why and how to fix."""
    validity = lg.get("result_validity")
    reasons, fixes = explain(scenario, lg, ours, child)
    if ours.get("failed"):
        reasons.append(
            f"{ours['failed']} of {ours['samples']} samples failed ({', '.join(f'{k}: {v}' for k, v in ours['failures_by_reason'].items())}); "
            "LoadGen timed them, the harness's figures exclude them"
        )
    clock_ok, clock_reason = clock_check(lg, child.get("test_s"))
    if clock_reason:
        reasons.append(clock_reason)
        fixes.append("run again; keep the clock from being stepped during tests (NTP slewing, not stepping)")
    verdict = harness_validity(validity, ours, min_success_rate_of(config), clock_ok)
    if verdict["success_rate_ok"] is False:
        reasons.append(
            f"success {ours['success_rate'] * 100:.2f}% is below min_success_rate {verdict['min_success_rate'] * 100:g}%: "
            "the harness's verdict is INVALID whatever LoadGen says (its VALID speaks of latencies only)"
        )
        fixes.append("make the failing requests succeed (failures_by_reason says why they fail); "
                     "lower min_success_rate only where failures are what the run measures")
    return {
        "result": validity,
        "min_duration_met": lg.get("result_min_duration_met"),
        "min_queries_met": lg.get("result_min_queries_met"),
        "perf_constraints_met": lg.get("result_perf_constraints_met"),
        "early_stopping_met": lg.get("early_stopping_met"),
        "early_stopping_result": (lg.get("early_stopping_result") or "").strip() or None,
        "loadgen_invalid_reason": lg.get("result_invalid_reason"),
        "reasons": reasons,
        "fixes": fixes,
        "harness": verdict,
    }


def _loadgen_section(scenario: str, lg: dict[str, Any], errors: Any, warnings: Any) -> dict[str, Any]:
    """LoadGen's own figures, from mlperf_log_detail.txt: the headline ones."""
    return {
        "throughput_per_s": _loadgen_throughput(scenario, lg),
        "scheduled_samples_per_s": lg.get("result_scheduled_samples_per_sec"),
        "qps_without_loadgen_overhead": lg.get("result_qps_without_loadgen_overhead"),
        "query_count": lg.get("result_query_count"),
        "latency_ms": _loadgen_latency_ms(lg, per_query=scenario == "MultiStream"),
        "early_stopping_latency_ms": {
            "single_stream": (lg["early_stopping_latency_ss"] / 1e6) if "early_stopping_latency_ss" in lg else None,
            "multi_stream": (lg["early_stopping_latency_ms"] / 1e6) if "early_stopping_latency_ms" in lg else None,
        },
        "errors": errors,
        "warnings": warnings,
        "num_errors": lg.get("num_errors"),
        "version": lg.get("loadgen_version"),
        "effective_settings": effective_settings(lg),
    }


def _add_schedule_lag(summary: dict[str, Any], lag: dict[str, Any] | None) -> None:
    """A timed schedule (arrivals, a trace): was it kept? (harness.results.schedule_lag)"""
    if lag is None:
        return
    summary["schedule"].update(lag)
    if lag["degraded"]:
        summary["validity"]["reasons"].append(
            f"requests left late for their schedule: lag p99 {lag['lag_ms']['p99']:.3g} ms, above "
            f"schedule_lag_limit_ms {lag['lag_limit_ms']:g}; the latencies describe a late replay")
        summary["validity"]["fixes"].append(
            "offer less load, or give the client more CPU (a quieter machine, fewer in-flight streams)")


def _add_telemetry(summary: dict[str, Any], run_dir: Path, config: dict[str, Any], child: dict[str, Any],
                   window: tuple[int, int] | None) -> None:
    ours = summary["harness"]
    rate = rates(summary)
    summary["telemetry"] = telemetry = telemetry_summary(
        folder.read_jsonl(run_dir, folder.TELEMETRY), window, (config.get("telemetry") or {}).get("series", []),
        child.get("threads") or {}, ours.get("succeeded", 0), child.get("loop_lag_ms"),
        tokens=summary["tokens"], harness=ours,
        scheduled=(rate["offered_per_s"], rate["target_per_s"]) if rate["client_behind"] else None,
    )
    if telemetry is not None and telemetry["client"]["saturated"]:
        # LoadGen's SUT is the harness's client and the server together: say which one
        # bound the run, or "the SUT is saturated" reads as the server's limit.
        summary["validity"]["reasons"].append(
            "the load generator's own side could not keep up (" + "; ".join(telemetry["client"]["signals"])
            + "): what the server itself can do is not measured by this run")
        summary["validity"]["fixes"].append(
            "send from more client processes (distribute.client_processes, docs/distribute.md), run fewer "
            "streams per process or use a faster client machine")


def build_summary(run_dir: Path, run_status: dict[str, Any]) -> dict[str, Any]:
    # Each file is read once here and handed to the sections that need it.
    config = folder.read_run_config(run_dir) or {}
    scenario = loadgen_scenario(config["scenario"])  # what LoadGen ran: Interactive is Server
    child = folder.read_json(run_dir, folder.CHILD) or {}
    lg, lg_errors, lg_warnings = read_detail(run_dir)

    rec = read_records(run_dir) if records_path(run_dir) else None
    find_peak = None
    if rec is not None and len(rec) and config.get("mode") == FIND_PEAK:
        # LoadGen reports one round only (the last that met its constraints); so must every
        # figure compared with it.
        find_peak = find_peak_section(lg, len(rec))
        rec = Records(final_round(rec.columns, lg))
    ours, window = _harness_section(rec, multistream=scenario == "MultiStream")
    agreement = _agreement_section(run_dir, rec, scenario, lg, ours) if window is not None else {}
    token_entries = read_token_entries(run_dir)
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run": {
            "name": config["name"],
            "scenario": config["scenario"],
            "mode": config["mode"],
            "backend": config["backend"],
            "model": config.get("model"),
            "dataset": config["dataset"],
            "started_utc": run_status.get("started_utc"),
        },
        # whose schedule the run followed: on the harness's own, the headline is timed from dispatch
        "schedule": schedule_section(config),
        "status": run_status.get("status", "complete"),
        "incomplete_reason": run_status.get("reason"),
        "validity": _validity_section(scenario, lg, ours, child, config),
        "loadgen": _loadgen_section(scenario, lg, lg_errors, lg_warnings),
        "harness": ours,
        "find_peak": find_peak,
        "agreement": agreement,
        "tokens": token_summary(rec, token_entries, config, child, lg),
        # requests of several inputs, one output each (embeddings): harness.results.vector_metrics
        "vectors": vector_summary(rec, token_entries),
        "accuracy": _accuracy(run_dir, child) if config["mode"] in ("AccuracyOnly", "SubmissionRun") else None,
        # a rerank run's documents/s and its ranking's score (harness.results.rerank)
        "rerank": rerank_section(run_dir, rec, ours, config["mode"], child),
        # generated text against the dataset's references, from the folder alone
        "text_accuracy": text_accuracy(run_dir, config["mode"], token_entries),
        "timings_s": {k: child.get(k) for k in ("load_s", "warmup_s", "test_s")},
        # max_batch as the child resolved it (a folder from before the default: run.yaml's)
        "sut": {k: child.get(k) for k in ("workers", "threads_per_worker", "issue_inline")}
        | {"max_batch": child.get("max_batch", config.get("max_batch"))},
        "backend": child.get("backend"),
        "dataset": child.get("dataset"),
    }
    summary["sessions"] = session_summary(rec, token_entries, config.get("sessions"))
    summary["media"] = media_summary(token_entries, child)  # images/videos sent; None for a text run
    summary["transcription"] = transcription_section(rec, token_entries, ours.get("duration_s"),
                                                     bool((child.get("backend") or {}).get("stream")))
    _add_schedule_lag(summary, lag_section(run_dir, rec, config, child))
    cluster = folder.read_json(run_dir, folder.CLUSTER)
    summary["replicas"] = replica_summary(rec, cluster)
    summary["client_shards"] = shard_summary(rec, cluster, child)
    _add_telemetry(summary, run_dir, config, child, window)
    return summary


def write_summary(run_dir: Path, run_status: dict[str, Any]) -> dict[str, Any]:
    summary = build_summary(run_dir, run_status)
    folder.write_text(run_dir / folder.SUMMARY, json.dumps(summary, indent=2, default=float))
    return summary

"""summary.json's `telemetry` section, from telemetry.jsonl over the timed window.

The window is the records' span (first issue to last completion, the same clock as the
samples). Its figures come from the samples that bracket it: the last one at or before its
start and the first one at or after its end, so a counter's delta covers the whole window
and a little either side (`covered_s` says how much); a rate divides by that span.

    gauges      time-weighted mean, p50/p99 and max of the samples inside the window
    counters    delta and rate; a server restart (a counter going down) is flagged
    histograms  the window's delta of buckets: count, mean, and p50/p90/p99 interpolated
                inside buckets as Prometheus' histogram_quantile does (`interpolated`:
                a window distribution, not per-request figures like the harness's own)
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

import numpy as np

from harness.results import server_metrics
from harness.results.stats import percentile

SATURATED_CORE = 0.9  # a thread busy this share of one core for the window limits what it drives


def _bracket(samples: list[dict[str, Any]], start: int, end: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The last sample at or before `start` and the first at or after `end` (else the
    nearest ones there are)."""
    before = [s for s in samples if s["t_ns"] <= start]
    after = [s for s in samples if s["t_ns"] >= end]
    return (before[-1] if before else samples[0]), (after[0] if after else samples[-1])


def _inside(samples: list[dict[str, Any]], start: int, end: int) -> list[dict[str, Any]]:
    inside = [s for s in samples if start <= s["t_ns"] <= end]
    return inside or [min(samples, key=lambda s: abs(s["t_ns"] - (start + end) // 2))]


def _answered(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each endpoint's answered scrapes, in order."""
    by_url: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        if e.get("source") == "server" and e.get("ok"):
            by_url[e["url"]].append(e)
    return dict(by_url)


def _families(ok: list[dict[str, Any]]) -> dict[str, str]:
    """Every family an endpoint's scrapes exposed -> its type."""
    return {f[0]: f[1] for e in ok for f in e.get("families", [])}


def _known(families: dict[str, str]) -> tuple[server_metrics.Server | None, dict[str, str]]:
    """The known server these families are, and concept -> its family there."""
    server = server_metrics.detect(set(families))
    return server, (server_metrics.resolve(server, set(families)) if server else {})


class _Window:
    """One source's answered samples against the timed window (no records: their own span)."""

    def __init__(self, ok: list[dict[str, Any]], start: int | None, end: int | None) -> None:
        self.start = ok[0]["t_ns"] if start is None else start
        self.end = ok[-1]["t_ns"] if end is None else end
        self.before, self.after = _bracket(ok, self.start, self.end)
        self.inside = _inside(ok, self.start, self.end)
        self.covered_s = (self.after["t_ns"] - self.before["t_ns"]) / 1e9


def _level(points: list[tuple[int, float]], end: int) -> dict[str, Any]:
    """A gauge's samples inside the window: the mean weighted by how long each held (until
    the next, the last until the window's end); p50/p99 and max of the samples as read."""
    values = [v for _, v in points]
    weights = [max(1, (points[i + 1][0] if i + 1 < len(points) else end) - t) for i, (t, _) in enumerate(points)]
    ordered = np.sort(np.asarray(values, dtype=float))
    return {
        "mean": sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights),
        "p50": percentile(ordered, 50),
        "p99": percentile(ordered, 99),
        "max": float(ordered[-1]),
        "samples": len(values),
    }


def _family_values(entry: dict[str, Any]) -> dict[str, tuple[str, list[list[Any]]]]:
    return {f[0]: (f[1], f[2]) for f in entry.get("families", [])}


def _total(samples: list[list[Any]], suffix: str = "", mean: bool = False) -> float | None:
    values = [s[2] for s in samples if s[0].endswith(suffix)]
    if not values:
        return None
    return sum(values) / len(values) if mean else sum(values)


def _counter_value(samples: list[list[Any]]) -> float | None:
    """A counter's value summed over its label sets (`_total` samples; a sum_us counter has none)."""
    return _total(samples, "_total") if any(x[0].endswith("_total") for x in samples) else _total(samples)


def _buckets(samples: list[list[Any]]) -> dict[float, float]:
    out: dict[float, float] = defaultdict(float)
    for name, labels, value in samples:
        if name.endswith("_bucket"):
            out[float(labels["le"])] += value
    return dict(out)


def histogram_quantile(q: float, buckets: dict[float, float]) -> tuple[float, float, float] | None:
    """(value, bucket's lower bound, its upper bound): Prometheus' rule, linear inside the
    bucket the rank falls in; the +Inf bucket answers its lower bound. The bounds say how
    much the value can be trusted: vLLM's first queue-time bucket is 0 to 0.3 s."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for b in bounds:
        if buckets[b] >= rank:
            if math.isinf(b):
                return lower, lower, b
            width = buckets[b] - below
            return lower + (b - lower) * ((rank - below) / width if width > 0 else 1.0), lower, b
        lower, below = b, buckets[b]
    return lower, lower, lower


def _series_figures(kind: str, family: str, w: _Window, mean: bool = False) -> dict[str, Any] | None:
    b, a = _family_values(w.before).get(family), _family_values(w.after).get(family)
    covered_s = w.covered_s
    if kind == "gauge":
        points = [(s["t_ns"], v) for s in w.inside
                  if (f := _family_values(s).get(family)) and (v := _total(f[1], mean=mean)) is not None]
        return {"kind": "gauge", "family": family, **_level(points, w.end)} if points else None
    if a is None:
        return None
    # A series the server created during the window (a labelled counter's first request) is 0 before it.
    b_samples = b[1] if b is not None else []
    if kind in ("counter", "sum_us"):
        v1 = _counter_value(a[1])
        if v1 is None:
            return None
        delta = v1 - (_counter_value(b_samples) or 0.0)
        return {"kind": kind, "family": family, "delta": delta, "rate_per_s": delta / covered_s if covered_s > 0 else None,
                "reset": delta < 0}
    if kind == "histogram":
        b0, b1 = _buckets(b_samples), _buckets(a[1])
        delta = {le: b1.get(le, 0.0) - b0.get(le, 0.0) for le in b1}
        count = (_total(a[1], "_count") or 0.0) - (_total(b_samples, "_count") or 0.0)
        total = (_total(a[1], "_sum") or 0.0) - (_total(b_samples, "_sum") or 0.0)
        # a summary has no buckets: its count and mean only, no interpolated percentiles
        out: dict[str, Any] = {"kind": "histogram", "family": family, "count": count, "interpolated": bool(delta),
                               "mean_s": total / count if count > 0 else None}
        for q in (0.5, 0.9, 0.99):
            found = histogram_quantile(q, delta) if count > 0 else None
            out[f"p{round(q * 100)}_s"] = found[0] if found else None
            # the +Inf bucket's upper bound is null (JSON has no infinity)
            out[f"p{round(q * 100)}_bucket_s"] = [x if math.isfinite(x) else None for x in found[1:]] if found else None
        return out
    return None


def _server(url: str, entries: list[dict[str, Any]], start: int | None, end: int | None, asked: list[str],
            tokens: dict[str, Any] | None, harness: dict[str, Any]) -> dict[str, Any]:
    ok = [e for e in entries if e.get("ok")]
    out: dict[str, Any] = {"url": url, "scrapes": len(ok), "gaps": len(entries) - len(ok),
                           "gap_errors": sorted({e.get("error", "") for e in entries if not e.get("ok")})[:3]}
    if not ok:
        out.update(server=None, metrics={}, series={}, note="no scrape answered", latency_split=None, prompt_cache=None)
        return out
    w = _Window(ok, start, end)
    families = _families(ok)
    server, concepts = _known(families)
    out.update(server=server.name if server else None, covered_s=w.covered_s,
               brackets_window=w.before["t_ns"] <= w.start and w.after["t_ns"] >= w.end)
    metrics: dict[str, Any] = {}
    for concept, family in concepts.items():
        c = server_metrics.CONCEPTS[concept]
        figures = _series_figures(c.kind, family, w, c.mean)
        if figures is not None:
            metrics[concept] = figures
    if server is not None and server.count_for_sums:
        count = _series_figures("counter", server.count_for_sums, w)
        for figures in metrics.values():
            if figures["kind"] == "sum_us" and count and count["delta"] > 0:
                figures["mean_per_request_s"] = figures["delta"] / 1e6 / count["delta"]
    series: dict[str, Any] = {}
    for name in asked:
        family = name if name in families else next((f for f in families if f == name.removesuffix("_total")), None)
        kind = {"gauge": "gauge", "counter": "counter", "histogram": "histogram", "summary": "histogram"}.get(
            families.get(family or ""), "")
        figures = _series_figures(kind, family, w) if family and kind else None
        series[name] = figures or {"missing": f"not among the {len(families)} series the endpoint exposes, or of a "
                                              "type not summarised (untyped, info, stateset)"}
    out.update(metrics=metrics, series=series)
    out["latency_split"] = latency_split(tokens, harness, out)
    out["prompt_cache"] = prompt_cache_views(tokens, out)
    return out


def _host(entries: list[dict[str, Any]], start: int | None, end: int | None, threads: dict[str, str]) -> dict[str, Any]:
    ok = [e for e in entries if e.get("ok")]
    if not ok:
        return {"samples": 0, "note": "no host sample was taken"}
    w = _Window(ok, start, end)
    before, after, covered_s = w.before, w.after, w.covered_s
    out: dict[str, Any] = {"samples": len(ok), "covered_s": covered_s,
                           "rss_max_bytes": max(e["process"]["rss_bytes"] for e in w.inside),
                           "mem_available_min_bytes": min(e["machine"]["mem_available_bytes"] for e in w.inside)}
    if covered_s <= 0:
        return out
    out["process_cores"] = (after["process"]["cpu_s"] - before["process"]["cpu_s"]) / covered_s
    # A thread that ended before the last sample (the event loop, once the test is over)
    # counts with the last CPU time it was seen with.
    t0 = before["process"]["threads_cpu_s"]
    t1: dict[str, float] = {}
    for e in ok:
        if before["t_ns"] <= e["t_ns"] <= after["t_ns"]:
            t1.update(e["process"]["threads_cpu_s"])
    per_thread = sorted(((tid, (t1[tid] - t0.get(tid, 0.0)) / covered_s) for tid in t1), key=lambda x: -x[1])
    out["threads"] = [{"tid": int(tid), "name": threads.get(tid, "other (LoadGen, runtime pools)"), "cores": cores}
                      for tid, cores in per_thread[:8]]
    c0, c1 = before["machine"]["cores_busy_total_s"], after["machine"]["cores_busy_total_s"]
    busy = [((b1 - b0) / (t1_ - t0_)) if t1_ > t0_ else None for (b0, t0_), (b1, t1_) in zip(c0, c1)]
    out["machine_core_busy"] = busy
    return out


def _gpu(entries: list[dict[str, Any]], start: int | None, end: int | None, succeeded: int) -> dict[str, Any]:
    ok = [e for e in entries if e.get("ok")]
    if not ok:
        errors = [e.get("error") for e in entries if not e.get("ok")]
        return {"devices": [], "absent": errors[0] if errors else "no GPU sample was taken"}
    w = _Window(ok, start, end)
    devices = []
    for i, dev in enumerate(w.after["devices"]):
        def level(key: str) -> dict[str, Any] | None:
            points = [(e["t_ns"], e["devices"][i][key]) for e in w.inside if e["devices"][i].get(key) is not None]
            return _level(points, w.end) if points else None

        e0, e1 = w.before["devices"][i].get("energy_j"), dev.get("energy_j")
        energy = e1 - e0 if e0 is not None and e1 is not None else None
        devices.append({"index": dev["index"], "name": dev.get("name"), "util_pct": level("util_pct"),
                        "mem_used_bytes": level("mem_used_bytes"), "power_w": level("power_w"),
                        "energy_j": energy, "covered_s": w.covered_s})
    total = [d["energy_j"] for d in devices]
    energy_j = sum(total) if total and all(e is not None for e in total) else None
    return {"devices": devices, "energy_j": energy_j,
            "energy_j_per_success": energy_j / succeeded if energy_j is not None and succeeded else None}


#: the threads that generate the load: LoadGen's issue thread, the event loop of the HTTP and
#: generative backends, the records writer, and with client shards the forwarder, the
#: receivers and each shard's loop ("event-loop (shard 1)"). A tensor backend's workers run
#: the model: their CPU is the system under test's, not the client's.
CLIENT_THREADS = ("LoadGen issue (main)", "event-loop", "records", "shard forwarder", "shard receiver", "shard inbox")


def is_client_thread(name: str | None) -> bool:
    """A client thread by its name, the shard's index dropped ("shard 2 receiver", "event-loop (shard 2)")."""
    if not name:
        return False
    return re.sub(r" \(shard \d+\)$", "", re.sub(r"^shard \d+ ", "shard ", name)) in CLIENT_THREADS


#: the event loop's lag probe running this late at its median: the loop is not keeping up (one
#: that keeps up answers within its selector's 1 ms rounding; one request's burst of 2,000
#: SSE events is a 10 ms callback, seen at its p99, not its median)
LATE_LOOP_MS = 10.0


def client_saturation(host: dict[str, Any] | None, loop_lag: dict[str, Any] | None,
                      scheduled: tuple[float, float] | None = None) -> dict[str, Any]:
    """Whether the load generator itself may have bounded the result, from measured signals:
    a client thread busy near a whole core, the event loop running late, LoadGen scheduling
    clearly less than its target (`scheduled`: (offered, target) per second, when it did).
    With Python's GIL a starved issue thread waits rather than burns CPU: LoadGen's own
    schedule is the signal that does not depend on where the time went."""
    if loop_lag:  # its per-second series is for the plots (child.json), not the summary
        loop_lag = {k: v for k, v in loop_lag.items() if k != "per_second_max"}
    signals = []
    if host and "threads" in host:
        signals += [f"thread {t['name']} was busy {t['cores']:.0%} of a core over the timed window"
                    for t in host["threads"] if is_client_thread(t["name"]) and t["cores"] >= SATURATED_CORE]
    if loop_lag and loop_lag["p50"] > LATE_LOOP_MS:
        signals.append(f"the event loop ran late: its {loop_lag['period_ms']:g} ms timer fired p50 "
                       f"{loop_lag['p50']:,.1f} ms late (p99 {loop_lag['p99']:,.1f} ms)")
    if scheduled:
        signals.append(f"LoadGen scheduled {scheduled[0]:,.0f}/s of the {scheduled[1]:,.0f}/s target")
    if not signals and not (host and "threads" in host):
        return {"saturated": None, "signals": [], "loop_lag_ms": loop_lag, "note": "CPU not measured: pass --telemetry host"}
    return {"saturated": bool(signals), "signals": signals, "loop_lag_ms": loop_lag}


def telemetry_summary(entries: list[dict[str, Any]], window: tuple[int, int] | None, asked: list[str],
                      threads: dict[str, str], succeeded: int, loop_lag: dict[str, Any] | None, *,
                      tokens: dict[str, Any] | None = None, harness: dict[str, Any] | None = None,
                      scheduled: tuple[float, float] | None = None) -> dict[str, Any] | None:
    """The section, or None when the run sampled nothing. `tokens` and `harness`: the
    summary's sections, for the TTFT split and the prompt cache; `scheduled`: see
    client_saturation."""
    if not entries:
        return None
    start, end = window if window else (None, None)
    by_url: dict[str, list[dict[str, Any]]] = defaultdict(list)  # failed scrapes too: the gaps
    for e in entries:
        if e.get("source") == "server":
            by_url[e["url"]].append(e)
    host_entries = [e for e in entries if e.get("source") == "host"]
    gpu_entries = [e for e in entries if e.get("source") == "gpu"]
    host = _host(host_entries, start, end, threads) if host_entries else None
    return {
        "window_s": (end - start) / 1e9 if window else None,
        "notes": [e["error"] for e in entries if e.get("source") == "note"],
        "servers": [_server(url, es, start, end, asked, tokens, harness or {}) for url, es in by_url.items()],
        "host": host,
        "gpu": _gpu(gpu_entries, start, end, succeeded) if gpu_entries else None,
        "client": client_saturation(host, loop_lag, scheduled),
    }


def _mean_ms(figures: dict[str, Any] | None) -> float | None:
    return figures["mean_s"] * 1e3 if figures and figures.get("mean_s") is not None else None


def latency_split(tokens: dict[str, Any] | None, harness: dict[str, Any], server: dict[str, Any]) -> dict[str, Any] | None:
    """The client's mean TTFT split with the server's view: client queue (ours) -> network
    and HTTP (ours from dispatch minus the server's TTFT, or its queue + prefill) -> server
    queue -> prefill; and decode beside the server's. Means only: a difference of means is
    the mean of the differences; percentiles do not subtract."""
    metrics = server.get("metrics") or {}
    if not tokens or not tokens.get("ttft_ms") or tokens["ttft_ms"].get("mean") is None:
        return None
    queue, prefill = _mean_ms(metrics.get("server_queue_time")), _mean_ms(metrics.get("server_prefill_time"))
    server_ttft = _mean_ms(metrics.get("server_ttft"))
    inner = server_ttft if server_ttft is not None else (queue + prefill if queue is not None and prefill is not None else None)
    if inner is None:
        return None
    from_dispatch = (tokens.get("ttft_from_dispatch_ms") or {}).get("mean")
    client_queue = (harness.get("queue_ms") or {}).get("mean")
    if from_dispatch is None:
        from_dispatch = tokens["ttft_ms"]["mean"] - (client_queue or 0.0)
    split: dict[str, Any] = {
        "client_ttft_ms": tokens["ttft_ms"]["mean"],
        "client_queue_ms": client_queue,
        "network_and_http_ms": from_dispatch - inner,
        "server_queue_ms": queue,
        "server_prefill_ms": prefill,
        # the server's TTFT beyond its queue and prefill: tokenising, its API layer
        "server_other_ms": server_ttft - queue - prefill if None not in (server_ttft, queue, prefill) else None,
        "server_requests": (metrics.get("server_ttft") or metrics.get("server_queue_time") or {}).get("count"),
        "client_requests": tokens.get("requests"),
    }
    e2e = (tokens.get("e2e_ms") or {}).get("mean")
    split["client_decode_ms"] = e2e - tokens["ttft_ms"]["mean"] if e2e is not None else None
    split["server_decode_ms"] = _mean_ms(metrics.get("server_decode_time"))
    return split


def server_levels(entries: list[dict[str, Any]]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """Per endpoint, each gauge concept of its known server over time: {url: {concept: (t_ns, values)}},
    for the plots; failed scrapes are left out (a gap in the line, not a zero)."""
    out: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for url, ok in _answered(entries).items():
        server, concepts = _known(_families(ok))
        if server is None:
            continue
        levels: dict[str, tuple[list[int], list[float]]] = {}
        for concept, family in concepts.items():
            c = server_metrics.CONCEPTS[concept]
            if c.kind != "gauge":
                continue
            points = [(e["t_ns"], v) for e in ok
                      if (f := _family_values(e).get(family)) and (v := _total(f[1], mean=c.mean)) is not None]
            if points:
                levels[concept] = ([t for t, _ in points], [v for _, v in points])
        out[url] = levels
    return out


def host_cpu(entries: list[dict[str, Any]], threads: dict[str, str]) -> dict[str, tuple[list[int], list[float]]]:
    """Cores used between consecutive host samples: the test process, and each named client
    thread, at the middle of each interval, for the plots."""
    ok = [e for e in entries if e.get("source") == "host" and e.get("ok")]
    out: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for a, b in zip(ok, ok[1:]):
        dt = (b["t_ns"] - a["t_ns"]) / 1e9
        if dt <= 0:
            continue
        mid = (a["t_ns"] + b["t_ns"]) // 2
        series = {"test process": (b["process"]["cpu_s"] - a["process"]["cpu_s"]) / dt}
        for tid, cpu in b["process"]["threads_cpu_s"].items():
            name = threads.get(tid)
            if is_client_thread(name) and tid in a["process"]["threads_cpu_s"]:
                series[f"thread {name}"] = (cpu - a["process"]["threads_cpu_s"][tid]) / dt
        for name, v in series.items():
            out[name][0].append(mid)
            out[name][1].append(v)
    return dict(out)


def prompt_cache_views(tokens: dict[str, Any] | None, server: dict[str, Any]) -> dict[str, Any] | None:
    """Prompt-cache reuse seen twice: the server's counters over the window beside what the
    dataset's shared prefixes allow and what the server's usage told the client per request."""
    m = server.get("metrics") or {}

    def ratio(num: str, den: str) -> float | None:
        a, b = m.get(num), m.get(den)
        return a["delta"] / b["delta"] if a and b and b["delta"] > 0 else None

    views = {"server_prefix_hit_rate": ratio("prefix_cache_hits", "prefix_cache_queries"),
             "server_cached_fraction": ratio("cached_prompt_tokens", "prompt_tokens")}
    if all(v is None for v in views.values()):
        return None
    pc = (tokens or {}).get("prompt_cache") or {}
    return {**views, "expected_reusable_fraction": pc.get("expected_reusable_fraction"),
            "client_cached_fraction": pc.get("observed_cached_fraction"),
            "client_requests_reporting": pc.get("requests_reporting")}


def server_rates(entries: list[dict[str, Any]], concept: str) -> dict[str, tuple[list[int], list[float]]]:
    """Per endpoint, a counter concept's rate between consecutive answered scrapes:
    {url: (scrape times in ns, the rate over each interval between them)}, for the plots."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for url, ok in _answered(entries).items():
        family = _known(_families(ok))[1].get(concept)
        if family is None or len(ok) < 2:
            continue
        values = [_counter_value(f[1]) if (f := _family_values(e).get(family)) else 0.0 for e in ok]
        times = [e["t_ns"] for e in ok]
        rates = [((v1 or 0.0) - (v0 or 0.0)) / max((t1 - t0) / 1e9, 1e-9)
                 for t0, t1, v0, v1 in zip(times, times[1:], values, values[1:])]
        out[url] = (times, rates)
    return out

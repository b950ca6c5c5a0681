"""Token figures of a generative run, from records.csv, tokens.jsonl and LoadGen's log.

Definitions (all on successful requests only; times from the harness's issue stamp, as
LoadGen times from its own):
    TTFT   first content-bearing chunk - issue
    E2E    completion - issue
    TPOT   (E2E - TTFT) / (n - 1), per request with n > 1 tokens (LoadGen's definition)
    ITL    per *token*: a chunk carrying k tokens spreads its gap since the previous chunk
           over its k tokens (k values of gap/k); extra tokens in the first chunk arrived
           with it (gap 0). So ITL's token-weighted mean equals TPOT's when the stream ends
           with its last chunk, and multi-token chunks never inflate ITL.

Token counts come from the server's usage when it sent one, else a local tokenizer, else
one per chunk; `token_count_source` says which, per request. When the server's count is
known, the client's own count (tokenizer or chunks) is compared with it: `mismatch`.
When the counts disagree, each chunk's share is scaled so the chunks add up to the
server's count before spreading gaps.

LoadGen's own TTFT/TPOT/token-rate figures are read back for agreement. Its
`result_token_throughput` is in tokens per *nanosecond* (a LoadGen bug), so the rate
comes from `result_completed_tokens_per_second` (Server) or `result_tokens_per_second`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from harness.loadgen_log import read_detail
from harness.records import TOKENS_FILE, Records

PERCENTILES = (50, 90, 95, 99, 99.9)


def _pkey(p: float) -> str:
    return f"p{p:g}".replace(".", "_")


def weighted_percentiles(values: np.ndarray, weights: np.ndarray | None = None, unit: float = 1e6) -> dict[str, float | None]:
    """Nearest-rank percentiles (LoadGen's sorted[int(p * n)] when all weights are 1), mean,
    min, max, each divided by `unit` (1e6: ns -> ms)."""
    if len(values) == 0:
        return {**{_pkey(p): None for p in PERCENTILES}, "mean": None, "min": None, "max": None}
    v = np.asarray(values, dtype=np.float64)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    total = cum[-1]
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        i = min(len(v) - 1, int(np.searchsorted(cum, p / 100 * total, side="right")))
        out[_pkey(p)] = float(v[i]) / unit
    out.update(mean=float((v * w).sum() / total) / unit, min=float(v[0]) / unit, max=float(v[-1]) / unit)
    return out


def read_token_entries(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / TOKENS_FILE
    if not path.exists():
        return []
    entries = []
    with open(path) as f:
        for line in f:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
    return entries


def itl_samples(entries: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-token inter-token latencies as (value ns, weight in tokens) pairs."""
    values: list[float] = []
    weights: list[float] = []
    for e in entries:
        t, k = e.get("t") or [], e.get("k") or []
        client = sum(k)
        if len(t) == 0 or client <= 0:
            continue
        scale = (e.get("n") or client) / client
        share = [x * scale for x in k]
        if share[0] > 1:
            values.append(0.0)
            weights.append(share[0] - 1)
        for i in range(1, len(t)):
            if share[i] > 0:
                values.append((t[i] - t[i - 1]) / share[i])
                weights.append(share[i])
    return np.asarray(values), np.asarray(weights)


def _loadgen_tokens(run_dir: Path, scenario: str) -> dict[str, Any]:
    lg, _, _ = read_detail(run_dir)

    def ms(key: str) -> float | None:
        v = lg.get(key)
        return v / 1e6 if isinstance(v, (int, float)) else None

    ttft = {_pkey(p): ms(f"result_first_token_{p:.2f}_percentile_latency_ns") for p in PERCENTILES}
    ttft.update(mean=ms("result_first_token_mean_latency_ns"), min=ms("result_first_token_min_latency_ns"), max=ms("result_first_token_max_latency_ns"))
    tpot = {_pkey(p): ms(f"result_time_per_output_token_{p:.2f}_percentile_ns") for p in PERCENTILES}
    tpot.update(mean=ms("result_time_to_output_token_mean"), min=ms("result_time_to_output_token_min"), max=ms("result_time_to_output_token_max"))
    rate_key = "result_completed_tokens_per_second" if scenario == "Server" else "result_tokens_per_second"
    rate = lg.get(rate_key)
    return {
        "ttft_ms": ttft if any(v is not None for v in ttft.values()) else None,
        "tpot_ms": tpot if any(v is not None for v in tpot.values()) else None,
        "output_tokens_per_s": float(rate) if isinstance(rate, (int, float)) else None,
        "ttft_early_stopping": (lg.get("early_stopping_ttft_result") or "").strip() or None,
        "tpot_early_stopping": (lg.get("early_stopping_tpot_result") or "").strip() or None,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def token_summary(run_dir: Path, records: Records | None, config: dict[str, Any]) -> dict[str, Any] | None:
    """The summary's "tokens" section; None for runs that produced no tokens."""
    entries = [e for e in read_token_entries(run_dir) if e.get("source")]
    if records is None or not len(records) or not entries:
        return None
    c = records.columns
    ok = c["status"] == "ok"
    n = c["n_tokens"]
    issue, first, done = c["issue_ns"], c["first_token_ns"], c["complete_ns"]
    with_first = ok & (first > 0)
    multi = with_first & (n > 1)
    ttft = (first - issue)[with_first]
    e2e = (done - issue)[ok]
    tpot = (done - first)[multi] / (n[multi] - 1)
    span_s = float(done.max() - issue.min()) / 1e9
    per_req = n[ok & (n > 0)] / ((done - issue)[ok & (n > 0)] / 1e9)
    ok_entries = [e for e in entries if e.get("status") == "ok"]
    itl, itl_w = itl_samples(ok_entries)

    compared = [e for e in ok_entries if e.get("server_tokens") is not None]
    server_total = sum(int(e["server_tokens"]) for e in compared)
    client_total = sum(int(e.get("client_tokens") or 0) for e in compared)
    mismatch = {
        "requests_compared": len(compared),
        "requests_differing": sum(int(e["server_tokens"]) != int(e.get("client_tokens") or 0) for e in compared),
        "server_tokens": server_total,
        "client_tokens": client_total,
        "server_over_client": server_total / client_total if client_total else None,
    }
    ours = {
        "requests": int(ok.sum()),
        "output_tokens": int(n[ok].sum()),
        "input_tokens": int(c["input_tokens"][ok].sum()),
        "output_tokens_per_request_mean": float(n[ok].mean()) if ok.any() else None,
        "ttft_ms": weighted_percentiles(ttft),
        "tpot_ms": weighted_percentiles(tpot),
        "itl_ms": weighted_percentiles(itl, itl_w),
        "e2e_ms": weighted_percentiles(e2e),
        "output_tokens_per_s": float(n[ok].sum()) / span_s if span_s > 0 else None,
        "input_tokens_per_s": float(c["input_tokens"][ok].sum()) / span_s if span_s > 0 else None,
        "request_output_tokens_per_s": weighted_percentiles(per_req, unit=1.0),
        "token_count_source": dict(Counter(e["source"] for e in ok_entries)),
        "client_count_method": entries[0].get("client_method"),
        "mismatch": mismatch,
        "retries": sum(int(e.get("retries") or 0) for e in entries),
        "requests_retried": sum(1 for e in entries if e.get("retries")),
    }
    lg = _loadgen_tokens(run_dir, config.get("scenario", ""))
    agreement: dict[str, float | None] = {}
    if lg["ttft_ms"]:
        for k in ("p50", "p90", "p99"):
            agreement[f"ttft_{k}"] = _ratio(ours["ttft_ms"][k], lg["ttft_ms"][k])
    if lg["tpot_ms"]:
        for k in ("p50", "p90", "p99"):
            agreement[f"tpot_{k}"] = _ratio(ours["tpot_ms"][k], lg["tpot_ms"][k])
    agreement["output_tokens_per_s"] = _ratio(ours["output_tokens_per_s"], lg["output_tokens_per_s"])
    return {**ours, "loadgen": lg, "agreement": agreement}

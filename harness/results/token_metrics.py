"""Token figures of a generative run, from records.parquet, tokens.jsonl and LoadGen's log.

Definitions (all on successful requests only; times from the harness's issue stamp, as
LoadGen times from its own):
    TTFT   first content-bearing chunk - issue   (ttft_from_dispatch_ms: - dispatch)
    E2E    completion - issue                    (e2e_from_dispatch_ms: - dispatch)
    TPOT   (E2E - TTFT) / (n - 1), per request with n > 1 tokens (LoadGen's definition)
    ITL    per *token*: a chunk carrying k tokens spreads its gap since the previous chunk
           over its k tokens (k values of gap/k); extra tokens in the first chunk arrived
           with it (gap 0). So ITL's token-weighted mean equals TPOT's when the stream ends
           with its last chunk, and multi-token chunks never inflate ITL.

Reasoning models (answers with reasoning_content or <think> spans; harness.child.stream_sut):
    TTFO   first *answer* token - issue (AIPerf's time to first output token); TTFT stays
           the first token of either kind
    reasoning  reasoning vs answer tokens (the server's completion_tokens_details.
           reasoning_tokens when given, compared with the client's count as output is)
    tool_calls  streamed tool calls reassembled, over every request (the cost reads it)

Token counts come from the server's usage when it sent one, else a local tokenizer, else
one per chunk; `token_count_source` says which, per request. When the server's count is
known, the client's own count (tokenizer or chunks) is compared with it: `mismatch`.
When the counts disagree, each chunk's share is scaled so the chunks add up to the
server's count before spreading gaps.

On a schedule the harness owns (harness.results.schedule: a closed loop), LoadGen's issue
starts the backlog, not a request: the per-request figures below (the length buckets, SLO
attainment and goodput, per-request output tokens/s, the prompt cache's TTFT split) count
from dispatch there, as the headline does; ttft_ms and e2e_ms stay from issue.

Breakdowns, so a stage's cost shows as a number:
    by_input_length / by_output_length   TTFT, TPOT, E2E and per-request output tokens/s
                   per power-of-two bucket of input (prompt) or output tokens: long
                   prompts slow the first token (prefill), long answers the end (decode)
    slo, goodput   attainment of the run's `slo` targets and good requests per second
                   (harness.results.slo); `validation` counts answers checked by the dataset's
                   validators and JSON Schemas (structured outputs), which goodput also
                   requires, the rejected ones by reason (schema_invalid, wrong_answer)
    prompt_cache   the dataset's shared prefixes: the fraction of prompt tokens a prefix
                   cache could serve in this run's issue order (expected), the fraction the
                   server reported as cached (observed), and TTFT for hits vs misses
    kv_cache       a backend's measured KV-cache bytes per request beside harness.results.kv_cache's
                   estimate for the same model and token count

Percentiles are LoadGen's rule and list (harness.results.stats), ITL's weighted by tokens.
LoadGen's own TTFT/TPOT/token-rate figures are read back for agreement. Its
`result_token_throughput` is in tokens per *nanosecond* (a LoadGen bug), so the rate
comes from `result_completed_tokens_per_second` (Server) or `result_tokens_per_second`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.prompt_set import expected_reusable_fraction
from harness.results import folder
from harness.results.kv_cache import KvShape
from harness.results.loadgen_log import loadgen_scenario
from harness.results.records import Records
from harness.results.schedule import harness_schedule
from harness.results.slo import evaluate, parse_slo
from harness.results.stats import NS_PER_MS, PERCENTILES, percentile_key, ratio, weighted_distribution


def read_token_entries(run_dir: Path) -> list[dict[str, Any]]:
    """tokens.jsonl: one entry per streamed request, failed ones included."""
    return folder.read_jsonl(run_dir, folder.TOKENS)


def count_retries(entries: list[dict[str, Any]]) -> tuple[int, int]:
    """(attempts a backend retried on its own, requests that needed any), over every
    request, failed ones included: both the tokens section and the cost read this."""
    retries = [_int(e.get("retries")) for e in entries]
    return sum(retries), sum(1 for r in retries if r)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


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


def _loadgen_tokens(lg: dict[str, Any], scenario: str) -> dict[str, Any]:

    def ms(key: str) -> float | None:
        v = lg.get(key)
        return v / NS_PER_MS if isinstance(v, (int, float)) else None

    ttft = {percentile_key(p): ms(f"result_first_token_{p:.2f}_percentile_latency_ns") for p in PERCENTILES}
    ttft.update(mean=ms("result_first_token_mean_latency_ns"), min=ms("result_first_token_min_latency_ns"), max=ms("result_first_token_max_latency_ns"))
    tpot = {percentile_key(p): ms(f"result_time_per_output_token_{p:.2f}_percentile_ns") for p in PERCENTILES}
    tpot.update(mean=ms("result_time_to_output_token_mean"), min=ms("result_time_to_output_token_min"), max=ms("result_time_to_output_token_max"))
    rate_key = "result_completed_tokens_per_second" if scenario == "Server" else "result_tokens_per_second"
    rate = lg.get(rate_key)
    return {
        "ttft_ms": ttft if any(v is not None for v in ttft.values()) else None,
        "tpot_ms": tpot if any(v is not None for v in tpot.values()) else None,
        "output_tokens_per_s": float(rate) if isinstance(rate, (int, float)) else None,
        # the bounds LoadGen judged by (Server, Interactive): the detail log's requested ones,
        # whichever of mlperf.conf, user.conf or the run's settings set them
        "ttft_bound_ms": ms("requested_server_ttft_latency") if scenario == "Server" else None,
        "tpot_bound_ms": ms("requested_server_tpot_latency") if scenario == "Server" else None,
        "ttft_early_stopping": (lg.get("early_stopping_ttft_result") or "").strip() or None,
        "tpot_early_stopping": (lg.get("early_stopping_tpot_result") or "").strip() or None,
    }


def token_summary(
    records: Records | None,
    all_entries: list[dict[str, Any]],
    config: dict[str, Any],
    child: dict[str, Any],
    lg: dict[str, Any],
) -> dict[str, Any] | None:
    """The summary's "tokens" section; None for runs that produced no tokens. Every input
    is read once by the summary builder (records, tokens.jsonl, run.yaml, child.json,
    LoadGen's detail log) and handed in."""
    entries = [e for e in all_entries if e.get("source")]
    if records is None or not len(records) or not entries:
        return None
    c = records.columns
    ok = c["status"] == "ok"
    n = c["n_tokens"]
    issue, first, done = c["issue_ns"], c["first_token_ns"], c["complete_ns"]
    with_first = ok & (first > 0)
    multi = with_first & (n > 1)
    ttft = (first - issue)[with_first]
    # From dispatch: what the server took, without the wait for a free slot (a closed
    # loop's `concurrency`, or an open loop's max_in_flight) that precedes it.
    dispatch = c["dispatch_ns"]
    ttft_dispatch = (first - dispatch)[with_first & (dispatch > 0)]
    e2e = (done - issue)[ok]
    e2e_dispatch = (done - dispatch)[ok & (dispatch > 0)]
    tpot = (done - first)[multi] / (n[multi] - 1)
    span_s = float(done.max() - issue.min()) / 1e9
    # Per request, as a user sees it: from LoadGen's issue on its schedule, from dispatch on
    # the harness's own (a closed loop's issue is the backlog's start): per-request tokens/s,
    # the length buckets, SLO attainment and goodput, the prompt cache's TTFT split.
    start = np.where(dispatch > 0, dispatch, issue) if harness_schedule(config) else issue
    per_req = n[ok & (n > 0)] / ((done - start)[ok & (n > 0)] / 1e9)
    ok_entries = [e for e in entries if e.get("status") == "ok"]
    itl, itl_w = itl_samples(ok_entries)
    retries, retried = count_retries(all_entries)

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
        "ttft_ms": weighted_distribution(ttft, unit=NS_PER_MS),
        "tpot_ms": weighted_distribution(tpot, unit=NS_PER_MS),
        "itl_ms": weighted_distribution(itl, itl_w, unit=NS_PER_MS),
        "e2e_ms": weighted_distribution(e2e, unit=NS_PER_MS),
        "ttft_from_dispatch_ms": weighted_distribution(ttft_dispatch, unit=NS_PER_MS),
        # TPOT needs no twin: (E2E - TTFT) / (n - 1) is the same from issue or dispatch
        "e2e_from_dispatch_ms": weighted_distribution(e2e_dispatch, unit=NS_PER_MS),
        "output_tokens_per_s": float(n[ok].sum()) / span_s if span_s > 0 else None,
        "input_tokens_per_s": float(c["input_tokens"][ok].sum()) / span_s if span_s > 0 else None,
        "request_output_tokens_per_s": weighted_distribution(per_req),
        "token_count_source": dict(Counter(e["source"] for e in ok_entries)),
        # input tokens: the server's usage.prompt_tokens, else the client's count (which)
        "input_token_count_source": dict(Counter(e.get("input_source") or "unknown" for e in ok_entries)),
        # accuracy mode: where the token ids logged to LoadGen came from (model, server, tokenizer)
        "output_ids_source": dict(Counter(e["ids_source"] for e in ok_entries if e.get("ids_source"))) or None,
        "client_count_method": entries[0].get("client_method"),
        "mismatch": mismatch,
        "retries": retries,
        "requests_retried": retried,
    }
    by_qid = {int(e["query_id"]): e for e in entries if "query_id" in e}
    per_req = [by_qid.get(int(q), {}) for q in c["query_id"]]
    ttft_all = np.where(first > 0, (first - start) / 1e6, np.nan)
    tpot_all = np.where((first > 0) & (n > 1), (done - first) / np.maximum(n - 1, 1) / 1e6, np.nan)
    e2e_all = (done - start) / 1e6
    ours["by_input_length"] = _buckets(c["input_tokens"], ok, ttft_all, tpot_all, e2e_all, n)
    ours["by_output_length"] = _buckets(n, ok, ttft_all, tpot_all, e2e_all, n)
    checked = np.array([e.get("valid") is not None for e in per_req], dtype=bool)
    valid = np.array([e.get("valid") is not False for e in per_req], dtype=bool)
    ours["validation"] = (
        {"checked": int(checked.sum()), "valid": int((checked & valid).sum()), "invalid": int((checked & ~valid).sum()),
         "rate": float((checked & valid).sum()) / int(checked.sum()), **invalid_reasons(per_req)}
        if checked.any() else None
    )  # fmt: skip
    targets = parse_slo(config.get("slo"))
    ours["slo"] = None
    ours["goodput"] = None
    if targets or checked.any():
        res = evaluate(targets, ok, ttft_all, tpot_all, e2e_all, valid, bool(checked.any()), span_s)
        ours["slo"] = {"targets": res["targets"], "attainment": res["attainment"]} if targets else None
        ours["goodput"] = res["goodput"]
    ours["repeated_prompts"] = _repeats(c)
    cached = [e.get("cached_tokens") for e in per_req]
    reported = [x is not None for x in cached]
    ours["cached_input_tokens"] = int(sum(x for x in cached if x is not None)) if any(reported) else None
    ours["prompt_cache"] = _prompt_cache(c, ok, ttft_all, cached, (child.get("dataset") or {}).get("prefix"))
    ours.update(_reasoning(per_req, ok, start, first))  # from dispatch on a harness-owned schedule
    ours.update(_tool_calls(all_entries))
    ours["kv_cache"] = _kv_cache(per_req, ok, ((child.get("backend") or {}).get("kv_cache") or {}).get("shape"))
    lg = _loadgen_tokens(lg, loadgen_scenario(config.get("scenario", "")))
    agreement: dict[str, float | None] = {}
    if lg["ttft_ms"]:
        for k in ("p50", "p90", "p99"):
            agreement[f"ttft_{k}"] = ratio(ours["ttft_ms"][k], lg["ttft_ms"][k])
    if lg["tpot_ms"]:
        for k in ("p50", "p90", "p99"):
            agreement[f"tpot_{k}"] = ratio(ours["tpot_ms"][k], lg["tpot_ms"][k])
    agreement["output_tokens_per_s"] = ratio(ours["output_tokens_per_s"], lg["output_tokens_per_s"])
    return {**ours, "loadgen": lg, "agreement": agreement}


def invalid_reasons(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The rejected answers by reason (tokens.jsonl `invalid`, "reason: detail": schema_invalid,
    wrong_answer), and the first one's detail of each reason, as an example."""
    by_reason: Counter[str] = Counter()
    example: dict[str, str] = {}
    for e in entries:
        if e.get("valid") is False:
            reason, _, detail = str(e.get("invalid") or "wrong_answer").partition(": ")
            by_reason[reason] += 1
            example.setdefault(reason, detail)
    return {"invalid_by_reason": dict(by_reason), "invalid_example": example}


def _repeats(c: dict[str, np.ndarray]) -> dict[str, int]:
    """Timed requests whose prompt was already sent earlier in the test: LoadGen samples
    with replacement, so a run of 32 can send the same prompt twice in a row, and a server's
    prompt cache answers the second one from memory (a TTFT of 44 ms against 2.9 s seen)."""
    order = np.argsort(c["issue_ns"], kind="stable")
    seen: set[int] = set()
    repeats = 0
    for index in c["sample_index"][order]:
        repeats += int(index) in seen
        seen.add(int(index))
    return {"requests": int(len(order)), "distinct_prompts": len(seen), "repeats": repeats}


def _brief(values_ms: np.ndarray) -> dict[str, float | None]:
    v = values_ms[~np.isnan(values_ms)]
    stats = weighted_distribution(v)
    return {k: stats[k] for k in ("p50", "p90", "mean")}


def _buckets(
    lengths: np.ndarray, ok: np.ndarray, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray, n_out: np.ndarray
) -> list[dict[str, Any]]:
    """Successful requests grouped by power-of-two length buckets (1, 2, 3-4, 5-8, ...).

    Powers of two rather than quantiles: the same lengths land in the same bucket in every
    run, so two runs' buckets compare row by row.
    """
    out: list[dict[str, Any]] = []
    lengths = np.asarray(lengths, dtype=np.int64)
    if not ok.any():
        return out
    upper = np.where(lengths > 1, 2 ** np.ceil(np.log2(np.maximum(lengths, 1))), 1).astype(np.int64)
    for hi in np.unique(upper[ok]):
        sel = ok & (upper == hi)
        lo = 1 if hi == 1 else hi // 2 + 1
        rate = n_out[sel] / (e2e[sel] / 1e3)
        out.append({
            "range": f"{lo}-{hi}" if lo != hi else str(hi),
            "min": int(lengths[sel].min()), "max": int(lengths[sel].max()), "requests": int(sel.sum()),
            "ttft_ms": _brief(ttft[sel]), "tpot_ms": _brief(tpot[sel]), "e2e_ms": _brief(e2e[sel]),
            "request_output_tokens_per_s": _brief(rate.astype(np.float64)),
        })  # fmt: skip
    return out


def _prompt_cache(
    c: dict[str, np.ndarray], ok: np.ndarray, ttft: np.ndarray, cached: list[int | None], prefix: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Expected vs observed prompt-cache reuse; None when neither is known."""
    reported = np.array([x is not None for x in cached], dtype=bool)
    if not prefix and not reported.any():
        return None
    inputs = c["input_tokens"].astype(np.int64)
    out: dict[str, Any] = {"expected_reusable_fraction": None, "observed_cached_fraction": None, "requests_reporting": int(reported.sum())}
    expected_hit = None
    if prefix and prefix.get("groups"):
        groups, plen = int(prefix["groups"]), int(prefix["prefix_len"])
        order = np.argsort(c["issue_ns"], kind="stable")
        g = [int(c["sample_index"][i]) % groups for i in order]
        out["expected_reusable_fraction"] = expected_reusable_fraction(g, [plen] * len(g), [int(inputs[i]) for i in order])
        out["groups"], out["prefix_len"] = groups, plen
        seen: set[int] = set()
        expected_hit = np.zeros(len(order), dtype=bool)
        for i, grp in zip(order, g, strict=True):
            expected_hit[i] = grp in seen
            seen.add(grp)
    if expected_hit is not None:
        # what the dataset allows, not what the server did: a server that keeps only its
        # last prompt missed 9 of the "expected" hits (TTFT 1.3-2.5 s) in one run
        out["expected_is_upper_bound"] = True
    if not reported.any():
        return out  # hit or miss is the server's to say; with no report, no split
    got = np.array([x or 0 for x in cached], dtype=np.int64)
    total = int(inputs[reported].sum())
    out["observed_cached_fraction"] = float(got[reported].sum()) / total if total else None
    hit, basis = reported & (got > 0), "server usage (cached_tokens > 0)"
    miss = reported & (got == 0)
    out["ttft_ms_by_cache"] = {
        "basis": basis,
        "hit": weighted_distribution(ttft[hit & ok & ~np.isnan(ttft)]),
        "miss": weighted_distribution(ttft[miss & ok & ~np.isnan(ttft)]),
        "hit_requests": int((hit & ok).sum()),
        "miss_requests": int((miss & ok).sum()),
    }
    return out


def _reasoning(per_req: list[dict[str, Any]], ok: np.ndarray, issue: np.ndarray, first: np.ndarray) -> dict[str, Any]:
    """TTFO and the reasoning/answer split of a run whose answers had reasoning; {} otherwise.

    TTFO (time to first output token, AIPerf's `time_to_first_output_token`): `issue` (the
    request's start: LoadGen's issue, or dispatch on a schedule the harness owns) to the
    first answer token, i.e. the first content chunk that is not reasoning; a request that
    reasoned not at all has it at its TTFT. Reasoning tokens per request: the server's
    usage.completion_tokens_details.reasoning_tokens when it sent one, else the client's
    count; answer tokens are the request's output tokens less those."""
    if not any("reasoning_tokens" in e for e in per_req):
        return {}
    good = [i for i, e in enumerate(per_req) if ok[i]]
    ttfo, reasoning_ms, r_tokens, a_tokens, sources = [], [], [], [], Counter()
    compared = differing = server_total = client_total = 0
    for i in good:
        e = per_req[i]
        answer_at = int(e.get("first_answer_ns") or 0) if "first_answer_ns" in e else int(first[i])
        if answer_at > 0:
            ttfo.append(answer_at - int(issue[i]))
            reasoning_ms.append(answer_at - int(first[i]))
        client, server = _int(e.get("reasoning_tokens")), e.get("server_reasoning_tokens")
        r = int(server) if server is not None else client
        sources["usage" if server is not None else "client"] += "reasoning_tokens" in e
        r_tokens.append(r)
        a_tokens.append(max(_int(e.get("n")) - r, 0))
        if server is not None:
            compared += 1
            differing += int(server) != client
            server_total += int(server)
            client_total += client
    total_r, total_a = sum(r_tokens), sum(a_tokens)
    return {
        "ttfo_ms": weighted_distribution(np.asarray(ttfo, dtype=np.float64), unit=NS_PER_MS),
        "reasoning": {
            "requests_with_reasoning": sum(1 for r in r_tokens if r > 0),
            "reasoning_tokens": total_r,
            "answer_tokens": total_a,
            "reasoning_share": total_r / (total_r + total_a) if total_r + total_a else None,
            "reasoning_tokens_per_request_mean": total_r / len(good) if good else None,
            "answer_tokens_per_request_mean": total_a / len(good) if good else None,
            "reasoning_count_source": dict(sources),
        },
        # the server's reasoning count against the client's, as `mismatch` is for all output
        # tokens (a top-level key, as that one: the reports list a section's flat figures)
        "reasoning_mismatch": {"requests_compared": compared, "requests_differing": differing, "server_tokens": server_total,
                               "client_tokens": client_total,
                               "server_over_client": server_total / client_total if client_total else None},
        # first token to first answer token: the time the model reasoned, as the client saw it
        "reasoning_time_ms": weighted_distribution(np.asarray(reasoning_ms, dtype=np.float64), unit=NS_PER_MS),
    }


def _tool_calls(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Tool calls streamed back, over every request (a failed one's were generated and paid
    for too: the cost reads `tool_calls`); {} when none had any."""
    calls = [c for e in entries for c in (e.get("tool_calls") or []) if isinstance(c, dict)]
    if not calls:
        return {}
    return {
        "tool_calls": len(calls),
        "tool_call_requests": sum(1 for e in entries if e.get("tool_calls")),
        "tool_call_tokens": sum(_int(c.get("tokens")) for c in calls),
        "tool_calls_not_json": sum(1 for c in calls if c.get("json") is False),
    }


def _kv_cache(per_req: list[dict[str, Any]], ok: np.ndarray, shape: dict[str, Any] | None) -> dict[str, Any] | None:
    """Measured KV-cache bytes (a backend's own `metrics`) beside harness.results.kv_cache's estimate."""
    measured = [(e["metrics"]["kv_cache_bytes"], e["metrics"]["kv_cache_tokens"])
                for e, good in zip(per_req, ok, strict=True)
                if good and isinstance(e.get("metrics"), dict) and "kv_cache_bytes" in e["metrics"]]  # fmt: skip
    if not measured and not shape:
        return None
    out: dict[str, Any] = {"shape": shape, "requests_measured": len(measured)}
    per_token = KvShape(**shape).bytes_per_token() if shape else None
    out["estimate_bytes_per_token"] = per_token
    if measured:
        b = np.array([m[0] for m in measured], dtype=np.float64)
        t = np.array([m[1] for m in measured], dtype=np.float64)
        out["measured_bytes_per_token"] = float(b.sum() / t.sum()) if t.sum() else None
        out["request_bytes"] = weighted_distribution(b)
        out["request_tokens_mean"] = float(t.mean())
        if per_token:
            out["estimate_request_bytes_mean"] = per_token * float(t.mean())
            out["measured_over_estimate"] = out["measured_bytes_per_token"] / per_token if out["measured_bytes_per_token"] else None
    return out

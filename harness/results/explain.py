"""LoadGen's verdict in plain words, with the setting to change and a value to change it to."""

from __future__ import annotations

import math
from typing import Any


# A fix sized exactly from the run it fixes fails again when the next run is a little
# faster (this one's rate included its start-up): it leaves this much room.
FIX_MARGIN = 1.5


def _round_sig(x: float) -> float:
    if x <= 0 or not math.isfinite(x):
        return x
    digits = 2 - int(math.floor(math.log10(x)))
    return round(x, max(digits, 0)) if digits > 0 else float(round(x, digits))


def explain(scenario: str, lg: dict[str, Any], ours: dict[str, Any],
            child: dict[str, Any] | None = None) -> tuple[list[str], list[str]]:
    """(reasons, fixes) for an INVALID run; both empty for a VALID one. `child`: child.json,
    whose max_batch and batches_freely say which settings would raise capacity."""
    reasons: list[str] = []
    fixes: list[str] = []
    if lg.get("result_validity") != "INVALID":
        return reasons, fixes
    eff = {k.removeprefix("effective_"): v for k, v in lg.items() if k.startswith("effective_")}
    min_dur_s = (eff.get("min_duration_ms") or 0) / 1e3
    rate = ours.get("throughput_per_s") or 0.0
    if lg.get("result_min_duration_met") is False:
        if scenario == "Offline":
            reasons.append(
                f"the Offline query ran out of samples before min_duration ({min_dur_s:g} s): LoadGen issues "
                f"1.1 x offline_expected_qps ({eff.get('target_qps')}) x min_duration samples, and the SUT "
                f"finished them faster ({rate:,.0f} samples/s)"
            )
            fixes.append(f"raise offline_expected_qps to ≈ {_round_sig(rate * FIX_MARGIN):g} (the rate measured here plus "
                         f"{FIX_MARGIN - 1:.0%}: a longer query runs past its start-up; or set none and the harness "
                         "sizes it from a pilot)")
        elif scenario in ("SingleStream", "MultiStream"):
            key = "single_stream_expected_latency_ms" if scenario == "SingleStream" else "multi_stream_expected_latency_ms"
            p50 = ours.get("latency_ms", {}).get("p50") or 0
            # LoadGen logs the hint only as requested; its effective target_latency is a Server
            # setting (0 here), and its effective target_qps is 1 s / the hint
            hint_ns = lg.get(f"requested_{key.removesuffix('_ms')}_ns")
            if hint_ns is None and eff.get("target_qps"):
                hint_ns = 1e9 / eff["target_qps"]
            hint = f" ({hint_ns / 1e6:g} ms)" if hint_ns else ""
            reasons.append(
                f"too few queries were pre-generated to fill min_duration ({min_dur_s:g} s): LoadGen sizes them "
                f"from the expected latency{hint} and the SUT was faster"
            )
            fixes.append(f"lower {key} to ≈ {_round_sig(max(p50 / FIX_MARGIN, 1e-3)):g} (the p50 measured here, "
                         f"{1 - 1 / FIX_MARGIN:.0%} lower for margin)")
        else:
            reasons.append(f"the run ended before min_duration ({min_dur_s:g} s)")
            fixes.append("raise max_duration_s or max_query_count (0 means no limit), or lower min_duration_s")
    if lg.get("result_min_queries_met") is False:
        reasons.append(f"fewer queries than min_query_count ({eff.get('min_query_count')}) completed")
        fixes.append("raise min_duration_s, or lower min_query_count")
    token_bound = _token_bound(lg, eff) if lg.get("result_perf_constraints_met") is False and scenario == "Server" else None
    if token_bound is not None:
        # LoadGen judged TTFT or TPOT, not latency: target_latency_ms is its unused default here
        name, got_ms, bound_ms, key = token_bound
        pct = eff.get("target_latency_percentile") or 0.99
        reasons.append(f"the {pct * 100:g}th percentile {name} {got_ms:.3g} ms exceeds the {bound_ms:g} ms bound "
                       f"({key}) at {eff.get('target_qps') or 0:g} QPS target")
        fixes.append(f"lower target_qps to ≈ {_round_sig((eff.get('target_qps') or 0) * 0.8):g}, or raise {key}")
    elif lg.get("result_perf_constraints_met") is False and scenario == "Server":
        target_ms = (eff.get("target_latency_ns") or 0) / 1e6
        pct = eff.get("target_latency_percentile") or 0.99
        key = f"result_{pct * 100:.2f}_percentile_latency_ns"
        got_ms = (lg.get(key) or 0) / 1e6
        target_qps = eff.get("target_qps") or 0
        # Poisson arrivals make the offered rate of a short run differ from the target by
        # chance: saturation is judged against what LoadGen actually scheduled.
        offered = lg.get("result_scheduled_samples_per_sec") or target_qps
        completed = lg.get("result_completed_samples_per_sec") or rate
        reasons.append(
            f"the {pct * 100:g}th percentile latency {got_ms:.3g} ms exceeds the {target_ms:g} ms bound at "
            f"{target_qps:g} QPS target"
        )
        if offered and completed < 0.95 * offered:
            reasons.append(f"the SUT completed only {completed:,.0f} samples/s of the {offered:,.0f} offered: it is saturated")
            fixes += _capacity_settings(ours, child or {})
            fixes.append(f"lower target_qps to ≈ {_round_sig(completed * 0.9):g}")
        else:
            fixes.append(f"lower target_qps to ≈ {_round_sig(target_qps * 0.8):g}, or raise target_latency_ms")
    if lg.get("result_perf_constraints_met") is False and scenario != "Server":
        reasons.append("LoadGen's performance constraints were not met")
    if lg.get("early_stopping_met") is False:
        # With token latencies LoadGen's verdict is in the TTFT and TPOT results instead
        texts = [(what, str(lg.get(key) or "").strip()) for what, key in
                 (("the percentile", "early_stopping_result"), ("the TTFT percentile", "early_stopping_ttft_result"),
                  ("the TPOT percentile", "early_stopping_tpot_result"))]
        texts = [(what, text) for what, text in texts if text] or [("the percentile", "LoadGen gave no detail")]
        for what, text in texts:
            reasons.append(f"early stopping could not bound {what}: {text}")
        more = [n for n in (_more_queries(text) for _, text in texts) if n]
        total = [n for n in (_need_queries(text) for _, text in texts) if n]
        if more:
            done = int(lg.get("result_query_count") or 0)
            fixes.append(f"raise min_query_count to ≥ {done + max(more)} (LoadGen asks for {max(more)} more queries)")
        elif total:
            fixes.append(f"raise min_query_count to ≥ {max(total)}")
        else:
            fixes.append("run longer: raise min_duration_s")
    if not reasons:
        why = lg.get("result_invalid_reason") or "LoadGen gave no reason"
        reasons.append(str(why).strip())
    return reasons, fixes


def _capacity_settings(ours: dict[str, Any], child: dict[str, Any]) -> list[str]:
    """A saturated Server run that served one sample a call on a backend that takes any
    batch: max_batch would let a worker serve the backlog in one call. Said with what the
    run measured, so the user can see the queue was the limit, not the model."""
    if child.get("max_batch") != 1 or not child.get("batches_freely"):
        return []
    queued = (ours.get("queue_ms") or {}).get("p50")
    service = (ours.get("service_ms") or {}).get("p50")
    measured = f" (p50: {_ms(queued)} ms queued for a {_ms(service)} ms call)" if queued and service else ""
    return [f"unset max_batch: this backend takes any batch, and one sample a call saturated{measured}; "
            "by default Server serves what is queued in one call"]


def _ms(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _token_bound(lg: dict[str, Any], eff: dict[str, Any]) -> tuple[str, float, float, str] | None:
    """(TTFT|TPOT, LoadGen's figure at the target percentile, the bound, its setting) when
    LoadGen judged token latencies and one of them broke its bound."""
    if not lg.get("requested_use_token_latencies"):
        return None
    pct = eff.get("target_latency_percentile") or 0.99
    why = str(lg.get("result_invalid_reason") or "")
    for name, result_key, bound_key, setting in (
        ("TTFT", f"result_first_token_{pct * 100:.2f}_percentile_latency_ns", "requested_server_ttft_latency", "ttft_latency_ms"),
        ("TPOT", f"result_time_per_output_token_{pct * 100:.2f}_percentile_ns", "requested_server_tpot_latency", "tpot_latency_ms"),
    ):
        got, bound = lg.get(result_key), lg.get(bound_key)
        if isinstance(got, (int, float)) and isinstance(bound, (int, float)) and (got > bound or name in why):
            return name, got / 1e6, bound / 1e6, setting
    return None


def _more_queries(text: str) -> int | None:
    """'... Would need to run at least 4 more queries ...' -> 4."""
    marker = "at least "
    i = text.find(marker)
    if i < 0 or "more queries" not in text:
        return None
    digits = "".join(ch for ch in text[i + len(marker):].split()[0] if ch.isdigit())
    return int(digits) if digits else None


def _need_queries(text: str) -> int | None:
    marker = "at least "
    i = text.find(marker + "", text.find("Need to process"))
    if "Need to process" not in text or i < 0:
        return None
    digits = "".join(ch for ch in text[i + len(marker) :].split()[0] if ch.isdigit())
    return int(digits) if digits else None

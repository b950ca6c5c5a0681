"""The report's "vectors" section (harness.report.sections): a run whose requests carry
several inputs, one output each (an embeddings API), from summary.json's `vectors`
(harness.results.vector_metrics). Two narrow tables, so that the terminal's 80 columns
hold them: the rates and counts, then latency per request and per input."""

from __future__ import annotations

from typing import Any

from harness.report.figures import Table, ms, num, rate


def vector_rates_table(v: dict[str, Any]) -> Table:
    tokens, per_s, mismatch = v["input_tokens"], v["input_tokens_per_s"], v["mismatch"]
    server_note = "" if tokens["server"] is not None else "not reported by every request"
    if mismatch["requests_differing"]:
        server_note = f"differs from the client's in {mismatch['requests_differing']} of {mismatch['requests_compared']} requests"
    dims = v["dimensions_seen"]
    rows = [
        ["requests/s", rate(v["requests_per_s"]), f"{v['requests']:,} ok, {v['requests_failed']:,} failed"],
        ["inputs/s", rate(v["inputs_per_s"]), f"{v['inputs']:,} inputs, {num(v['inputs_per_request_mean'], 2)} a request"],
        ["input tokens/s (server)", rate(per_s["server"]),
         f"{tokens['server']:,} tokens, usage" + (f"; {server_note}" if server_note else "") if tokens["server"] is not None
         else server_note],
        ["input tokens/s (client)", rate(per_s["client"]), f"{tokens['client']:,} tokens, {v['input_token_count_client'] or '—'}"],
        ["dimension", str(v["dimension"]) if v["dimension"] is not None else "—",
         "every answer" if v["dimension"] is not None else
         ("none answered" if not dims else "not one: " + ", ".join("×".join(map(str, d)) or "scalar" for d in dims))],
    ]
    return ["figure", "value", "of"], rows


def vector_latency_table(v: dict[str, Any]) -> Table:
    keys = ("p50", "p90", "p99", "mean", "max")
    rows = [
        ["per request", *(ms(v["request_latency_ms"][k]) for k in keys)],
        ["per input", *(ms(v["input_latency_ms"][k]) for k in keys)],
        ["request / inputs", *(ms(v["request_ms_per_input"][k]) for k in keys)],
    ]
    return ["latency ms", *keys], rows

"""Reasoning answers and streamed tool calls against the truth server (tests/support/http_servers.py):
TTFT (the first token, reasoning included) and TTFO (the first answer token) recovered from
the injected timing within the single-turn tests' bounds, the reasoning/answer split and the
tool calls exactly."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tests.support.http_servers import TOOL_CALL, TOOL_CALL_BAD, ServerThread, Timing, openai_app, reasoning_pieces, write_prompts

TOKEN_RUN = dict(use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000)


def _close(value: float, truth: float, rel: float) -> bool:
    return abs(value - truth) <= rel * truth


def _entries(run_dir: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("style", "options"), [
    ("reasoning_content", {}),
    ("reasoning", {}),  # newer vLLM's name for the field
    ("think", {"reasoning_parser": "think_tags"}),  # inline in the content
], ids=["reasoning_content", "reasoning", "think_tags"])
def test_ttft_and_ttfo_match_injected_reasoning_time(run_harness, style, options):
    t = Timing(queue_ms=20, ttft_ms=100, tpot_ms=10, tokens=10, reasoning_tokens=8, reasoning_ms=150, reasoning_style=style)
    arrivals: list[tuple[int, list[int]]] = []
    with ServerThread(openai_app(t, arrivals=arrivals)) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="SingleStream", dataset="synthetic:isl=32,osl=10,n=8",
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", **options},
            min_duration_s=1.0, min_query_count=4, single_stream_expected_latency_ms=360, **TOKEN_RUN,
        )  # fmt: skip
    tok = s["tokens"]
    assert s["harness"]["success_rate"] == 1.0
    thoughts = reasoning_pieces(t)  # the events of the reasoning span, tags included for "think"
    r = len(thoughts)
    # What the server really did, per timed request (the warm-up's came first): its first write
    # is the first reasoning token, its write number r the first answer token. The truth is
    # these, not the injected figures: on a busy machine its one thread is late to its sleeps.
    timed = sorted(arrivals)[len(arrivals) - s["harness"]["samples"]:]
    server_ttft = float(np.median([w[0] - a for a, w in timed])) / 1e6
    server_ttfo = float(np.median([w[r] - a for a, w in timed])) / 1e6
    injected_ttft, injected_ttfo = t.queue_ms + t.ttft_ms, t.queue_ms + t.ttft_ms + t.reasoning_ms
    assert injected_ttft <= server_ttft and injected_ttfo <= server_ttfo, (server_ttft, server_ttfo)
    # the single-turn test's bound (test_http_truth.py): whole-request figures add the
    # client's and the loopback's time to the server's, within 5 % of it
    assert _close(tok["ttft_ms"]["p50"], server_ttft, 0.05), (tok["ttft_ms"], server_ttft)
    assert _close(tok["ttfo_ms"]["p50"], server_ttfo, 0.05), (tok["ttfo_ms"], server_ttfo)
    # the reasoning time is TTFO - TTFT: both client stamps on one clock, so the server's own
    # gap (first answer write - first write) bounds it as ITL is bounded there (2 %)
    server_gap = float(np.median([w[r] - w[0] for _, w in timed])) / 1e6
    assert _close(tok["reasoning_time_ms"]["p50"], server_gap, 0.02), (tok["reasoning_time_ms"], server_gap)
    # LoadGen's TTFT is the first token of either kind too
    assert _close(tok["agreement"]["ttft_p50"], 1.0, 0.02), tok["agreement"]
    # counts, exactly: usage says r reasoning tokens of 10 + r; the client counted one per event
    rs = tok["reasoning"]
    n = s["harness"]["samples"]
    assert (rs["reasoning_tokens"], rs["answer_tokens"]) == (n * r, n * t.tokens)
    assert rs["requests_with_reasoning"] == n and rs["reasoning_count_source"] == {"usage": n}
    assert tok["reasoning_mismatch"]["requests_compared"] == n and tok["reasoning_mismatch"]["requests_differing"] == 0
    assert rs["reasoning_share"] == r / (r + t.tokens)
    assert tok["output_tokens"] == n * (r + t.tokens)
    for e in _entries(run_dir):
        assert e["reasoning"] == "".join(p for p in thoughts if not p.startswith(("<think>", "</think>")))
        assert e["text"] == "".join(f"t{i} " for i in range(t.tokens))  # the answer only: what is scored
        assert (e["reasoning_tokens"], e["server_reasoning_tokens"]) == (r, r)


@pytest.mark.parallel
def test_tool_calls_are_reassembled_counted_and_a_broken_one_fails(run_harness, tmp_path):
    behaviours = ["@tool_call", "@ok", "@tool_bad_args", "@tool_call"]
    prompts = write_prompts(tmp_path / "prompts.jsonl", behaviours)
    # reasoning before each answer, and a server that counts one reasoning token more than it sent
    t = Timing(ttft_ms=20, tpot_ms=2, tokens=6, reasoning_tokens=3, reasoning_ms=10, reasoning_usage_extra=1)
    with ServerThread(openai_app(t)) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="Offline", dataset=str(prompts),
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "warmup_requests": 0},
            min_duration_s=0.1, min_query_count=8, offline_expected_qps=1, **TOKEN_RUN,
        )  # fmt: skip
    entries = _entries(run_dir)
    kind = {e["query_id"]: behaviours[e["sample_index"]] for e in entries}
    h, tok = s["harness"], s["tokens"]
    bad = sum(1 for e in entries if kind[e["query_id"]] == "@tool_bad_args")
    good_calls = sum(1 for e in entries if kind[e["query_id"]] == "@tool_call")
    assert bad and good_calls and h["samples"] == len(entries)
    assert h["failures_by_reason"] == {"malformed_tool_call": bad}
    for e in entries:
        want = {"@tool_call": TOOL_CALL, "@tool_bad_args": TOOL_CALL_BAD}.get(kind[e["query_id"]])
        if want is None:
            assert "tool_calls" not in e and e["status"] == "ok"
            continue
        name, pieces = want
        # reassembled exactly, kept even when the request failed (a next turn reads them back)
        assert e["tool_calls"] == [{"index": 0, "id": "call_0", "name": name, "arguments": "".join(pieces),
                                    "tokens": 1 + len(pieces), "json": want is TOOL_CALL}]
        assert e["status"] == ("ok" if want is TOOL_CALL else "error")
        assert e["text"] == "" and e["reasoning"] == " r0 r1 r2"
    # every request's calls, failed ones too (they were generated and paid for): the cost reads this
    assert tok["tool_calls"] == good_calls + bad and tok["tool_call_requests"] == good_calls + bad
    assert tok["tool_call_tokens"] == good_calls * (1 + len(TOOL_CALL[1])) + bad * (1 + len(TOOL_CALL_BAD[1]))
    assert tok["tool_calls_not_json"] == bad
    # the server's reasoning count (4) against the client's (3), on every successful request
    m = tok["reasoning_mismatch"]
    ok = h["succeeded"]
    assert (m["requests_compared"], m["requests_differing"], m["server_tokens"], m["client_tokens"]) == (ok, ok, 4 * ok, 3 * ok)
    # the cost prices the calls the run made, not the sheet's assumption
    from harness.analysis.cost import CostSheet, cost_for_run

    cost = cost_for_run(run_dir, s, CostSheet(per_tool_call=0.01, tool_calls_per_request=5))
    assert cost["usage"]["tool_calls"] == good_calls + bad and cost["usage"]["tool_calls_assumed"] is False

"""TTFO and the reasoning/answer split from tokens.jsonl entries (harness.results.token_metrics),
on requests whose stamps are written out, so each figure is checked against its arithmetic."""

from __future__ import annotations

import numpy as np

from harness.results.token_metrics import _reasoning, _tool_calls

MS = 1_000_000


def test_ttfo_is_the_first_answer_token_and_a_request_without_reasoning_has_it_at_ttft():
    issue = np.array([0, 0, 0, 0], dtype=np.int64)
    first = np.array([10, 20, 30, 40], dtype=np.int64) * MS
    ok = np.array([True, True, True, False])
    per_req = [
        # reasoned 50 ms; the server counted 6 reasoning tokens, the client 5
        {"n": 16, "reasoning_tokens": 5, "server_reasoning_tokens": 6, "first_answer_ns": 60 * MS},
        {"n": 8},  # no reasoning at all: its first token is its first answer token
        # reasoned to the end, no answer token: no TTFO (AIPerf skips such a record too)
        {"n": 4, "reasoning_tokens": 4, "server_reasoning_tokens": None, "first_answer_ns": 0},
        {"n": 9, "reasoning_tokens": 9, "first_answer_ns": 90 * MS},  # failed: left out
    ]
    out = _reasoning(per_req, ok, issue, first)
    assert out["ttfo_ms"]["min"] == 20.0 and out["ttfo_ms"]["max"] == 60.0 and out["ttfo_ms"]["mean"] == 40.0
    assert out["reasoning_time_ms"]["max"] == 50.0 and out["reasoning_time_ms"]["min"] == 0.0
    rs = out["reasoning"]
    # reasoning: the server's 6 where it counted, the client's 4 where it did not
    assert (rs["reasoning_tokens"], rs["answer_tokens"]) == (6 + 0 + 4, (16 - 6) + 8 + 0)
    assert rs["requests_with_reasoning"] == 2
    assert rs["reasoning_count_source"] == {"usage": 1, "client": 1}
    assert out["reasoning_mismatch"] == {"requests_compared": 1, "requests_differing": 1, "server_tokens": 6,
                                         "client_tokens": 5, "server_over_client": 1.2}


def test_no_reasoning_anywhere_adds_no_figure():
    ok = np.array([True])
    assert _reasoning([{"n": 3}], ok, np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64)) == {}
    assert _tool_calls([{"n": 3}]) == {}


def test_tool_calls_count_every_request_failed_ones_too():
    calls = [{"index": 0, "name": "f", "arguments": "{}", "tokens": 3, "json": True}]
    bad = [{"index": 0, "name": "f", "arguments": "{", "tokens": 2, "json": False}]
    entries = [{"status": "ok", "tool_calls": calls + calls}, {"status": "error", "tool_calls": bad}, {"status": "ok"}]
    assert _tool_calls(entries) == {"tool_calls": 3, "tool_call_requests": 2, "tool_call_tokens": 8, "tool_calls_not_json": 1}

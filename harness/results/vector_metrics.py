"""The summary's "vectors" section: figures of a run whose requests each carry several
inputs and give one output per input (an embeddings API; StreamingBackend.max_inputs_per_request).

Read from tokens.jsonl's request entries (one per request: its inputs, the client's and the
server's input tokens, the output's shape per input, dispatch and completion) and the
records (one row per input, LoadGen's sample). Rates are over the same span as the
harness's own throughput (first issue to last completion):

    requests_per_s, inputs_per_s      successful requests and inputs a second
    input_tokens / input_tokens_per_s the server's usage and the client's count side by side,
                                      with the requests where they differ (`mismatch`)
    request_latency_ms                a request's dispatch to its answer: what the server took
    input_latency_ms                  an input's issue to its request's answer (LoadGen's sample latency)
    request_ms_per_input              a request's latency over its inputs
    dimension                         the one output length every successful answer had;
                                      `dimensions_seen` lists them all (more than one: not one dimension)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from harness.results.records import Records
from harness.results.stats import NS_PER_MS, distribution


def request_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tokens.jsonl's entries of requests that carried several inputs (the SUT's groups)."""
    return [e for e in entries if "inputs" in e and "request" in e]


def vector_summary(records: Records | None, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The section; None for a run without grouped requests."""
    requests = request_entries(entries)
    if records is None or not len(records) or not requests:
        return None
    c = records.columns
    ok_rows = c["status"] == "ok"
    span_s = float(c["complete_ns"].max() - c["issue_ns"].min()) / 1e9
    ok = [e for e in requests if e.get("status") == "ok"]
    inputs = np.array([int(e["inputs"]) for e in ok], dtype=np.int64)
    took = np.array([int(e["complete_ns"]) - int(e["dispatch_ns"]) for e in ok], dtype=np.int64)
    client = sum(int(e.get("input_tokens") or 0) for e in ok)
    compared = [e for e in ok if e.get("server_input_tokens") is not None]
    server = sum(int(e["server_input_tokens"]) for e in compared) if compared else None
    compared_client = sum(int(e.get("input_tokens") or 0) for e in compared)
    shapes = Counter(tuple(e.get("output_shape") or ()) for e in ok)
    flat = sorted(s[0] for s in shapes if len(s) == 1)

    def per_s(value: float | None) -> float | None:
        return value / span_s if value is not None and span_s > 0 else None

    return {
        "requests": len(ok),
        "requests_failed": len(requests) - len(ok),
        "inputs": int(inputs.sum()),
        "inputs_per_request_mean": float(inputs.mean()) if len(ok) else None,
        "requests_per_s": per_s(len(ok)),
        "inputs_per_s": per_s(float(inputs.sum())),
        # the server's usage (only when every successful request reported it) beside the client's count
        "input_tokens": {"server": server if len(compared) == len(ok) else None, "client": client},
        "input_tokens_per_s": {"server": per_s(server) if len(compared) == len(ok) else None, "client": per_s(client)},
        "input_token_count_client": next((e.get("input_source") for e in ok), None),
        "mismatch": {
            "requests_compared": len(compared),
            "requests_differing": sum(int(e["server_input_tokens"]) != int(e.get("input_tokens") or 0) for e in compared),
            "server_tokens": server,
            "client_tokens": compared_client,
            "server_over_client": server / compared_client if server is not None and compared_client else None,
        },
        "request_latency_ms": distribution(took, unit=NS_PER_MS),
        "input_latency_ms": distribution((c["complete_ns"] - c["issue_ns"])[ok_rows], unit=NS_PER_MS),
        "request_ms_per_input": distribution(took / np.maximum(inputs, 1), unit=NS_PER_MS),
        "dimension": flat[0] if len(shapes) == 1 and len(flat) == 1 else None,
        "dimensions_seen": [list(s) for s in sorted(shapes)],
    }

"""Results folders for the report tests: real synthetic and HTTP runs, and a token run built by hand.

The hand-built token folder starts from a real Server run with failures and gives each
record a first token, output and input token counts, plus a `tokens` section that follows
docs/summary.schema.json with the figures no backend produces yet (goodput, cached
input tokens), so renderers and cost are checked on them too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from harness.config.run_config import RunConfig
from harness.results.records import COLUMNS, read_records, write_records
from harness.results.summary import percentiles_ms
from harness.run import runner

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json"


def server_run_with_failures(root: Path) -> Path:
    """Server at 300/s on a 2 ms backend, every 25th call failing; one sample a call, so
    every 25th sample (a backlog would otherwise be batched, and fail a call's worth)."""
    return runner.run(
        RunConfig(
            backend="synthetic",
            scenario="Server",
            backend_options={"service_time_ms": 2.0, "fail_every": 25},
            target_qps=300,
            max_batch=1,
            min_duration_s=1.0,
            min_query_count=200,
        ),
        root,
    ).run_dir


def http_token_run(root: Path) -> Path:
    """A real generative run: the HTTP backend against the in-process OpenAI test server
    (2 ms queue, 10 ms to first token, 2 ms per token, 12 tokens)."""
    from tests.support.http_servers import ServerThread, Timing, openai_app

    with ServerThread(openai_app(Timing(queue_ms=2, ttft_ms=10, tpot_ms=2, tokens=12))) as srv:
        return runner.run(
            RunConfig(
                backend="http",
                scenario="Server",
                dataset="synthetic:isl=32,osl=12,n=16",
                backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                target_qps=50,
                min_duration_s=1.0,
                min_query_count=50,
                use_token_latencies=True,
                ttft_latency_ms=5000,
                tpot_latency_ms=1000,
            ),
            root,
        ).run_dir


def token_run(source: Path, dest: Path, input_range: tuple[int, int] = (16, 512),
              output_range: tuple[int, int] = (2, 128)) -> Path:
    """A copy of `source` whose records streamed tokens: TTFT grows with input length.
    Lengths are drawn uniformly from [low, high) of `input_range` and `output_range`."""
    shutil.copytree(source, dest)
    cols = read_records(dest).columns
    n = len(cols["status"])
    rng = np.random.default_rng(0)
    input_tokens = rng.integers(*input_range, n)
    n_tokens = rng.integers(*output_range, n)
    span = cols["complete_ns"] - cols["dispatch_ns"]
    first_token = cols["dispatch_ns"] + span // 3
    write_records(dest, {**{c: cols[c] for c in COLUMNS}, "first_token_ns": first_token, "n_tokens": n_tokens,
                         "input_tokens": input_tokens})
    ok = cols["status"] == "ok"
    ttft = (first_token - cols["issue_ns"])[ok]
    tpot = ((cols["complete_ns"] - first_token) // (n_tokens - 1))[ok]
    summary = json.loads((dest / "summary.json").read_text())
    duration = summary["harness"]["duration_s"]
    summary["tokens"] = {
        "requests": int(ok.sum()),
        "ttft_ms": percentiles_ms(ttft),
        "tpot_ms": percentiles_ms(tpot),
        "itl_ms": percentiles_ms(tpot),
        "e2e_ms": percentiles_ms((cols["complete_ns"] - cols["issue_ns"])[ok]),
        "input_tokens": int(input_tokens.sum()),
        "cached_input_tokens": int(input_tokens.sum()) // 4,
        "output_tokens": int(n_tokens.sum()),
        "output_tokens_per_s": float(n_tokens[ok].sum()) / duration,
        "goodput": {"criterion": "TTFT under 50 ms", "requests": int((ttft < 50e6).sum()), "per_s": None, "rate": None},
        "loadgen": {"ttft_ms": None, "tpot_ms": None, "output_tokens_per_s": None},
        "agreement": {},
    }
    (dest / "summary.json").write_text(json.dumps(summary, indent=2))
    return dest

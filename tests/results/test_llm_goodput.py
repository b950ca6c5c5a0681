"""SLO attainment, goodput and answer validation on a run whose right answer is known: the
injected-delay OpenAI server (tests/support/http_servers.py) answers each request on a schedule,
so which requests meet which target is decided by the prompt file, not by chance."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from harness.errors import ConfigError
from harness.results.records import read_records
from harness.results.slo import parse_slo
from tests.support.http_servers import ServerThread, Timing, openai_app

# TTFT 50 ms, then 10 ms a token: 4 tokens end at ~80 ms, 40 tokens at ~440 ms.
TIMING = Timing(ttft_ms=50, tpot_ms=10)
# (row, kind): the server's answer to n tokens is "t0 t1 ... t{n-1} "
ROWS = (
    [({"prompt": f"fast right {i}", "max_tokens": 4, "expected": "t3", "validator": "contains"}, "good") for i in range(4)]
    + [({"prompt": f"slow {i}", "max_tokens": 40}, "slow") for i in range(4)]
    + [({"prompt": f"fast wrong {i}", "max_tokens": 4, "expected": "nope", "validator": "exact"}, "wrong") for i in range(2)]
    + [({"prompt": f"failing {i} @http_503", "max_tokens": 4}, "failed") for i in range(2)]
)  # fmt: skip


def test_goodput_counts_exactly_the_requests_that_met_every_target(run_harness, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r, _ in ROWS))
    with ServerThread(openai_app(TIMING)) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="Offline", dataset=str(path),
            backend_options={"protocol": "openai-completions", "url": f"{srv.url}/v1", "warmup_requests": 0},
            min_duration_s=0.1, min_query_count=len(ROWS), offline_expected_qps=1, use_token_latencies=True,
            slo={"ttft_ms": 300, "tpot_ms": 30, "e2e_ms": 250},
        )  # fmt: skip
    rec = read_records(run_dir).columns
    kinds = Counter(ROWS[int(i)][1] for i in rec["sample_index"])  # LoadGen picks the samples
    n = int(len(rec["sample_index"]))
    tok = s["tokens"]
    assert s["harness"]["failed"] == kinds["failed"]
    att = tok["slo"]["attainment"]
    # every successful request has a ~50 ms first token and 10 ms tokens; the failed ones met nothing
    assert att["ttft_ms"]["met"] == att["tpot_ms"]["met"] == n - kinds["failed"]
    # only the 40-token answers (~440 ms) miss the 250 ms end-to-end target
    assert att["e2e_ms"]["met"] == kinds["good"] + kinds["wrong"]
    assert att["e2e_ms"]["rate"] == (kinds["good"] + kinds["wrong"]) / n
    v = tok["validation"]
    assert (v["checked"], v["valid"], v["invalid"]) == (kinds["good"] + kinds["wrong"], kinds["good"], kinds["wrong"])
    g = tok["goodput"]
    assert g["requests"] == kinds["good"] and g["rate"] == kinds["good"] / n
    assert g["per_s"] == pytest.approx(kinds["good"] / s["harness"]["duration_s"])
    assert g["criterion"] == "ttft_ms<=300 and tpot_ms<=30 and e2e_ms<=250 and answer valid"
    entries = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    assert all(e["text"] == "t0 t1 t2 t3 " for e in entries if e["valid"] is not None)


def test_slo_keys_and_values_are_checked():
    assert parse_slo({"ttft_ms": 500, "tpot_ms": 50}) == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    assert parse_slo(None) == {}
    with pytest.raises(ConfigError, match="slo.ttft: unknown target"):
        parse_slo({"ttft": 500})
    with pytest.raises(ConfigError, match="positive"):
        parse_slo({"e2e_ms": -1})

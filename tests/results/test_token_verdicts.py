"""A Server run judged on token latencies is explained by the bound that broke (TTFT or
TPOT, with its setting), not by LoadGen's unused latency default, and its early-stopping
text is LoadGen's TTFT/TPOT one, with the query count that would do."""

from __future__ import annotations

from harness.analysis.points import bound_of_invalid, point_entry
from tests.support.http_servers import ServerThread, Timing, openai_app


def test_a_ttft_bound_is_explained_as_ttft(run_harness):
    # TTFT 50 ms against a 20 ms bound; TPOT 5 ms well within 100 ms
    with ServerThread(openai_app(Timing(ttft_ms=50, tpot_ms=5, tokens=6))) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="Server", dataset="synthetic:isl=16,osl=6,n=32",
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"}, target_qps=20, min_duration_s=1,
            min_query_count=40, use_token_latencies=True, ttft_latency_ms=20, tpot_latency_ms=100,
            target_latency_percentile=0.9,
        )  # fmt: skip
    reasons, fixes = s["validity"]["reasons"], s["validity"]["fixes"]
    assert s["validity"]["result"] == "INVALID"
    ttft = next(r for r in reasons if "TTFT" in r and "exceeds" in r)
    assert "20 ms bound (ttft_latency_ms)" in ttft and "percentile TTFT 5" in ttft  # ~50 ms, LoadGen's p90
    assert not any("latency" in r and "100 ms" in r for r in reasons)  # LoadGen's unused default stays unsaid
    assert any("raise ttft_latency_ms" in f for f in fixes) and not any("target_latency_ms" in f for f in fixes)
    for r in reasons:  # no reason ends at a colon with nothing after it
        assert not r.rstrip().endswith(":"), r
    entry = point_entry(run_dir, {})
    assert entry["ttft_bound_ms"] == 20 and bound_of_invalid(entry) == "TTFT p99"

"""The streaming warm-up is timed: it ran between the child's two timers and was reported
as "warm-up 0.00 s" while its requests took seconds (#16 item 19)."""

from __future__ import annotations

from tests.support.http_servers import ServerThread, Timing, openai_app


def test_the_http_warm_up_requests_count_as_warm_up(run_harness):
    # the warm-up sends one request by default; this server takes 200 ms to its first token
    with ServerThread(openai_app(Timing(ttft_ms=200, tpot_ms=5, tokens=4))) as srv:
        _, s = run_harness(backend="http", scenario="Offline", dataset="synthetic:isl=8,osl=4,n=4",
                           backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                           min_duration_s=0, min_query_count=4)
    assert 0.2 <= s["timings_s"]["warmup_s"] < 1.0, s["timings_s"]

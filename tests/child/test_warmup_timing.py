"""The streaming warm-up is timed: it ran between the child's two timers and was reported
as "warm-up 0.00 s" while its requests took seconds (#16 item 19)."""

from __future__ import annotations

import numpy as np

from harness.results.records import read_records
from tests.support.http_servers import ServerThread, Timing, openai_app


def test_the_http_warm_up_requests_count_as_warm_up(run_harness):
    # the warm-up sends one request by default; this server takes 200 ms to its first token
    arrivals: list[tuple[int, list[int]]] = []
    with ServerThread(openai_app(Timing(ttft_ms=200, tpot_ms=5, tokens=4), arrivals=arrivals)) as srv:
        run_dir, s = run_harness(backend="http", scenario="Offline", dataset="synthetic:isl=8,osl=4,n=4",
                                 backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                                 min_duration_s=0, min_query_count=4)
    # The warm-up's window holds its request as the server served it (arrival to last write,
    # on the server's own clock: what it really took on this machine), and it ended before
    # the first timed request was dispatched (one clock, perf_counter, in both processes).
    warm_arrival, warm_writes = sorted(arrivals)[0]
    served_s = (warm_writes[-1] - warm_arrival) / 1e9
    first_dispatch = int(np.asarray(read_records(run_dir).columns["dispatch_ns"]).min())
    assert served_s <= s["timings_s"]["warmup_s"], (served_s, s["timings_s"])
    assert warm_writes[-1] <= first_dispatch
    assert len(arrivals) == 1 + s["harness"]["samples"]  # the warm-up's one, then the timed ones


def test_no_timed_prompt_was_sent_by_the_warm_up(run_harness):
    """A server's prompt cache reuses the longest common prefix: warmed up on sample 0 itself,
    a first timed request on sample 0 was a full cache hit (TTFT 44 ms against 2.9 s). The
    warm-up's prompts must differ from every timed one from their first word on."""
    from harness.data.prompts import build_prompt_dataset

    received: list[str] = []
    spec = "synthetic:isl=8,osl=4,n=4"
    with ServerThread(openai_app(Timing(tokens=4), received=received)) as srv:
        _, s = run_harness(backend="http", scenario="Offline", dataset=spec,
                           backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "warmup_requests": 3},
                           min_duration_s=0, min_query_count=4)
    assert s["harness"]["success_rate"] == 1.0
    warmups, timed = received[:3], received[3:]
    prompts = {p.text() for p in build_prompt_dataset(spec, 0).prompts}
    assert len(timed) == s["harness"]["samples"] and set(timed) <= prompts
    first_words = {p.split()[0] for p in prompts}
    assert all(w.split()[0] not in first_words and w not in prompts for w in warmups), (warmups, prompts)
    # the same kind of request, so it still checks the answer format and opens connections
    assert all(any(w.endswith(p) for p in prompts) for w in warmups)

"""The diagnosis of real sweep folders whose truth is known.

A Server sweep on the synthetic backend (one worker, a fixed 2 ms call: an M/D/1 queue of
capacity 500/s) must say that queue time grows with load and that the point above capacity
is saturated. Sweeps of input and output length against the injected-delay OpenAI server
(tests/support/http_servers.py), whose TTFT is 20 ms + 1 ms per prompt token, and whose
tokens come 4 ms apart, must recover those laws within 10 %.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.analysis.diagnosis import diagnose, fit
from harness.analysis.points import load_sweep
from harness.config.run_config import RunConfig
from harness.run.sweep import Axis, SweepSpec, new_sweep, run_sweep
from tests.support.http_servers import ServerThread, Timing, openai_app

SERVICE_MS = 2.0  # one worker: capacity 1000 / SERVICE_MS = 500/s


def sweep(tmp_path: Path, base: RunConfig, axis: str, values: tuple[str, ...]) -> dict[str, Any]:
    spec = SweepSpec("sweep", base, [Axis(axis, values)])
    return run_sweep(spec, new_sweep(spec, tmp_path / "results"))


def finding(findings: list[dict[str, Any]], start: str) -> dict[str, Any] | None:
    return next((f for f in findings if f["finding"].startswith(start)), None)


@pytest.mark.parallel
def test_a_deficit_the_latency_explains_is_not_saturation():
    """LoadGen's completed rate trails its offered one by the last request's latency: λ x
    latency / N of the run. 20 queries at 32/s whose every answer takes 700 ms complete at
    ~15/s while the server keeps up; the same deficit with 5 ms answers is saturation, as
    is a long run's 50 % deficit whatever its latency."""
    from harness.analysis.points import saturated

    def entry(offered, completed, n, shortest_ms):
        return {"offered_per_s": offered, "completed_per_s": completed, "samples": n,
                "loadgen_latency_ms": {"min": shortest_ms, "p50": shortest_ms, "p99": shortest_ms}}

    assert not saturated(entry(32, 15, 20, 700))
    assert saturated(entry(32, 15, 20, 5))
    assert saturated(entry(100, 50, 1000, 10))
    assert not saturated(entry(100, 96, 1000, 10)) and saturated(entry(100, 94, 1000, 10))  # the 5 % floor
    old = {"offered_per_s": 32, "completed_per_s": 15, "samples": 20}  # a sweep.json from before: 2/N
    assert saturated(old) and not saturated({**old, "completed_per_s": 29})


@pytest.mark.parallel
def test_fit_is_least_squares():
    a, b, r2 = fit([1.0, 2.0, 3.0, 4.0], [5.0, 7.0, 9.0, 11.0])
    assert (round(a, 9), round(b, 9), r2) == (3.0, 2.0, 1.0)
    a, b, r2 = fit([0.0, 1.0, 2.0], [0.0, 2.0, 1.0])  # the middle point pulls the line up
    assert (round(a, 9), round(b, 9), round(r2, 9)) == (0.5, 0.5, 0.25)


def test_queue_share_rises_with_target_qps_and_the_point_past_capacity_is_saturated(tmp_path: Path):
    base = RunConfig(backend="synthetic", scenario="Server", backend_options={"service_time_ms": SERVICE_MS}, max_batch=1,
                     target_latency_ms=20, min_duration_s=0.5, min_query_count=50)
    data = sweep(tmp_path, base, "target_qps", ("100", "300", "700"))
    findings = diagnose(data)
    queue = finding(findings, "queue time grows with load")
    assert queue is not None, findings
    fig = queue["figures"]
    assert fig["load"] == "target_qps" and fig["x"] == [100, 300, 700]
    assert fig["queue_share"][-1] - fig["queue_share"][0] >= 0.15 and fig["slope"] > 0
    # 700/s is past the 500/s a 2 ms worker serves: saturated there, and only there
    sat = finding(findings, "saturated from target_qps 700")
    assert sat is not None, findings
    assert sat["figures"]["saturated_indices"] == [2]
    assert sat["figures"]["completed_per_s"] <= 1000 / SERVICE_MS * 1.05
    # the points carry no token figures and no failures: nothing is said about them
    said = " ".join(f["finding"] for f in findings)
    for absent in ("first token", "TPOT", "output length", "failures"):
        assert absent not in said, said


@pytest.fixture
def llm_server():
    """Start the injected-delay server with a given Timing; stopped after the test."""
    servers: list[ServerThread] = []

    def start(t: Timing) -> ServerThread:
        servers.append(ServerThread(openai_app(t)).__enter__())
        return servers[-1]

    yield start
    for srv in servers:
        srv.__exit__(None, None, None)


def llm_base(srv: ServerThread, dataset: str) -> RunConfig:
    # Offline with every sample in flight at once: no client queue, so TTFT is the server's
    return RunConfig(backend="http", scenario="Offline", dataset=dataset,
                     backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "max_in_flight": 8},
                     min_duration_s=0.1, min_query_count=8, offline_expected_qps=1,
                     use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000)


def test_ttft_against_input_length_recovers_the_servers_law(tmp_path: Path, llm_server):
    # 1 ms a prompt token: the client's and server's own cost of a longer prompt (JSON,
    # counting, 8 requests parsed one after another; ~0.025 ms a token seen here) stays
    # a few per cent of the law
    t = Timing(ttft_ms=20, ttft_ms_per_prompt_token=1.0, tpot_ms=10, tokens=6)  # TPOT: 5 gaps of 10 ms
    srv = llm_server(t)
    data = sweep(tmp_path, llm_base(srv, "synthetic:isl=16,osl=6,n=8"), "isl", ("16", "128", "512"))
    findings = diagnose(data)
    ttft = finding(findings, "the first token is slow for long inputs")
    assert ttft is not None, findings
    law = ttft["figures"]
    assert law["x"] == [16, 128, 512]  # the server's usage.prompt_tokens, one per prompt word
    assert abs(law["b"] - t.ttft_ms_per_prompt_token) <= 0.1 * t.ttft_ms_per_prompt_token, law
    # the intercept is the server's fixed part plus the client's own time, which on a shared
    # 2-core machine was seen from 5 to 16 ms: only a floor and a loose ceiling are exact
    assert t.ttft_ms * 0.9 <= law["a"] <= t.ttft_ms * 3, law
    assert "while TPOT p50 stays" in ttft["finding"] and "queue" not in ttft["finding"]
    assert finding(findings, "completion time grows") is None  # osl is fixed at 6 here


def test_completion_time_against_output_length_recovers_the_decode_rate(tmp_path: Path, llm_server):
    # 2 tokens an SSE event: the same E2E (an event leaves when its last token is due) for
    # half the client's and server's CPU, which a shared 2-core machine can lack; TPOT
    # (E2E - TTFT) / (n - 1) still comes out near 4 ms
    t = Timing(ttft_ms=20, tpot_ms=4, tokens=4, tokens_per_chunk=2)
    srv = llm_server(t)
    data = sweep(tmp_path, llm_base(srv, "synthetic:isl=16,osl=4,n=8"), "osl", ("4", "16", "64"))
    findings = diagnose(data)
    e2e = finding(findings, "completion time grows with output length")
    assert e2e is not None, findings
    law = e2e["figures"]
    assert law["x"] == [4, 16, 64]
    # E2E = ttft + (n - 1) x tpot: the slope is the time per output token
    assert abs(law["b"] - t.tpot_ms) <= 0.1 * t.tpot_ms, law
    assert "→ decode" in e2e["finding"]  # the slope is the TPOT the points measured
    assert finding(findings, "the first token is slow") is None  # isl is fixed at 16 here


def _points(axis: str, xs: list[float], **series: list[float]) -> dict[str, Any]:
    """sweep.json's shape with only what the rules read: for the two laws no server here
    injects (TPOT growing with concurrency, failures growing with load)."""
    points = []
    for i, x in enumerate(xs):
        metrics = {k: v[i] for k, v in series.items()}
        points.append({"index": i, "role": "point", "status": "complete", "values": {axis: str(x)},
                       "completed_per_s": 10.0 * (i + 1), "metrics": metrics})
    return {"axes": [{"name": axis, "values": [str(x) for x in xs]}], "points": points}


@pytest.mark.parallel
def test_tpot_against_concurrency_and_failures_against_load_follow_their_rules():
    conc = [1, 2, 4, 8]
    grows = diagnose(_points("max_in_flight", conc, tpot_p50=[2.0 + 0.5 * c for c in conc]))
    tpot = finding(grows, "TPOT grows with concurrency")
    assert tpot is not None and (tpot["figures"]["a"], tpot["figures"]["b"]) == (2.0, 0.5), grows
    flat = diagnose(_points("max_in_flight", conc, tpot_p50=[2.0, 2.1, 2.0, 2.2]))  # under TPOT_GROWS
    assert finding(flat, "TPOT grows") is None, flat
    failing = diagnose(_points("max_in_flight", conc, success_rate=[100.0, 100.0, 97.0, 80.0]))
    fail = finding(failing, "failures appear at high load")
    assert fail is not None and "97.0 % from 4" in fail["finding"], failing
    steady = diagnose(_points("max_in_flight", conc, success_rate=[100.0, 99.5, 100.0, 99.2]))
    assert finding(steady, "failures") is None, steady

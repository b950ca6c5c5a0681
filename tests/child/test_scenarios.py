"""Every scenario and mode under the real LoadGen; the harness's figures must equal LoadGen's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.config.host import usable_cores
from harness.config.run_config import RunConfig
from harness.results.records import read_records
from tests.support.loadgen_gap import split_of
from tests.support.sleep_probe import SleepProbe

SYN = "synthetic"


def _agree(summary: dict, key: str, tol: float) -> None:
    ratio = summary["agreement"][key]
    assert ratio is not None, f"no agreement figure for {key}"
    assert abs(ratio - 1) <= tol, f"{key}: harness/LoadGen = {ratio:.4f}, tolerance {tol}"


def _agree_latency(summary: dict, k: str, rel: float, abs_ms: float, section: str = "latency_ms") -> None:
    """Latencies differ by LoadGen's issue delay (its stamp precedes our callback), which the
    summary measures (agreement.issue_delay_ms, its mean): beyond that, they agree within
    the tolerance. The delay belongs to the machine (this VM's timers put LoadGen's Server
    issue thread 0.2-0.3 ms late), so it is allowed as measured, not as a fixed guess."""
    ours = summary["harness"][section][k]
    lg = summary["loadgen"]["latency_ms"][k]
    delay = summary["agreement"].get("issue_delay_ms") or 0.0
    assert ours <= lg * 1.01, f"{k}: harness {ours} ms above LoadGen's {lg} ms"
    assert lg - ours <= max(rel * lg, abs_ms) + delay, f"{k}: harness {ours} ms vs LoadGen {lg} ms (issue delay {delay} ms)"


@pytest.mark.parametrize("inline", [None, False], ids=["inline-by-default", "worker-thread"])
def test_single_stream_fixed_service_time_is_reported_exactly(run_harness, inline):
    with SleepProbe() as probe:
        run_dir, s = run_harness(
            backend=SYN,
            scenario="SingleStream",
            backend_options={"service_time_ms": 2.0},
            min_duration_s=1.0,
            single_stream_expected_latency_ms=2.0,
            min_query_count=200,
            issue_inline=inline,
            enable_trace=True,
        )
    assert s["status"] == "complete"
    assert s["sut"]["issue_inline"] is (inline is None)  # SingleStream serves on LoadGen's thread
    assert s["validity"]["result"] == "VALID", s["validity"]
    ours, lg = s["harness"], s["loadgen"]
    assert ours["samples"] == lg["query_count"] >= 200
    assert ours["failed"] == 0 and ours["success_rate"] == 1.0
    # Ground truth: 2 ms of service. A busy machine can only make it later, never earlier,
    # by waking the backend's sleep late: what a thread sleeping beside the run saw over the
    # same seconds (its p50) is allowed, on top of the harness's own share (5 % of service:
    # the dataset's batch and the stamps; 8 % of latency: the hand-off too).
    # With a worker thread the query wakes two threads, the worker on its queue and then its
    # sleep's end: each wake-up may be as late as the probe's (inline, LoadGen's thread sleeps).
    woke = probe.lateness_ms()
    wake_ups = 1 if inline is None else 2
    assert 2.0 <= ours["service_ms"]["p50"] <= 2.0 * 1.05 + woke["p50"], (ours["service_ms"], woke)
    assert 2.0 <= ours["latency_ms"]["p50"] <= 2.0 * 1.08 + wake_ups * woke["p50"], (ours["latency_ms"], woke)
    # LoadGen's latency is ours plus its own issue lateness (its thread waking late: the
    # machine's, reported) plus the hand-over (its stamp to our callback, our end to its
    # stamp: the harness's). A harness that held LoadGen's thread would show milliseconds.
    late, hand, measured = split_of(s)
    assert 0 <= hand["p50"] < 0.2, measured  # ms: the harness's own share, for the median query
    _agree_latency(s, "p50", 0.03, 0.0)
    # At p90 and p99 the gap is LoadGen's lateness at the tail, the machine's: split_of above
    # holds each percentile's gap between the least and the largest per-sample gap its trace
    # measured (a constant 0.25/0.5 ms on top of the mean gap was a bound on the machine).
    _agree(s, "throughput", 0.02)
    assert lg["early_stopping_latency_ms"]["single_stream"] >= lg["latency_ms"]["p90"] * 0.99


def test_server_is_valid_and_agrees_with_loadgen(run_harness):
    run_dir, s = run_harness(
        backend=SYN,
        scenario="Server",
        backend_options={"service_time_ms": 1.0},
        workers=2,
        target_qps=400,
        target_latency_ms=50,
        min_duration_s=2.0,
        min_query_count=500,
        enable_trace=True,
    )
    assert s["validity"]["result"] == "VALID", s["validity"]
    ours, lg = s["harness"], s["loadgen"]
    assert ours["samples"] == lg["query_count"]
    assert abs(lg["throughput_per_s"] - 400) / 400 < 0.15  # Poisson arrivals around the target
    _agree(s, "throughput", 0.02)
    _agree_latency(s, "p50", 0.03, 0.25)
    # At the tail, LoadGen's issue thread waiting for a CPU or the GIL widens the gap on a
    # busy machine; the harness's p99 must still never exceed LoadGen's.
    assert s["harness"]["latency_ms"]["p99"] <= s["loadgen"]["latency_ms"]["p99"] * 1.01
    # LoadGen's gap, split from its trace: its issue thread running late is the machine's
    # (reported); the hand-over is the harness's. Two workers whose synthetic calls spin
    # their last 0.3 ms holding the GIL (backends/synthetic.py) can keep LoadGen's thread
    # from entering our callback for one such spin: the median sample's hand-over is allowed
    # that 0.3 ms plus the 0.2 ms the other tests allow. A harness that stalled LoadGen's
    # thread would show milliseconds.
    late, hand, measured = split_of(s)
    assert 0 <= hand["p50"] < 0.2 + 0.3, measured
    assert s["loadgen"]["effective_settings"]["target_qps"] == 400


def test_offline_batches_and_agrees_with_loadgen(run_harness):
    run_dir, s = run_harness(
        backend=SYN,
        scenario="Offline",
        backend_options={"per_sample_ms": 0.1},  # 10 k samples/s at any batch size
        max_batch=32,
        workers=1,  # one emulated device
        offline_expected_qps=10_000,
        min_duration_s=1.0,
    )
    assert s["validity"]["result"] == "VALID", s["validity"]
    ours = s["harness"]
    assert ours["samples"] == 11_000  # LoadGen issues 1.1 x expected_qps x min_duration
    assert ours["mean_batch_size"] > 31
    rec = read_records(run_dir).columns
    # No faster than the sleeps allow (0.1 ms a sample); no slower than the backend's calls
    # took as measured (a busy machine stretches a sleep: the machine's) plus the harness's
    # own time between calls and the query's hand-over, at most 10 % of it.
    _, first = np.unique(np.asarray(rec["batch_id"]), return_index=True)
    called_s = float((np.asarray(rec["complete_ns"])[first] - np.asarray(rec["dispatch_ns"])[first]).sum()) / 1e9
    calls_allow = ours["samples"] / called_s
    assert 0.9 * calls_allow <= s["loadgen"]["throughput_per_s"] < 10_100, (s["loadgen"]["throughput_per_s"], calls_allow)
    _agree(s, "throughput", 0.03)
    assert len(np.unique(rec["query_id"])) == 11_000


@pytest.mark.parametrize(("max_batch", "inline"), [(8, None), (4, True)], ids=["worker-thread", "inline-in-halves"])
def test_multistream_query_latency_agrees(run_harness, max_batch, inline):
    run_dir, s = run_harness(
        backend=SYN,
        scenario="MultiStream",
        backend_options={"service_time_ms": 2.0 * max_batch / 8},  # 2 ms per query either way
        multi_stream_samples_per_query=8,
        max_batch=max_batch,
        multi_stream_expected_latency_ms=2.0,
        min_duration_s=1.0,
        min_query_count=700,
        issue_inline=inline,
        enable_trace=True,
    )
    ours = s["harness"]
    assert s["sut"]["issue_inline"] is bool(inline)
    assert ours["samples"] == 8 * s["loadgen"]["query_count"]
    assert ours["mean_batch_size"] == pytest.approx(max_batch)
    assert s["validity"]["result"] == "VALID", s["validity"]
    _agree_latency(s, "p50", 0.03, 0.25, section="query_latency_ms")
    # The tail, query by query from LoadGen's trace: its latency is ours plus its lateness
    # and the hand-over (its stamps to our callback, our last completion to its own). On the
    # AVX2 CI machine one query in a hundred waited 0.7 ms more for the hand-over (p99
    # 3.44 ms against our 2.71), and a busy second core has made it 3-5 ms (a thread waiting
    # out the GIL's 5 ms switch interval): a fixed tolerance on p99 cannot hold. What holds
    # for every query holds for each percentile: LoadGen's lies above ours by no less than
    # the least gap and no more than the largest.
    late, hand, measured = split_of(s, section="query_latency_ms")
    assert 0 <= hand["p50"] < 0.25, measured  # ms: the harness's own share, for the median query


def test_accuracy_mode_scores_the_embedded_model_exactly(run_harness, embedded_model):
    import onnxruntime as ort

    from harness.data.embedded import digits_test_split

    run_dir, s = run_harness(
        backend="onnxruntime",
        model=str(embedded_model),
        dataset="digits",
        scenario="Offline",
        mode="AccuracyOnly",
        max_batch=16,
    )
    x, y = digits_test_split()
    truth = (ort.InferenceSession(str(embedded_model)).run(None, {"image": x})[0].argmax(1) == y).mean()
    acc = s["accuracy"]
    assert acc["metric"] == "top1"
    assert acc["scored_samples"] == len(y)
    assert acc["value"] == pytest.approx(truth)
    assert acc["value"] > 0.9
    assert json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    # Offline on ORT's CPU provider: one single-threaded worker per core by default.
    assert s["sut"]["workers"] == usable_cores() and s["sut"]["threads_per_worker"] == 1


def test_worker_shape_defaults_per_scenario_and_backend():
    from harness.child.main import resolve_workers

    cores = usable_cores()
    ort_offline = RunConfig(backend="onnxruntime", scenario="Offline")
    assert resolve_workers(ort_offline, host_cores_backend=True) == (cores, 1)
    # latency scenarios and device-like backends: one worker, every core for its calls
    assert resolve_workers(RunConfig(backend="onnxruntime", scenario="Server"), host_cores_backend=True) == (1, cores)
    assert resolve_workers(RunConfig(backend=SYN, scenario="Offline"), host_cores_backend=False) == (1, cores)
    # an explicit choice wins, and threads shrink so workers x threads <= cores
    assert resolve_workers(RunConfig(backend="onnxruntime", scenario="Offline", workers=1), True) == (1, cores)
    assert resolve_workers(RunConfig(backend="onnxruntime", scenario="Server", workers=cores), True) == (cores, 1)


def test_only_cpu_onnxruntime_scales_with_host_cores():
    from backends.onnxruntime import OnnxRuntimeBackend, OrtOptions
    from backends.synthetic import SyntheticBackend

    assert OnnxRuntimeBackend.scales_with_host_cores(OrtOptions())
    assert not OnnxRuntimeBackend.scales_with_host_cores(OrtOptions(providers=["CUDAExecutionProvider"]))
    assert not SyntheticBackend.scales_with_host_cores(SyntheticBackend.Options())


def test_performance_sample_count_limits_the_loaded_set(run_harness):
    run_dir, s = run_harness(
        backend=SYN,
        scenario="Offline",
        dataset="synthetic:n=512",
        performance_sample_count=64,
        backend_options={"per_sample_ms": 0.05},
        max_batch=16,
        offline_expected_qps=2000,
        min_duration_s=0.2,
    )
    rec = read_records(run_dir).columns
    assert len(np.unique(rec["sample_index"])) <= 64
    assert s["loadgen"]["effective_settings"]["performance_sample_count"] == 64
    assert s["dataset"]["count"] == 512

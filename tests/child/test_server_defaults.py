"""Server's defaults: a backlog is served in batches and issued in LoadGen's coalesced calls,
an idle system still serves one sample a call, and what was used is on record.

Ground truth is the synthetic backend's fixed service time per call: one sample a call
caps the rate at 1 / service time (an M/D/1 server), batching what is queued does not.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.config.run_config import SERVER_AUTO_BATCH, RunConfig
from harness.results import folder
from harness.results.loadgen_log import read_detail
from harness.results.records import read_records
from harness.run import runner
from tests.support.sleep_probe import SleepProbe

SERVICE_MS = 2.0  # per call, whatever its size: one sample a call serves at most 500/s


def _call_sizes(run_dir) -> np.ndarray:
    """Samples per backend call, from the records (one batch id a call)."""
    _, counts = np.unique(np.asarray(read_records(run_dir).columns["batch_id"]), return_counts=True)
    return counts


def test_a_backlog_is_batched_by_default_where_one_sample_a_call_saturates(run_harness):
    common = dict(backend="synthetic", scenario="Server", backend_options={"service_time_ms": SERVICE_MS},
                  target_qps=1500, target_latency_ms=50, min_duration_s=2.0, min_query_count=2000)
    run_dir, s = run_harness(**common)
    assert s["validity"]["result"] == "VALID", s["validity"]
    sizes = _call_sizes(run_dir)
    # 1500/s against 2 ms calls: three arrive during each call, so calls average well above one
    assert sizes.max() > 1 and sizes.max() <= SERVER_AUTO_BATCH
    assert sizes.sum() / len(sizes) > 2, f"mean batch {sizes.sum() / len(sizes):.2f}"
    assert s["sut"]["max_batch"] == SERVER_AUTO_BATCH
    assert read_detail(run_dir)[0]["requested_server_coalesce_queries"] is True
    assert folder.read_run_config(run_dir)["server_coalesce_queries"] is True  # run.yaml: the value used

    # The same arrivals one sample a call: 3x what an M/D/1 server of 2 ms can serve.
    run_dir, s = run_harness(**common, max_batch=1)
    assert s["validity"]["result"] == "INVALID"
    assert set(_call_sizes(run_dir)) == {1}
    fixes = " ".join(s["validity"]["fixes"])
    assert "unset max_batch" in fixes and "queued" in fixes, fixes


def test_an_idle_system_still_serves_one_sample_a_call(run_harness):
    # 50/s against 2 ms calls: another arrives during a call 1 - exp(-0.1) = 9.5 % of the time
    with SleepProbe() as probe:
        run_dir, s = run_harness(backend="synthetic", scenario="Server", backend_options={"service_time_ms": SERVICE_MS},
                                 target_qps=50, target_latency_ms=50, min_duration_s=1.0, min_query_count=200)
    # (too few queries for early stopping to make it VALID; the latency bound itself held)
    assert s["validity"]["perf_constraints_met"] is True, s["validity"]
    sizes = _call_sizes(run_dir)
    assert (sizes == 1).mean() > 0.8, f"{(sizes == 1).mean():.2f} of the calls served one sample"
    # no wait to fill a batch: a lone sample is served at once, in one call's time: 2 ms, plus
    # the harness's hand-off (a quarter of it), plus what a thread sleeping beside the run
    # saw its wake-ups late by over the same seconds (the machine's, as the sleep's overshoot is)
    woke = probe.lateness_ms()
    assert s["harness"]["latency_ms"]["p50"] < SERVICE_MS * 1.25 + woke["p50"], (s["harness"]["latency_ms"], woke)


def test_a_conf_file_or_the_run_decides_coalescing(tmp_path):
    server = RunConfig(backend="synthetic", scenario="Server")
    assert runner.resolve(server).server_coalesce_queries is True
    assert runner.resolve(server.model_copy(update={"server_coalesce_queries": False})).server_coalesce_queries is False
    assert runner.resolve(RunConfig(backend="synthetic", scenario="Offline")).server_coalesce_queries is None
    conf = tmp_path / "user.conf"
    conf.write_text("*.Server.coalesce_queries = 0\n")
    # the conf file's word stands: run.yaml leaves it unset and LoadGen reads the file
    assert runner.resolve(server.model_copy(update={"user_conf": str(conf)})).server_coalesce_queries is None
    conf.write_text("*.Offline.coalesce_queries = 0\n")  # another scenario's line does not decide Server's
    assert runner.resolve(server.model_copy(update={"user_conf": str(conf)})).server_coalesce_queries is True


@pytest.mark.parametrize("fixed", [False, True], ids=["dynamic-batch", "fixed-batch-1"])
def test_onnxruntime_batches_freely_only_with_a_dynamic_batch_dimension(embedded_model, tmp_path, fixed):
    import onnx

    from backends.base import LoadContext
    from backends.onnxruntime import OnnxRuntimeBackend, OrtOptions
    from harness.child.main import resolve_max_batch

    path = embedded_model
    if fixed:
        model = onnx.load(str(embedded_model))
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
        path = tmp_path / "batch1.onnx"
        onnx.save(model, str(path))
    backend = OnnxRuntimeBackend(OrtOptions())
    backend.load(LoadContext(str(path), 1, "Server"))
    try:
        assert backend.batches_freely() is (not fixed)
    finally:
        backend.close()
    server = RunConfig(backend="onnxruntime", scenario="Server")
    assert resolve_max_batch(server, not fixed) == (1 if fixed else SERVER_AUTO_BATCH)
    # an explicit max_batch, and the other scenarios, are untouched by the default
    assert resolve_max_batch(server.model_copy(update={"max_batch": 8}), True) == 8
    assert resolve_max_batch(RunConfig(backend="onnxruntime", scenario="Offline"), True) == 1

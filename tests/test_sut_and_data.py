"""SUT adapter batching, synthetic service-time distributions, and QSL datasets."""

from __future__ import annotations

import numpy as np
import pytest

from backends.base import TensorSpec
from harness.datasets import NpyFolder, SyntheticTensors, build_tensor_dataset
from harness.errors import DatasetError
from harness.records import read_records


def test_server_dynamic_batching_waits_at_most_the_timeout(run_harness):
    run_dir, s = run_harness(
        backend="synthetic", scenario="Server", target_qps=800, target_latency_ms=100,
        backend_options={"service_time_ms": 2.0}, max_batch=8, batch_timeout_ms=4.0,
        min_duration_s=1.0, min_query_count=300,
    )
    ours = s["harness"]
    assert ours["mean_batch_size"] > 1.5  # ~3 arrivals per 4 ms window at 800 QPS
    rec = read_records(run_dir).columns
    sizes = np.bincount(rec["batch_id"])
    assert sizes.max() <= 8
    # The worker fills a batch for at most batch_timeout_ms once it is free; the oldest
    # sample may also have waited out the previous batch's 2 ms service.
    first_wait = [
        (rec["dispatch_ns"][rec["batch_id"] == b] - rec["issue_ns"][rec["batch_id"] == b]).max()
        for b in np.unique(rec["batch_id"])
    ]
    assert np.median(first_wait) / 1e6 < 4.0 + 2.0 + 1.0


def test_batching_off_by_default_in_server(run_harness):
    _, s = run_harness(
        backend="synthetic", scenario="Server", target_qps=200, target_latency_ms=100,
        backend_options={"service_time_ms": 1.0}, max_batch=8,
        min_duration_s=0.5, min_query_count=100,
    )
    assert s["harness"]["mean_batch_size"] < 1.1  # idle worker takes each sample at once


def test_lognormal_service_time_has_the_configured_median(run_harness):
    _, s = run_harness(
        backend="synthetic", scenario="SingleStream",
        backend_options={"service_time_ms": 2.0, "distribution": "lognormal", "stddev_ms": 0.5},
        single_stream_expected_latency_ms=2.5, min_duration_s=1.0, min_query_count=300,
    )
    service = s["harness"]["service_ms"]
    assert service["p50"] == pytest.approx(2.0, rel=0.12)
    # sigma 0.5: p90/p50 = exp(1.2816 * 0.5) = 1.90
    assert service["p90"] / service["p50"] == pytest.approx(1.90, rel=0.15)


def test_synthetic_dataset_is_seeded_and_loads_and_frees():
    spec = [TensorSpec("x", (None, 3, 4), "float32"), TensorSpec("ids", (None, 5), "int64")]
    a, b, c = SyntheticTensors(spec, 16, seed=1), SyntheticTensors(spec, 16, seed=1), SyntheticTensors(spec, 16, seed=2)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    a.load(range(8))
    assert a.loaded_count == 8 and a.get(3)["x"].shape == (3, 4) and a.get(3)["ids"].dtype == np.int64
    one = a.batch_of_one(3)
    assert one["x"].shape == (1, 3, 4) and np.shares_memory(one["x"], a.get(3)["x"])
    assert a.batch_of_one(3) is one  # made once per load
    a.unload(range(8))
    assert a.loaded_count == 0
    with pytest.raises(KeyError):
        a.get(3)
    with pytest.raises(KeyError):  # the cached batch went with the sample
        a.batch_of_one(3)


def test_npy_folder_with_labels_scores_accuracy(run_harness, embedded_model, tmp_path):
    from harness.embedded import digits_test_split

    x, y = digits_test_split()
    data = tmp_path / "digits"
    data.mkdir()
    for i in range(64):
        np.save(data / f"{i:04d}.npy", x[i])
    np.save(data / "labels.npy", y[:64])
    ds = NpyFolder(data, "image")
    assert len(ds) == 64 and ds.labels is not None
    _, s = run_harness(backend="onnxruntime", model=str(embedded_model), dataset=str(data),
                       scenario="SingleStream", mode="AccuracyOnly")
    assert s["accuracy"]["scored_samples"] == 64
    assert s["accuracy"]["value"] > 0.85


def test_dataset_errors_name_the_problem(tmp_path):
    spec = [TensorSpec("image", (None, 1, 8, 8), "float32")]
    with pytest.raises(DatasetError, match="unknown dataset"):
        build_tensor_dataset("imagenet", spec, 0)
    with pytest.raises(DatasetError, match="unknown parameter"):
        build_tensor_dataset("synthetic:n=4,colour=red", spec, 0)
    np.save(tmp_path / "0.npy", np.zeros((1, 8, 8), dtype=np.float64))
    with pytest.raises(DatasetError, match="dtype float64"):
        build_tensor_dataset(str(tmp_path), spec, 0)

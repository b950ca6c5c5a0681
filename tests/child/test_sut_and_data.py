"""SUT adapter batching, synthetic service-time distributions, and QSL datasets."""

from __future__ import annotations

import numpy as np
import pytest

from backends.base import TensorSpec
from harness.data.datasets import NpyFolder, SyntheticTensors, build_tensor_dataset
from harness.errors import DatasetError
from harness.results.loadgen_log import read_detail
from harness.results.records import read_records


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


def test_server_takes_what_is_queued_with_loadgen_coalescing(run_harness):
    # Server's defaults, set explicitly: LoadGen coalesces overdue queries, the worker takes
    # whatever is queued (no wait). A 2 ms call lets ~10 samples queue at 5000 QPS.
    run_dir, s = run_harness(
        backend="synthetic", scenario="Server", target_qps=5000, target_latency_ms=100,
        backend_options={"service_time_ms": 2.0}, max_batch=64, server_coalesce_queries=True,
        min_duration_s=1.0, min_query_count=2000,
    )
    values, _, _ = read_detail(run_dir)
    assert values["requested_server_coalesce_queries"] is True
    rec = read_records(run_dir).columns
    # Every sample LoadGen issued (one per query in Server) is one row, once.
    assert s["harness"]["samples"] == len(np.unique(rec["query_id"])) == values["result_query_count"]
    ours = s["harness"]
    assert 4 < ours["mean_batch_size"] <= 64
    # One backend call, one dispatch and one end for all of its samples.
    for b in np.unique(rec["batch_id"])[:200]:
        mine = rec["batch_id"] == b
        assert len(set(rec["dispatch_ns"][mine])) == 1 and len(set(rec["complete_ns"][mine])) == 1
    assert (rec["dispatch_ns"] >= rec["issue_ns"]).all() and (rec["complete_ns"] - rec["dispatch_ns"] >= 2_000_000).all()


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


@pytest.mark.parallel
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


@pytest.mark.parallel
def test_loaded_samples_are_packed_and_batches_are_gathered_from_them():
    spec = [TensorSpec("x", (None, 3, 4), "float32"), TensorSpec("ids", (None, 5), "int64")]
    ds, fresh = SyntheticTensors(spec, 32, seed=3), SyntheticTensors(spec, 32, seed=3)

    def stacked(indices):
        samples = [fresh.materialize(i) for i in indices]
        return {k: np.stack([s[k] for s in samples]) for k in samples[0]}

    ds.load(range(0, 32, 2))
    batch = ds.batch([4, 0, 30, 4])  # any order, repeats allowed
    for k, want in stacked([4, 0, 30, 4]).items():
        assert batch[k].dtype == want.dtype and np.array_equal(batch[k], want)
    # The loaded samples are views of the packed arrays, so packing holds no second copy.
    assert ds.get(6)["x"].base is ds.get(8)["x"].base is not None
    assert np.array_equal(ds.batch_of_one(6)["x"][0], fresh.materialize(6)["x"])
    ds.unload([0, 2, 4])
    ds.load([1, 3])
    batch = ds.batch([3, 30, 1, 6])
    for k, want in stacked([3, 30, 1, 6]).items():
        assert np.array_equal(batch[k], want)
    with pytest.raises(KeyError):  # unloaded: LoadGen never issues it, so it is a bug
        ds.batch([0, 3])
    batch["x"][:] = 0  # a batch is a copy: the backend may keep or change it
    assert np.array_equal(ds.get(3)["x"], fresh.materialize(3)["x"])


class _Ragged(SyntheticTensors):
    """Samples whose lengths differ: fine one at a time, never batched."""

    def _make(self, index):
        return {"x": np.full(2 + index % 2, index, np.float32)}


@pytest.mark.parallel
def test_samples_of_different_shapes_stay_unpacked_and_batch_only_one_by_one():
    ds = _Ragged([TensorSpec("x", (None, None), "float32")], 4)
    ds.load(range(4))
    assert ds.batch_of_one(1)["x"].tolist() == [[1.0, 1.0, 1.0]]
    assert ds.batch([0, 2])["x"].tolist() == [[0.0, 0.0], [2.0, 2.0]]  # same shapes stack
    with pytest.raises(ValueError):  # as np.stack fails: loudly, never a silent pad
        ds.batch([0, 1])


@pytest.mark.parallel
def test_npy_folder_with_labels_scores_accuracy(run_harness, embedded_model, tmp_path):
    from harness.data.embedded import digits_test_split

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


@pytest.mark.parallel
def test_dataset_errors_name_the_problem(tmp_path):
    spec = [TensorSpec("image", (None, 1, 8, 8), "float32")]
    with pytest.raises(DatasetError, match="unknown dataset"):
        build_tensor_dataset("imagenet", spec, 0)
    with pytest.raises(DatasetError, match="unknown parameter"):
        build_tensor_dataset("synthetic:n=4,colour=red", spec, 0)
    np.save(tmp_path / "0.npy", np.zeros((1, 8, 8), dtype=np.float64))
    with pytest.raises(DatasetError, match="dtype float64"):
        build_tensor_dataset(str(tmp_path), spec, 0)

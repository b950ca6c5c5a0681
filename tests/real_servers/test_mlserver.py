"""The kserve-v2 protocol against a real KServe v2 server with metrics, MLServer 1.7.1
(tests/support/mlserver_server.py), beside the in-test one of tests/backends: the server's
own counters over the window must equal what the harness sent, and its per-request time
must fit inside the client's. And kserve-v2-grpc against the same server's gRPC port: its
predictions for the digits set equal the model's own (model.joblib, run by MLServer's
scikit-learn) and MLServer's over HTTP; an unknown model is one line at load."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from backends.base import LoadContext
from backends.http import HttpBackend, HttpOptions
from harness.config.run_config import RunConfig
from harness.data.embedded import digits_test_split
from harness.errors import BackendError
from harness.results.loadgen_log import read_accuracy_log
from harness.run import runner
from tests.support.calibrate import kserve_pilot, offered_rate
from tests.support.mlserver_server import MLServer, mlserver

PYTHON = os.environ.get("HARNESS_MLSERVER_PYTHON")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MLServer]:
    if not PYTHON:
        pytest.fail("HARNESS_MLSERVER_PYTHON is unset: run `make test` (it builds .mlserver-venv)")
    with mlserver(PYTHON, tmp_path_factory.mktemp("mlserver")) as srv:
        yield srv


# 50 calls are enough to compare counters; offered at most 50/s, and never above half the
# rate MLServer sustained in a pilot with 2 calls in flight (the harness's Server default
# keeps its calls to the cores), so the run measures the server, not its growing queue.
QUERIES = 50


def test_mlservers_counters_equal_what_the_harness_sent(server, tmp_path):
    base, metrics = server.base, server.metrics
    image = {"name": "image", "datatype": "FP32", "shape": [1, 1, 8, 8], "data": [0.5] * 64}
    pilot = kserve_pilot(base, "digits", [image], in_flight=2, requests=40)
    rate = min(50.0, offered_rate(pilot, 0.5, QUERIES, within_s=60))
    s = runner.run(RunConfig(
        backend="http", scenario="Server", dataset="digits", target_qps=rate, min_duration_s=2, min_query_count=QUERIES,
        backend_options={"protocol": "kserve-v2", "url": base, "model_name": "digits", "warmup_requests": 0},
        telemetry={"server": [metrics], "interval_s": 0.5},
    ), tmp_path).summary  # fmt: skip
    ours = s["harness"]
    assert ours["success_rate"] == 1.0 and ours["samples"] >= QUERIES, f"offered {rate:.1f}/s; {pilot.describe()}"
    assert s["backend"]["server"]["name"] == "digits"
    srv = s["telemetry"]["servers"][0]
    assert srv["server"] == "mlserver" and srv["gaps"] == 0
    m = srv["metrics"]
    assert m["requests_succeeded"]["delta"] == ours["samples"]
    assert m["requests_failed"]["delta"] == 0
    e2e = m["server_e2e"]  # a summary: its count and mean
    assert e2e["count"] == ours["samples"] and e2e["p50_s"] is None
    assert 0 < e2e["mean_s"] * 1e3 < ours["latency_ms"]["mean"]  # the server's time is inside the client's


def _predictions(run_dir: Path) -> np.ndarray:
    """The class each sample got, by sample index, from LoadGen's accuracy log (one INT64 each)."""
    entries = read_accuracy_log(run_dir)
    got = {int(e["qsl_idx"]): np.frombuffer(bytes.fromhex(e["data"]), dtype=np.int64) for e in entries}
    assert all(v.shape == (1,) for v in got.values())
    return np.array([got[i][0] for i in range(len(got))])


def test_grpc_predictions_equal_the_models_own_and_mlservers_over_http(server, run_harness, tmp_path):
    x, _ = digits_test_split()
    n = len(x)
    # truth the test made: the pickled pipeline's predict, in MLServer's own venv
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, joblib, numpy as np; m = joblib.load(sys.argv[1]); "
            "np.save(sys.argv[3], m.predict(np.load(sys.argv[2])).astype(np.int64))")
    subprocess.run([PYTHON, "-c", code, str(server.models / "digits" / "model.joblib"), str(tmp_path / "x.npy"),
                    str(tmp_path / "truth.npy")], check=True)
    truth = np.load(tmp_path / "truth.npy")
    runs, described = {}, {}
    for protocol, url in (("kserve-v2-grpc", server.grpc), ("kserve-v2", server.base)):
        run_dir, s = run_harness(backend="http", scenario="Offline", mode="AccuracyOnly", dataset="digits",
                                 backend_options={"protocol": protocol, "url": url, "model_name": "digits",
                                                  "max_in_flight": 4})
        assert s["harness"]["success_rate"] == 1.0 and s["harness"]["samples"] == n, protocol
        runs[protocol] = _predictions(run_dir)
        described[protocol] = {k: s["backend"][k] for k in ("server", "inputs", "outputs")}
    # the gRPC probe (ServerReady, ModelMetadata) read what the HTTP one did
    assert described["kserve-v2-grpc"] == described["kserve-v2"]
    assert described["kserve-v2-grpc"]["outputs"] == [{"name": "predict", "shape": [None], "dtype": "int64"}]
    assert len(truth) == n and np.array_equal(runs["kserve-v2-grpc"], truth)
    assert np.array_equal(runs["kserve-v2-grpc"], runs["kserve-v2"])


def test_an_unknown_model_over_grpc_is_one_line_at_load(server):
    backend = HttpBackend(HttpOptions(protocol="kserve-v2-grpc", url=server.grpc, model_name="nope"))
    with pytest.raises(BackendError) as e:
        backend.load(LoadContext(None, 1, "Offline"))
    msg = str(e.value)
    assert "\n" not in msg and f"server at {server.grpc} answered grpc_NOT_FOUND: Model nope" in msg, msg

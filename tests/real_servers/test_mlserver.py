"""The kserve-v2 protocol against a real KServe v2 server with metrics, MLServer 1.7.1
(tests/support/mlserver_server.py), beside the in-test one of tests/backends: the server's
own counters over the window must equal what the harness sent, and its per-request time
must fit inside the client's."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness.config.run_config import RunConfig
from harness.run import runner
from tests.support.calibrate import kserve_pilot, offered_rate
from tests.support.mlserver_server import mlserver

PYTHON = os.environ.get("HARNESS_MLSERVER_PYTHON")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    if not PYTHON:
        pytest.fail("HARNESS_MLSERVER_PYTHON is unset: run `make test` (it builds .mlserver-venv)")
    with mlserver(PYTHON, tmp_path_factory.mktemp("mlserver")) as urls:
        yield urls


# 50 calls are enough to compare counters; offered at most 50/s, and never above half the
# rate MLServer sustained in a pilot with 2 calls in flight (the harness's Server default
# keeps its calls to the cores), so the run measures the server, not its growing queue.
QUERIES = 50


def test_mlservers_counters_equal_what_the_harness_sent(server, tmp_path):
    base, metrics = server
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

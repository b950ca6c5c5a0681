"""`concurrency: N`: a closed loop of exactly N requests in flight, for HTTP and tensor
backends, with latencies from dispatch and the slot wait apart; and a concurrency sweep on
a server whose decode slows with the batch recovers that law."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.diagnosis import diagnose
from harness.config.run_config import RunConfig
from harness.errors import EXIT_USAGE
from harness.results.records import read_records
from harness.run.sweep import Axis, SweepSpec, new_sweep, run_sweep
from tests.support.http_servers import ServerThread, Timing, openai_app


def in_flight(run_dir: Path) -> np.ndarray:
    """How many requests were between dispatch and completion, at each dispatch."""
    cols = read_records(run_dir).columns
    start, end = cols["dispatch_ns"], cols["complete_ns"]
    return np.array([int(((start <= t) & (end > t)).sum()) for t in start])


@pytest.fixture
def server():
    # decode slows by 2 ms a token per open request: TPOT = 4 + 2 N in a closed loop of N
    timing = Timing(ttft_ms=10, tpot_ms=4, tpot_ms_per_in_flight=2, tokens=6)
    with ServerThread(openai_app(timing)) as srv:
        yield srv, timing


def test_a_concurrency_sweep_keeps_n_in_flight_and_recovers_the_servers_law(tmp_path: Path, server):
    srv, timing = server
    base = RunConfig(backend="http", scenario="Offline", dataset="synthetic:isl=16,osl=6,n=24",
                     backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                     min_duration_s=0, min_query_count=24)
    spec = SweepSpec("sweep", base, [Axis("concurrency", ("1", "2", "4"))])
    sweep_dir = new_sweep(spec, tmp_path)
    data = run_sweep(spec, sweep_dir)
    for p in data["points"]:
        n = int(p["values"]["concurrency"])
        assert p["status"] == "complete" and p["concurrency"] == n and p["latency_from"] == "dispatch"
        depth = in_flight(sweep_dir / p["run"])
        assert depth.max() == n  # never more than N open ...
        assert np.median(depth) == n  # ... and N open for most of the test: a closed loop
        # TPOT follows the server's law at N; latency counts from dispatch (the server's
        # time: TTFT + 5 gaps), not from LoadGen's single Offline issue
        tpot = p["metrics"]["tpot_p50"]
        law = timing.tpot_ms + timing.tpot_ms_per_in_flight * n
        assert abs(tpot - law) <= 0.1 * law, (n, tpot, law)
        server_ms = timing.ttft_ms + 5 * law
        assert server_ms * 0.95 <= p["metrics"]["latency_p50"] <= server_ms * 1.3, (n, p["metrics"])
        summary = json.loads((sweep_dir / p["run"] / "summary.json").read_text())
        assert p["metrics"]["latency_p50"] < summary["harness"]["latency_ms"]["p50"]  # the slot wait is apart
    # one slot for 24 requests: most of the time from issue is the wait for it
    assert data["points"][0]["queue_share"] > 0.8
    found = next(f for f in diagnose(data) if f["finding"].startswith("TPOT grows with concurrency"))
    assert abs(found["figures"]["b"] - timing.tpot_ms_per_in_flight) <= 0.1 * timing.tpot_ms_per_in_flight, found


def test_a_tensor_backend_runs_n_workers_of_one_request(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--backend", "synthetic", "--scenario", "Offline",
         "--set", "service_time_ms=5", "--set", "concurrency=3", "--set", "min_duration_s=0",
         "--set", "min_query_count=60", "--output-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["sut"]["workers"] == 3 and summary["sut"]["max_batch"] == 1
    (run_dir,) = tmp_path.iterdir()
    assert in_flight(run_dir).max() == 3
    # three 5 ms calls at a time: 600 samples/s, less the harness's own cost
    assert 0.8 * 600 < summary["harness"]["throughput_per_s"] <= 600 * 1.02


@pytest.mark.parametrize(("settings", "message"), [
    (["--scenario", "Server", "--set", "target_qps=10"], "use scenario Offline"),
    (["--scenario", "Offline", "--set", "max_batch=8"], "drop max_batch"),
    (["--scenario", "Offline", "--set", "workers=2"], "drop workers=2"),
])
def test_concurrency_that_cannot_hold_is_refused(tmp_path: Path, settings: list[str], message: str):
    out = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--backend", "synthetic", "--set", "concurrency=4", *settings,
         "--output-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == EXIT_USAGE and message in out.stderr, out.stderr
    assert not any(tmp_path.rglob("summary.json"))

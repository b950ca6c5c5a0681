"""`harness sweep`: a folder of ordinary runs, one per point; grids, zips, auto rates,
bad axes, a crashing point, and resume after the sweep was killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.errors import EXIT_USAGE, EXIT_INCOMPLETE

# A short Server run on the synthetic backend (2 ms a call): ~1.5 s a point.
SERVER = ["--backend", "synthetic", "--scenario", "Server", "--set", "service_time_ms=2", "--set", "target_latency_ms=50",
          "--set", "min_duration_s=0.5", "--set", "min_query_count=150", "--set", "target_latency_percentile=0.9"]


def harness(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=timeout)


def only_dir(root: Path) -> Path:
    (d,) = [p for p in root.iterdir() if p.is_dir()]
    return d


def test_a_grid_is_one_ordinary_run_per_point(tmp_path: Path):
    out = harness("sweep", *SERVER, "--vary", "target_qps=50,150", "--vary", "max_batch=1,4", "--output-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    sweep_dir = only_dir(tmp_path)
    data = json.loads((sweep_dir / "sweep.json").read_text())
    assert data["kind"] == "sweep" and data["state"] == "finished"
    assert [p["values"] for p in data["points"]] == [
        {"target_qps": "50", "max_batch": "1"}, {"target_qps": "50", "max_batch": "4"},
        {"target_qps": "150", "max_batch": "1"}, {"target_qps": "150", "max_batch": "4"},
    ]
    for p in data["points"]:
        run_dir = sweep_dir / p["run"]
        config = yaml.safe_load((run_dir / "run.yaml").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        # each point is a run of its own, with the point's values in its config and LoadGen's log
        assert config["target_qps"] == float(p["values"]["target_qps"])
        assert config["max_batch"] == int(p["values"]["max_batch"])
        assert summary["loadgen"]["effective_settings"]["target_qps"] == float(p["values"]["target_qps"])
        assert p["completed_per_s"] == summary["loadgen"]["throughput_per_s"]
        assert p["metrics"]["latency_p99"] == summary["loadgen"]["latency_ms"]["p99"]  # the official figure
    # the offered load follows the axis: three times the rate, about three times the throughput
    low, high = data["points"][0]["completed_per_s"], data["points"][2]["completed_per_s"]
    assert 2.4 < high / low < 3.6
    # and `harness check` takes a point like any run (0: VALID, 4: INVALID, never a crash)
    check = harness("check", str(sweep_dir / data["points"][0]["run"]))
    assert check.returncode in (0, 4), check.stdout + check.stderr
    # the plan needs nothing outside the folder
    plan = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())
    assert plan["axes"] == [{"name": "target_qps", "values": ["50", "150"]}, {"name": "max_batch", "values": ["1", "4"]}]
    assert plan["base"]["backend_options"]["service_time_ms"] == 2
    report = harness("report", str(sweep_dir))
    assert report.returncode == 0 and "target_qps" in report.stdout and "max_batch" in report.stdout


@pytest.mark.parallel
def test_zip_pairs_the_axes_and_needs_equal_lengths(tmp_path: Path):
    out = harness("sweep", *SERVER, "--vary", "target_qps=50,100", "--vary", "max_batch=1,2", "--zip",
                  "--output-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    data = json.loads((only_dir(tmp_path) / "sweep.json").read_text())
    assert [p["values"] for p in data["points"]] == [{"target_qps": "50", "max_batch": "1"},
                                                    {"target_qps": "100", "max_batch": "2"}]
    bad = harness("sweep", *SERVER, "--vary", "target_qps=50,100", "--vary", "max_batch=1", "--zip",
                  "--output-dir", str(tmp_path / "bad"))
    assert bad.returncode == EXIT_USAGE and "--zip" in bad.stderr


@pytest.mark.parallel
def test_a_bad_axis_costs_no_run(tmp_path: Path):
    unknown = harness("sweep", *SERVER, "--vary", "target_qsp=50,100", "--output-dir", str(tmp_path))
    assert unknown.returncode == EXIT_USAGE
    assert "target_qsp" in unknown.stderr and "did you mean 'target_qps'" in unknown.stderr
    invalid = harness("sweep", *SERVER, "--vary", "target_qps=50,-5", "--output-dir", str(tmp_path))
    assert invalid.returncode == EXIT_USAGE
    assert "point 1 (target_qps=-5)" in invalid.stderr and "greater than 0" in invalid.stderr
    tensor_isl = harness("sweep", *SERVER, "--vary", "isl=16,32", "--output-dir", str(tmp_path))
    assert tensor_isl.returncode == EXIT_USAGE and "prompt sets" in tensor_isl.stderr
    assert not any(tmp_path.rglob("summary.json"))  # every check came before the first run


@pytest.mark.parallel
def test_a_crashing_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path, embedded_model: Path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    out = harness("sweep", "--backend", "onnxruntime", "--dataset", "digits", "--scenario", "Offline",
                  "--set", "min_duration_s=0", "--set", "min_query_count=64",
                  "--vary", f"model={broken},{embedded_model}", "--output-dir", str(tmp_path / "r"))
    assert out.returncode == EXIT_INCOMPLETE, out.stderr
    data = json.loads((only_dir(tmp_path / "r") / "sweep.json").read_text())
    crashed, fine = data["points"]
    assert crashed["status"] == "crashed" and "broken.onnx" in crashed["error"]
    assert fine["status"] == "complete" and fine["metrics"]["throughput"] > 0
    report = harness("report", str(only_dir(tmp_path / "r")))
    assert "crashed" in report.stdout


def test_resume_runs_only_the_points_a_killed_sweep_did_not_finish(tmp_path: Path):
    args = [sys.executable, "-m", "harness", "sweep", *SERVER, "--vary", "target_qps=40,60,80", "--output-dir", str(tmp_path)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    sweep_json = None
    while time.monotonic() < deadline:
        found = list(tmp_path.glob("*/sweep.json"))
        if found and len(json.loads(found[0].read_text())["points"]) >= 1:
            sweep_json = found[0]
            break
        time.sleep(0.05)
    assert sweep_json is not None, "the first point never finished"
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its running point, at once
    proc.wait(10)
    before = json.loads(sweep_json.read_text())
    finished = {p["index"]: p["run"] for p in before["points"]}
    assert 1 <= len(finished) < 3 and before["state"] == "running"

    out = harness("sweep", "--resume", str(sweep_json.parent))
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("point ") == 3 - len(finished)  # only the missing points ran
    after = json.loads(sweep_json.read_text())
    assert after["state"] == "finished"
    assert [p["values"]["target_qps"] for p in after["points"]] == ["40", "60", "80"]
    for index, run in finished.items():
        assert after["points"][index]["run"] == run  # a finished point is kept, not run again
    refused = harness("sweep", "--resume", str(sweep_json.parent), "--vary", "target_qps=1")
    assert refused.returncode == EXIT_USAGE and "drop --vary" in refused.stderr


def test_auto_rates_walk_up_from_an_offline_pilot_to_saturation(tmp_path: Path):
    out = harness("sweep", *SERVER, "--vary", "target_qps=auto", "--output-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    data = json.loads((only_dir(tmp_path) / "sweep.json").read_text())
    pilot, *points = data["points"]
    assert pilot["role"] == "pilot" and pilot["scenario"] == "Offline"
    peak = pilot["completed_per_s"]
    assert 0.8 / 0.002 < peak < 1.05 / 0.002  # one worker, 2 ms a call
    rates = [float(p["values"]["target_qps"]) for p in points]
    assert rates == sorted(rates) and abs(rates[0] - 0.1 * peak) < 0.01 * peak
    from harness.analysis.points import saturated, verdict

    # the walk ends at the first point that is saturated or breaks its bound, and not before
    assert all(verdict(p)[0] and not saturated(p) for p in points[:-1])
    last = points[-1]
    assert (not verdict(last)[0]) or saturated(last) or len(points) == 7

"""--repeat: N real runs in N processes, and an aggregate that matches the runs' own figures."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis.check import check_path
from harness.analysis.compare import stats
from harness.config.run_config import RunConfig
from harness.errors import ConfigError
from harness.results.folder import AGGREGATE as AGGREGATE_FILE
from harness.results.records import read_records, write_records
from harness.run.repeat import run_repeated

# 1 ms per sample in batches of 16: at most 1000 samples/s; sleeping keeps the noise low.
CONFIG = RunConfig(backend="synthetic", scenario="Offline", max_batch=16, min_duration_s=0.4,
                   offline_expected_qps=1200, backend_options={"per_sample_ms": 1.0})


def test_repeat_aggregates_each_runs_figures(tmp_path: Path):
    outcome = run_repeated(CONFIG, tmp_path, 3)
    data = json.loads((outcome.repeat_dir / AGGREGATE_FILE).read_text())
    assert data["n"] == 3 and len(data["runs"]) == 3
    assert outcome.repeat_dir.name.endswith("-run-Offline-repeat")
    assert [outcome.repeat_dir / n for n in data["runs"]] == [o.run_dir for o in outcome.outcomes]
    throughputs = []
    for name in data["runs"]:
        summary = json.loads((outcome.repeat_dir / name / "summary.json").read_text())
        throughputs.append(summary["loadgen"]["throughput_per_s"])  # the official figure: LoadGen's
    t = data["metrics"]["throughput"]
    assert t["values"] == throughputs
    assert t["median"] == statistics.median(throughputs)
    assert t["min"] == min(throughputs) and t["max"] == max(throughputs)
    assert t["ci95"][0] <= t["mean"] <= t["ci95"][1]
    assert 700 < t["median"] <= 1000 * 1.01
    assert data["metrics"]["success_rate"]["median"] == 100.0
    # `harness check` on the repeat folder checks every run; one edited record taints it.
    assert [r.exit_code for r in check_path(outcome.repeat_dir, rebuild_dataset=False)] == [0, 0, 0]
    run_dir = outcome.outcomes[1].run_dir
    cols = {c: v.copy() for c, v in read_records(run_dir).columns.items()}
    cols["status"][0] = "error"
    write_records(run_dir, cols)
    assert [r.exit_code for r in check_path(outcome.repeat_dir, rebuild_dataset=False)] == [0, 6, 0]


@pytest.mark.parallel
def test_stats_on_known_numbers():
    s = stats([1.0, 2.0, 3.0, 4.0])
    assert s["median"] == 2.5 and s["mean"] == 2.5 and s["min"] == 1.0 and s["max"] == 4.0
    assert s["stdev"] == pytest.approx(1.290994, rel=1e-6)
    half = 3.182 * 1.290994 / 2  # t(0.975, df=3) x sd / sqrt(n)
    assert s["ci95"] == pytest.approx([2.5 - half, 2.5 + half], rel=1e-5)
    assert s["relative_spread"] == pytest.approx(3 / 2.5)
    assert stats([7.0])["ci95"] is None


@pytest.mark.parallel
def test_repeat_needs_two_runs(tmp_path: Path):
    with pytest.raises(ConfigError, match="--repeat 1"):
        run_repeated(CONFIG, tmp_path, 1)


@pytest.mark.parallel
def test_cli_repeat_writes_the_aggregate(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--backend", "synthetic", "--scenario", "Offline",
         "--set", "per_sample_ms=0.2", "--set", "max_batch=16", "--set", "offline_expected_qps=7000",
         "--set", "min_duration_s=0.3", "--repeat", "2", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (repeat_dir,) = tmp_path.iterdir()
    data = json.loads((repeat_dir / AGGREGATE_FILE).read_text())
    assert data["n"] == 2 and data["status"] == ["complete", "complete"]
    assert "2 runs, each in its own process" in out.stdout

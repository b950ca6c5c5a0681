"""Results folders are self-describing and re-runnable; MLPerf conf files go through LoadGen."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from harness.config.run_config import RunConfig
from harness.data.hashing import sha256_file

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)


def test_results_folder_holds_what_reproduces_the_run(run_harness, embedded_model):
    run_dir, s = run_harness(
        backend="onnxruntime", model=str(embedded_model), dataset="digits", scenario="Offline",
        max_batch=32, offline_expected_qps=5000, min_duration_s=0.3,
    )
    for name in ("run.yaml", "system.json", "manifest.json", "summary.json", "records.parquet",
                 "mlperf_log_detail.txt", "mlperf_log_summary.txt", "child.json"):
        assert (run_dir / name).exists(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["sha256"]["model"] == sha256_file(embedded_model)
    assert manifest["sha256"]["run.yaml"] == sha256_file(run_dir / "run.yaml")
    system = json.loads((run_dir / "system.json").read_text())
    assert system["cpu_cores"] >= 1 and "mlcommons-loadgen" in system["packages"]
    backend = s["backend"]
    assert backend["providers_used"] == ["CPUExecutionProvider"]
    assert backend["engine_version"]
    assert len(s["dataset"]["sha256"]) == 64
    # run.yaml is the resolved config: loading it gives the same RunConfig back.
    again = RunConfig(**yaml.safe_load((run_dir / "run.yaml").read_text()))
    assert again.model == str(embedded_model) and again.max_batch == 32


def test_rerun_from_run_yaml_gives_the_same_config(tmp_path):
    root = tmp_path / "r"
    first = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--backend", "synthetic", "--scenario", "Offline",
         "--set", "per_sample_ms=0.05", "--set", "max_batch=8", "--set", "offline_expected_qps=5000",
         "--set", "min_duration_s=0.2", "--output-dir", str(root)],
        capture_output=True, text=True, timeout=120,
    )
    assert first.returncode == 0, first.stderr
    (run1,) = root.iterdir()
    second = subprocess.run(
        [sys.executable, "-m", "harness", "run", "-c", str(run1 / "run.yaml"), "--output-dir", str(root)],
        capture_output=True, text=True, timeout=120,
    )
    assert second.returncode == 0, second.stderr
    run2 = next(p for p in root.iterdir() if p != run1)
    assert (run1 / "run.yaml").read_text() == (run2 / "run.yaml").read_text()
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (run1, run2))
    assert s1["dataset"]["sha256"] == s2["dataset"]["sha256"]
    assert s1["harness"]["samples"] == s2["harness"]["samples"]


def test_user_conf_is_loaded_by_loadgen_itself(run_harness, tmp_path):
    conf = tmp_path / "user.conf"
    conf.write_text("*.Offline.min_duration = 700\n*.Offline.target_qps = 4321\n")
    run_dir, s = run_harness(
        backend="synthetic", scenario="Offline", user_conf=str(conf), benchmark="resnet50",
        backend_options={"per_sample_ms": 0.01}, max_batch=64,
    )
    eff = s["loadgen"]["effective_settings"]
    assert eff["min_duration_ms"] == 700
    assert eff["target_qps"] == 4321
    assert (run_dir / "loaded.conf").read_text().strip().endswith("4321")


def test_explicit_settings_override_conf_files(run_harness, tmp_path):
    conf = tmp_path / "user.conf"
    conf.write_text("*.Offline.min_duration = 700\n")
    _, s = run_harness(
        backend="synthetic", scenario="Offline", user_conf=str(conf), min_duration_s=0.3,
        offline_expected_qps=2000, backend_options={"per_sample_ms": 0.01}, max_batch=64,
    )
    assert s["loadgen"]["effective_settings"]["min_duration_ms"] == 300



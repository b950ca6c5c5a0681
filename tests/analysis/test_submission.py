"""harness submission: the MLPerf layout with the required system fields, and the rules a
short test run breaks, listed instead of written (or written only when forced, and marked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.analysis.submission import REQUIRED_SYSTEM_FIELDS, SubmissionRefused, official_settings, write_submission
from harness.config.run_config import RunConfig
from harness.data.hashing import sha256_file
from harness.errors import ConfigError
from harness.run import runner

USER_SYSTEM = {
    "system_name": "Test box (2 cores)",
    "system_type": "edge",
    "status": "available",
    "host_processors_per_node": 1,
    "host_storage_capacity": "64 GB",
    "host_storage_type": "SSD",
}


@pytest.fixture(scope="module")
def official() -> dict[str, int]:
    return official_settings("resnet50", "Offline")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, official: dict[str, int]) -> dict[str, Path]:
    from harness.data.embedded import default_model

    root = tmp_path_factory.mktemp("sub")
    common = dict(backend="onnxruntime", model=str(default_model()), dataset="digits", scenario="Offline",
                  benchmark="resnet50", max_batch=32,
                  # the official seeds, so the only rules broken are the ones a short run must break
                  **{k: official[k] for k in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")})
    perf = runner.run(RunConfig(**common, offline_expected_qps=30_000, min_duration_s=0.3), root).run_dir
    acc = runner.run(RunConfig(**common, mode="AccuracyOnly"), root).run_dir
    return {"perf": perf, "acc": acc}


@pytest.fixture
def system_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "system.yaml"
    path.write_text(yaml.safe_dump(USER_SYSTEM))
    return path


def test_official_values_come_from_loadgen(official):
    assert official["min_duration_ms"] == 600_000
    assert official["qsl_rng_seed"] != 0 and official["schedule_rng_seed"] != 0


def test_short_run_is_refused_with_each_broken_rule(runs, system_yaml, tmp_path, official):
    with pytest.raises(SubmissionRefused) as e:
        write_submission([runs["perf"], runs["acc"]], "Acme", "open", system_yaml, tmp_path / "out")
    msg = str(e.value)
    assert e.value.exit_code == 1
    assert "min duration 0.3 s is under the official 600 s" in msg
    assert f"under the official {official['min_query_count']}" in msg
    assert "rng_seed" not in msg  # the seeds were the official ones
    assert not (tmp_path / "out").exists()


def test_missing_accuracy_run_and_wrong_seeds_are_named(runs, system_yaml, tmp_path, official):
    seeded = runner.run(RunConfig(backend="synthetic", scenario="Offline", benchmark="resnet50", min_duration_s=0.2,
                                  offline_expected_qps=40_000, qsl_rng_seed=1), tmp_path / "r").run_dir
    with pytest.raises(SubmissionRefused) as e:
        write_submission([seeded], "Acme", "open", system_yaml, tmp_path / "out")
    msg = str(e.value)
    assert "resnet50/Offline: no AccuracyOnly run" in msg
    assert f"qsl_rng_seed 1 is not the official {official['qsl_rng_seed']}" in msg
    assert "schedule_rng_seed 0 is not the official" in msg


def test_forced_folder_has_the_layout_and_is_marked(runs, system_yaml, tmp_path):
    out = tmp_path / "out"
    result = write_submission([runs["perf"], runs["acc"]], "Acme Corp", "open", system_yaml, out, force=True)
    root = out / "open" / "Acme_Corp"
    assert result.root == root and result.broken
    scen = root / "results" / "Test_box_2_cores" / "resnet50" / "Offline"
    for rel in ("performance/run_1/mlperf_log_summary.txt", "performance/run_1/mlperf_log_detail.txt",
                "accuracy/mlperf_log_summary.txt", "accuracy/mlperf_log_detail.txt", "accuracy/mlperf_log_accuracy.json",
                "accuracy/accuracy.txt", "measurements.json", "user.conf", "README.md"):
        assert (scen / rel).is_file(), rel
    assert (root / "NOT_FOR_SUBMISSION.txt").read_text().startswith("NOT A VALID SUBMISSION")
    assert "NOT A VALID SUBMISSION" in (scen / "README.md").read_text()

    desc = json.loads((root / "systems" / "Test_box_2_cores.json").read_text())
    system = json.loads((runs["perf"] / "system.json").read_text())
    for key in REQUIRED_SYSTEM_FIELDS:
        assert desc[key] not in (None, ""), key
    assert desc["division"] == "open" and desc["submitter"] == "Acme Corp" and desc["system_type"] == "edge"
    assert desc["host_processor_core_count"] == system["cpu_cores"]
    assert desc["host_processor_model_name"] == system["cpu_model"]
    assert desc["accelerators_per_node"] == len(system["accelerators"])
    assert desc["framework"].startswith("onnxruntime")
    assert desc["harness_rules_broken"] == result.broken

    summary = json.loads((runs["acc"] / "summary.json").read_text())
    acc = summary["accuracy"]
    text = (scen / "accuracy" / "accuracy.txt").read_text().splitlines()
    assert text[0] == f"top1={acc['value'] * 100:.3f}%, good={acc['correct']}, total={acc['scored_samples']}"
    assert text[1] == f"hash={sha256_file(runs['acc'] / 'mlperf_log_accuracy.json')}"
    assert acc["scored_samples"] == 449 and acc["value"] > 0.9
    conf = (scen / "user.conf").read_text()
    assert "resnet50.Offline.target_qps = 30000" in conf and "resnet50.Offline.min_duration = 300" in conf
    measurements = json.loads((scen / "measurements.json").read_text())
    assert measurements["harness"]["model_sha256"] == sha256_file(Path(summary["run"]["model"]))


def test_system_description_must_be_complete(runs, tmp_path):
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump({"system_name": "x", "system_type": "edge", "status": "available"}))
    with pytest.raises(ConfigError, match="lacks host_processors_per_node, host_storage_capacity, host_storage_type"):
        write_submission([runs["perf"], runs["acc"]], "Acme", "open", partial, tmp_path / "out", force=True)


def test_cli_refuses_with_exit_1(runs, system_yaml, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "harness", "submission", "--org", "Acme", "--division", "open", "--system-desc",
         str(system_yaml), str(runs["perf"]), str(runs["acc"]), "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 1 and "rule(s) broken" in out.stderr


def test_a_results_glob_skips_what_is_not_a_run_and_lists_rules_one_per_line(runs, system_yaml, tmp_path):
    """#16 item 13: `harness submission ... results/*` met results/README.md and stopped;
    with `results/*/` it printed every broken rule on one line."""
    root = runs["perf"].parent
    (root / "README.md").write_text("notes about these runs\n")
    (root / "not-a-run").mkdir(exist_ok=True)
    out = subprocess.run(
        [sys.executable, "-m", "harness", "submission", "--org", "Acme", "--division", "open", "--system-desc",
         str(system_yaml), *sorted(str(p) for p in root.iterdir()), "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 1, out.stderr  # the runs' own rules, as before: not the README
    assert "README.md" not in out.stderr.split("rule(s) broken")[1]
    rules = [line for line in out.stderr.splitlines() if line.startswith("  - ")]
    assert rules and len(rules) == int(out.stderr.split(" MLPerf rule(s)")[0].split()[-1])
    assert all(len(r) < 400 for r in rules)
    from harness.analysis.submission import _runs_only

    result_dirs, skipped = _runs_only([root / "README.md", root / "not-a-run", runs["perf"]])
    assert result_dirs == [runs["perf"]]
    assert skipped == ["README.md: not a folder", "not-a-run: not a results folder (no run.yaml)"]

"""harness check: an intact folder passes; an edited record, a missing log, an edited config,
a cut records file, a changed dataset and an INVALID run each get their own exit code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis.check import EXIT_INCOMPLETE, EXIT_INVALID, EXIT_TAMPERED, EXIT_VALID, check_run
from harness.config.run_config import RunConfig
from harness.data.hashing import sha256_file
from harness.results.loadgen_log import read_detail
from harness.results.records import COLUMNS, read_records, write_records
from harness.run import runner
from tests.support.legacy_records import to_legacy_csv

OFFLINE = dict(backend="synthetic", scenario="Offline", max_batch=16, min_duration_s=0.3,
               backend_options={"per_sample_ms": 0.05})


@pytest.fixture(scope="module")
def valid_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Expected QPS far above the real rate: the query outlasts min_duration, so VALID.
    outcome = runner.run(RunConfig(**OFFLINE, offline_expected_qps=40_000), tmp_path_factory.mktemp("check"))
    assert outcome.summary["validity"]["result"] == "VALID"
    return outcome.run_dir


@pytest.fixture
def copy(valid_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(valid_run, tmp_path / valid_run.name))


def _kinds(result) -> dict[str, str]:
    return {f.what: f.kind for f in result.findings}


@pytest.mark.parallel
def test_intact_folder_is_valid_and_records_match_loadgen(valid_run: Path):
    result = check_run(valid_run)
    assert result.exit_code == EXIT_VALID and result.verdict == "valid"
    lg, _, _ = read_detail(valid_run)
    issued = lg["result_query_count"] * lg["effective_samples_per_query"]
    assert lg["result_query_count"] == 1 and issued == 1.1 * 40_000 * 0.3
    assert len(read_records(valid_run)) == issued
    kinds = _kinds(result)
    for what in ("run.yaml", "records.parquet", "summary.json", "records", "dataset", "re-runnable"):
        assert kinds[what] == "ok", what
    manifest = json.loads((valid_run / "manifest.json").read_text())
    assert manifest["sha256"]["records.parquet"] == sha256_file(valid_run / "records.parquet")


def _columns(run_dir: Path) -> dict:
    cols = read_records(run_dir).columns
    return {c: cols[c].copy() for c in COLUMNS}


@pytest.mark.parallel
def test_one_changed_record_is_tampering(copy: Path):
    cols = _columns(copy)
    cols["complete_ns"][5] -= 1000  # complete_ns 1 µs earlier: a flattering edit
    write_records(copy, cols)
    result = check_run(copy, rebuild_dataset=False)
    assert result.exit_code == EXIT_TAMPERED
    assert _kinds(result)["records.parquet"] == "tampered"


@pytest.mark.parallel
def test_a_folder_from_before_parquet_checks_its_records_csv(copy: Path):
    """Folders written before records.parquet hold records.csv, hashed under that name."""
    before = _columns(copy)
    to_legacy_csv(copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["sha256"]["records.parquet"]
    manifest["sha256"]["records.csv"] = sha256_file(copy / "records.csv")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    result = check_run(copy, rebuild_dataset=False)
    assert result.exit_code == EXIT_VALID, result.findings
    kinds = _kinds(result)
    assert kinds["records.csv"] == "ok" and kinds["records"] == "ok" and "records.parquet" not in kinds
    legacy = read_records(copy).columns  # the same values, read back from the CSV
    for c in COLUMNS:
        assert list(legacy[c]) == list(before[c]), c


@pytest.mark.parallel
def test_missing_loadgen_log_is_incomplete(copy: Path):
    (copy / "mlperf_log_detail.txt").unlink()
    result = check_run(copy, rebuild_dataset=False)
    assert result.exit_code == EXIT_INCOMPLETE
    assert _kinds(result)["mlperf_log_detail.txt"] == "incomplete"


@pytest.mark.parallel
def test_edited_config_is_tampering(copy: Path):
    text = (copy / "run.yaml").read_text()
    (copy / "run.yaml").write_text(text.replace("max_batch: 16", "max_batch: 32"))
    result = check_run(copy, rebuild_dataset=False)
    assert result.exit_code == EXIT_TAMPERED and _kinds(result)["run.yaml"] == "tampered"


@pytest.mark.parallel
def test_records_cut_short_are_counted(copy: Path):
    write_records(copy, {c: v[:-10] for c, v in _columns(copy).items()})
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["sha256"]["records.parquet"] = sha256_file(copy / "records.parquet")  # a consistent but short folder
    (copy / "manifest.json").write_text(json.dumps(manifest))
    result = check_run(copy, rebuild_dataset=False)
    assert result.exit_code == EXIT_INCOMPLETE
    detail = next(f.detail for f in result.findings if f.what == "records")
    assert detail == "13190 records for the 13200 samples LoadGen issued"


@pytest.mark.parallel
def test_dataset_is_rebuilt_and_hashed(copy: Path):
    summary = json.loads((copy / "summary.json").read_text())
    summary["dataset"]["sha256"] = "0" * 64
    (copy / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["sha256"]["summary.json"] = sha256_file(copy / "summary.json")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    result = check_run(copy)
    assert result.exit_code == EXIT_TAMPERED and _kinds(result)["dataset"] == "tampered"


def test_invalid_run_and_cli_exit_codes(valid_run: Path, tmp_path: Path):
    # Expected QPS far below the real rate: the query runs out before min_duration.
    invalid = runner.run(RunConfig(**OFFLINE, offline_expected_qps=2_000), tmp_path / "r").run_dir
    assert check_run(invalid).exit_code == EXIT_INVALID
    codes = {}
    for name, path in (("valid", valid_run), ("invalid", invalid), ("not a folder", tmp_path / "nope")):
        out = subprocess.run([sys.executable, "-m", "harness", "check", str(path), "--json", "--no-dataset"],
                             capture_output=True, text=True, timeout=60)
        codes[name] = out.returncode
    assert codes == {"valid": 0, "invalid": 4, "not a folder": 2}


@pytest.mark.parallel
def test_prompt_file_is_reread_and_hashed(tmp_path: Path):
    """A generative run's .jsonl prompts are hashed again by check: an edited file is caught."""
    from tests.support.http_servers import ServerThread, Timing, openai_app

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"count to {i}", "max_tokens": 4}) + "\n" for i in range(8)))
    with ServerThread(openai_app(Timing(tokens=4))) as srv:
        run = runner.run(
            RunConfig(backend="http", scenario="Offline", dataset=str(prompts), min_duration_s=0.2,
                      backend_options={"protocol": "openai-completions", "url": srv.url + "/v1"}),
            tmp_path / "results",
        ).run_dir
    assert _kinds(check_run(run))["dataset"] == "ok"
    prompts.write_text(prompts.read_text().replace("count to 3", "count to 33"))
    result = check_run(run)
    assert result.exit_code == EXIT_TAMPERED and _kinds(result)["dataset"] == "tampered"


@pytest.mark.parallel
def test_a_generated_prompt_set_is_named_as_not_rebuilt(tmp_path: Path):
    """Synthetic prompts are counted in the tokenizer of the model under test, which a check
    does not load: the note says so, naming the backend, and the run stays VALID."""
    from tests.support.http_servers import ServerThread, Timing, openai_app

    with ServerThread(openai_app(Timing(tokens=4))) as srv:
        run = runner.run(
            RunConfig(backend="http", scenario="Offline", dataset="synthetic:isl=8,osl=4,n=8", min_duration_s=0,
                      min_query_count=8, backend_options={"protocol": "openai-completions", "url": srv.url + "/v1"}),
            tmp_path,
        ).run_dir
    result = check_run(run)
    (finding,) = [f for f in result.findings if f.what == "dataset"]
    assert (finding.kind, finding.detail) == (
        "note", "the http backend's generated prompt set is not rebuilt (it needs the model's tokenizer); "
        "sha256 not verified"), finding
    assert result.exit_code == EXIT_VALID


@pytest.mark.parallel
@pytest.mark.parametrize("scenario", ["Offline", "MultiStream", "SingleStream"])
def test_an_accuracy_run_over_several_loadable_sets_is_complete(scenario: str, tmp_path: Path):
    """A dataset larger than the performance sample count is issued in several loadable
    sets, each logged with its own generated query count (and, Offline, its own query size):
    all of them count. Only the last was read: "50000 records for the 848 samples"."""
    run_dir = runner.run(RunConfig(backend="synthetic", scenario=scenario, mode="AccuracyOnly",
                                   dataset="synthetic:n=2600", performance_sample_count=1024), tmp_path).run_dir
    lg, _, _ = read_detail(run_dir)
    assert len(lg["generated_query_counts"]) == 3  # sets of 1024, 1024, 552
    result = check_run(run_dir)
    assert result.exit_code == EXIT_VALID, [f.__dict__ for f in result.problems()]
    assert len(read_records(run_dir)) == 2600

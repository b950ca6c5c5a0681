"""summary.json follows docs/summary.schema.json; bad folders get messages naming what is missing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from harness.analysis.run_data import load_run
from harness.config.run_config import RunConfig
from harness.errors import OutputError
from harness.report import write_report
from harness.results import metrics
from harness.results.summary import SCHEMA_VERSION
from harness.run import runner
from tests.support.report_runs import SCHEMA, http_token_run, server_run_with_failures, token_run

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("schema")
    server = server_run_with_failures(root)
    common = dict(backend="synthetic", backend_options={"service_time_ms": 0.5}, min_duration_s=0.3)
    offline = runner.run(RunConfig(**common, scenario="Offline", offline_expected_qps=2000, max_batch=8), root).run_dir
    multi = runner.run(
        RunConfig(**common, scenario="MultiStream", multi_stream_samples_per_query=4, min_query_count=100), root
    ).run_dir
    accuracy = runner.run(RunConfig(**common, scenario="Offline", mode="AccuracyOnly", dataset="synthetic:n=64"), root).run_dir
    return {"server": server, "offline": offline, "multistream": multi, "accuracy": accuracy,
            "tokens": token_run(server, root / "tokens"), "http": http_token_run(root)}


def test_schema_version_matches_the_code(validator):
    assert validator.schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION


@pytest.mark.parametrize("kind", ["server", "offline", "multistream", "accuracy", "tokens", "http"])
def test_real_summaries_validate(validator, runs, kind):
    summary = json.loads((runs[kind] / "summary.json").read_text())
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(summary)]
    assert errors == []
    if kind == "server":
        assert summary["harness"]["failed"] == summary["harness"]["samples"] // 25
    if kind in ("tokens", "http"):
        assert summary["tokens"]["ttft_ms"]["p50"] > 0
    else:
        assert summary.get("tokens") is None


@pytest.mark.parametrize("kind", ["server", "offline", "multistream", "tokens", "http"])
def test_on_loadgens_schedule_loadgens_figures_stay_the_headline(runs, kind):
    summary = json.loads((runs[kind] / "summary.json").read_text())
    assert summary["schedule"] == {"owner": "loadgen", "kind": None, "timed_from": "issue"}
    assert metrics.from_summary(summary) == metrics.from_summary(summary, "loadgen")
    if kind == "server":  # LoadGen's own latency, not the harness's from dispatch
        assert metrics.from_summary(summary)["latency_p99"] == summary["loadgen"]["latency_ms"]["p99"]


def test_schema_rejects_what_renderers_cannot_read(validator, runs):
    summary = json.loads((runs["server"] / "summary.json").read_text())
    broken = dict(summary, harness=dict(summary["harness"]))
    del broken["harness"]["latency_ms"]
    assert any("latency_ms" in e.message for e in validator.iter_errors(broken))
    assert list(validator.iter_errors(dict(summary, schema_version=2)))
    assert list(validator.iter_errors(dict(summary, surprise=1)))


def _copy(src: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(src, dest)
    return dest


def test_newer_schema_version_is_refused_by_name(runs, tmp_path):
    run = _copy(runs["server"], tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps(dict(summary, schema_version=SCHEMA_VERSION + 1)))
    with pytest.raises(OutputError, match=f"schema_version {SCHEMA_VERSION + 1}.*upgrade"):
        load_run(run)


def test_missing_summary_section_is_named(runs, tmp_path):
    run = _copy(runs["server"], tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    del summary["validity"]
    (run / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(OutputError, match="lacks section 'validity'"):
        load_run(run)


def test_missing_files_are_named(runs, tmp_path):
    run = _copy(runs["server"], tmp_path)
    (run / "records.parquet").unlink()
    with pytest.raises(OutputError, match="has no records.parquet"):
        write_report(run, "csv")
    # Renderers that can work from the summary alone still do, and say what is missing.
    assert "no records.parquet" in write_report(run, "html")
    (run / "summary.json").unlink()
    with pytest.raises(OutputError, match="has no summary.json"):
        load_run(run)
    with pytest.raises(OutputError, match="is not a results folder"):
        load_run(tmp_path / "nowhere")

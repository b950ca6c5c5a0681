"""The harness's own verdict beside LoadGen's: a run whose samples failed is INVALID.

LoadGen's VALID speaks of latencies only (a failed sample is timed like any other, often as
a fast one), so a run where every request failed passed it. Below `min_success_rate` the
headline, summary.json (`validity.harness`), `harness check` (invalid, exit 4) and the exit
code of `harness run` (1, a negative verdict) all say INVALID.
"""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from rich.console import Console

from harness.analysis.check import EXIT_INVALID, check_run
from harness.cli import main
from harness.config.run_config import RunConfig
from harness.errors import EXIT_NEGATIVE, EXIT_OK
from harness.report import figures
from harness.report.terminal import render
from harness.results.summary import DEFAULT_MIN_SUCCESS_RATE, harness_validity, success_rate_failed
from harness.run import runner

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json"
# SingleStream on a backend where every third call raises (fail_every 1 or 2 would fail the
# child's probe and warm-up calls before the test, a crash): LoadGen has its queries and its
# duration, so it says VALID; a third of the samples failed.
THIRD_FAIL = dict(backend="synthetic", scenario="SingleStream", backend_options={"service_time_ms": 0.0, "fail_every": 3},
                min_duration_s=0.1, min_query_count=100, single_stream_expected_latency_ms=0.005)
CLI_THIRD_FAIL = ["run", "--backend", "synthetic", "--scenario", "SingleStream", "--set", "fail_every=3",
                "--set", "service_time_ms=0", "--set", "min_duration_s=0.1", "--set", "min_query_count=100",
                "--set", "single_stream_expected_latency_ms=0.005"]


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return runner.run(RunConfig(**THIRD_FAIL), tmp_path_factory.mktemp("third-fail")).run_dir


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _terminal(run_dir: Path) -> str:
    buf = io.StringIO()
    render(_summary(run_dir), Console(file=buf, width=80, color_system=None), str(run_dir))
    return buf.getvalue()


def test_default_is_the_configs():
    assert RunConfig.model_fields["min_success_rate"].default == DEFAULT_MIN_SUCCESS_RATE


def test_a_third_of_the_samples_failed_is_invalid_in_summary_json(failed_run: Path):
    s = _summary(failed_run)
    assert s["harness"]["samples"] >= 100 and s["harness"]["success_rate"] == pytest.approx(2 / 3, abs=0.01)
    assert s["validity"]["result"] == "VALID"  # LoadGen's, untouched: it speaks of latencies only
    assert s["validity"]["harness"] == {"result": "INVALID", "min_success_rate": DEFAULT_MIN_SUCCESS_RATE,
                                        "success_rate_ok": False, "clock_ok": True}
    assert any("below min_success_rate 95%" in r for r in s["validity"]["reasons"])
    assert any("min_success_rate" in f for f in s["validity"]["fixes"])
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(s)


def test_the_headline_says_invalid(failed_run: Path):
    text = _terminal(failed_run)
    assert text.startswith("INVALID · SingleStream PerformanceOnly · synthetic")
    ours = _summary(failed_run)["harness"]
    shown = re.search(r"success ([\d.]+)% \(([\d,]+) of ([\d,]+)\)", text)
    assert shown, text
    assert (int(shown[2].replace(",", "")), int(shown[3].replace(",", ""))) == (ours["succeeded"], ours["samples"])
    assert float(shown[1]) == pytest.approx(100 * ours["succeeded"] / ours["samples"], abs=0.005)
    # Every third call fails, counted from the child's probe and warm-up calls, whose number
    # follows the machine's speed: two thirds of the samples succeed, to within one (a
    # starved run once showed 66.67 %, a quiet one 66.66 %).
    assert abs(ours["succeeded"] - 2 * ours["samples"] / 3) <= 1, shown[0]
    assert "below min_success_rate 95%" in text
    assert "success rate ≥ 95% (harness)" in [r[0] for r in figures.validity_table(_summary(failed_run))[1]]


def test_check_finds_it_invalid(failed_run: Path):
    result = check_run(failed_run, rebuild_dataset=False)
    assert result.exit_code == EXIT_INVALID and result.verdict == "invalid"
    found = {f.what: f for f in result.findings}
    assert found["success rate"].kind == "invalid" and "below min_success_rate 95%" in found["success rate"].detail
    assert found["validity"].kind == "ok"  # LoadGen's VALID stands beside it


def test_harness_run_exits_1_and_0_when_the_rule_is_off(tmp_path: Path):
    result = CliRunner().invoke(main, [*CLI_THIRD_FAIL, "--output-dir", str(tmp_path / "strict")])
    assert result.exit_code == EXIT_NEGATIVE, result.output
    assert result.output.startswith("INVALID")
    result = CliRunner().invoke(main, [*CLI_THIRD_FAIL, "--set", "min_success_rate=0", "--output-dir", str(tmp_path / "off")])
    assert result.exit_code == EXIT_OK, result.output
    assert result.output.startswith("VALID")
    (run_dir,) = (tmp_path / "off").iterdir()
    assert _summary(run_dir)["validity"]["harness"]["success_rate_ok"] is True
    assert check_run(run_dir, rebuild_dataset=False).exit_code == 0


@pytest.mark.parametrize("rate, threshold, ok", [(0.95, 0.95, True), (0.9499, 0.95, False), (0.0, 0.0, True),
                                                 (1.0, 1.0, True), (0.999, 1.0, False)])
def test_the_rule_at_its_bounds(rate, threshold, ok):
    ours = {"samples": 10_000, "success_rate": rate}
    verdict = harness_validity("VALID", ours, threshold)
    assert verdict["success_rate_ok"] is ok
    assert verdict["result"] == ("VALID" if ok else "INVALID")
    assert harness_validity("INVALID", ours, threshold)["result"] == "INVALID"


def test_no_samples_no_verdict_of_ours():
    assert harness_validity(None, {"samples": 0}, 0.95) == {"result": None, "min_success_rate": 0.95,
                                                            "success_rate_ok": None, "clock_ok": None}


def test_a_summary_from_before_the_rule_keeps_loadgens_verdict(failed_run: Path):
    s = copy.deepcopy(_summary(failed_run))
    del s["validity"]["harness"]
    assert not success_rate_failed(s) and figures.verdict(s) == "VALID"


def test_min_success_rate_is_bounded():
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="min_success_rate"):
            RunConfig(min_success_rate=bad)


def test_every_http_request_failed_is_invalid(tmp_path: Path):
    """The issue's case: a Server run where the server answers every request with an error."""
    from tests.support.http_servers import ServerThread, Timing, openai_app, write_prompts

    prompts = write_prompts(tmp_path / "prompts.jsonl", ["@http_503"] * 8)
    with ServerThread(openai_app(Timing(ttft_ms=1, tokens=2))) as srv:
        outcome = runner.run(
            RunConfig(backend="http", scenario="Server", dataset=str(prompts), target_qps=200,
                      backend_options={"protocol": "openai-completions", "url": srv.url + "/v1", "warmup_requests": 0},
                      min_duration_s=0.2, min_query_count=20),
            tmp_path / "results",
        )
    s = outcome.summary
    assert s["harness"]["success_rate"] == 0 and s["harness"]["samples"] >= 20
    assert s["validity"]["harness"]["result"] == "INVALID" and figures.verdict(s) == "INVALID"
    assert _terminal(outcome.run_dir).startswith("INVALID · Server")
    assert check_run(outcome.run_dir, rebuild_dataset=False).exit_code == EXIT_INVALID

"""The exit-code table of harness.errors: a negative verdict, bad input, a damaged results
folder and a crash of the tool never share a code, and each is one line, not a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.config.run_config import RunConfig
from harness.errors import EXIT_INTERNAL, EXIT_NEGATIVE, EXIT_RESULTS, EXIT_USAGE
from harness.run import runner

# 1 ms a sample against 2 ms: throughput halves, so a -10 % gate fires every time.
FAST = dict(backend="synthetic", scenario="Offline", max_batch=16, min_duration_s=0.3, offline_expected_qps=4000)


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=120)


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exit-codes")
    fast = runner.run(RunConfig(**FAST, backend_options={"per_sample_ms": 0.5}), root).run_dir
    slow = runner.run(RunConfig(**FAST, backend_options={"per_sample_ms": 1.0}), root).run_dir
    return {"fast": fast, "slow": slow}


def test_a_fired_gate_exits_1_and_a_passing_one_0(runs):
    fired = harness("compare", str(runs["fast"]), str(runs["slow"]), "--fail-if", "throughput < -10%")
    assert fired.returncode == EXIT_NEGATIVE, fired.stdout + fired.stderr
    assert "Traceback" not in fired.stderr
    quiet = harness("compare", str(runs["fast"]), str(runs["fast"]), "--fail-if", "throughput < -10%")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr


@pytest.mark.parallel
@pytest.mark.parametrize("damage", [b"{not json", b"\xff\xfe\x00garbage", b"[1, 2]"])
def test_a_damaged_cost_json_in_a_compared_folder_is_not_a_verdict(runs, tmp_path, damage):
    damaged = tmp_path / runs["slow"].name
    shutil.copytree(runs["slow"], damaged)
    (damaged / "cost.json").write_bytes(damage)
    proc = harness("compare", str(runs["fast"]), str(damaged), "--fail-if", "throughput < -10%")
    assert proc.returncode == EXIT_RESULTS, proc.stdout + proc.stderr
    line = one_line(proc)
    assert str(damaged / "cost.json") in line and "damaged" in line


@pytest.mark.parallel
def test_a_path_that_is_no_results_folder_is_bad_input_and_a_damaged_one_is_not(tmp_path, runs):
    proc = harness("report", str(tmp_path / "nope"))
    assert proc.returncode == EXIT_USAGE
    assert "does not exist" in one_line(proc)
    damaged = tmp_path / "damaged"
    shutil.copytree(runs["fast"], damaged)
    (damaged / "summary.json").write_text('{"schema_version": 1, "run": ')
    proc = harness("report", str(damaged))
    assert proc.returncode == EXIT_RESULTS
    assert f"{damaged / 'summary.json'} is damaged" in one_line(proc)


@pytest.mark.parallel
def test_bad_input_exits_2(tmp_path):
    proc = harness("compare", str(tmp_path), str(tmp_path), "--fail-if", "throughput <<< 5")
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr


@pytest.mark.parallel
def test_an_unexpected_exception_is_the_tools_failure_not_a_verdict(runs, monkeypatch):
    """A bug (any exception that is not a HarnessError) exits 70 with one line; --debug adds
    the traceback. Planted in-process: the command's library call raises."""
    import harness.analysis.compare as compare_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("planted bug")

    monkeypatch.setattr(compare_module, "compare", broken)
    cli = CliRunner()
    args = ["compare", str(runs["fast"]), str(runs["slow"]), "--fail-if", "throughput < -10%"]
    out = cli.invoke(main, args)
    assert out.exit_code == EXIT_INTERNAL, out.output
    assert "internal error: ZeroDivisionError: planted bug" in out.output
    assert "Traceback" not in out.output
    debug = cli.invoke(main, ["--debug", *args])
    assert debug.exit_code == EXIT_INTERNAL
    assert "Traceback" in debug.output and "planted bug" in debug.output


@pytest.mark.parallel
def test_check_of_a_repeat_folder_with_a_damaged_aggregate(tmp_path, runs):
    folder = tmp_path / "repeat"
    folder.mkdir()
    (folder / "aggregate.json").write_text(json.dumps({"runs": []}))
    proc = harness("check", str(folder))
    assert proc.returncode == EXIT_RESULTS
    assert "lists no runs" in one_line(proc)

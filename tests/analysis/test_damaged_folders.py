"""Damaged results folders: every kind of damage × report, check, compare and cost.

A damaged file never gives a traceback. `report`, `compare` and `cost` answer with one line,
`error: <the file> ...`, and exit 7 (ResultsError) when they need the file, or work as
usual when they never read it; `check` turns the damage into a finding and its verdict
(TAMPERED 6, INCOMPLETE 5), never VALID: LoadGen's log above all is the official record.
One real run (synthetic backend, a short Offline test) is copied for each case.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.analysis.check import check_run
from harness.cli import main
from harness.config.run_config import RunConfig
from harness.errors import EXIT_CHECK_INCOMPLETE, EXIT_CHECK_TAMPERED, EXIT_OK, EXIT_RESULTS
from harness.results import folder
from harness.run import runner
from tests.support.legacy_records import to_legacy_csv

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

GARBAGE = bytes(range(256)) * 4  # not UTF-8, holds NUL bytes
SHEET = "currency: USD\ndevice_hourly: 2.0\nper_request: 0.001\n"


def _write(name: str, data: bytes | str) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        path = run_dir / name
        path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)

    return damage


def _edit_summary(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        path = run_dir / folder.SUMMARY
        summary = json.loads(path.read_text())
        change(summary)
        path.write_text(json.dumps(summary))

    return damage


def _text_times(run_dir: Path) -> None:
    """A well-formed Parquet file whose issue_ns column holds text: not what the harness writes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(run_dir / folder.RECORDS)
    i = table.schema.get_field_index("issue_ns")
    table = table.set_column(i, "issue_ns", pa.array([f"{v}x" for v in table.column(i).to_pylist()]))
    pq.write_table(table, run_dir / folder.RECORDS)


def _cut(name: str) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        path = run_dir / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    return damage


def _legacy_bad_cell(run_dir: Path) -> None:
    """A folder from before records.parquet, whose records.csv has a cell that is no integer."""
    lines = to_legacy_csv(run_dir)
    cells = lines[5].split(",")
    cells[2] = "12x45"  # issue_ns
    lines[5] = ",".join(cells)
    (run_dir / folder.LEGACY_RECORDS).write_text("\n".join(lines) + "\n")


def _remove(name: str) -> Callable[[Path], None]:
    return lambda run_dir: (run_dir / name).unlink()


#: damage -> (the file it names, check's exit, the commands that read the file: they exit 7)
READ_BY_ALL = ("report", "compare", "cost")
CASES: dict[str, tuple[Callable[[Path], None], str, int, tuple[str, ...]]] = {
    "summary binary": (_write(folder.SUMMARY, GARBAGE), folder.SUMMARY, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "summary JSON list": (_write(folder.SUMMARY, "[1, 2, 3]\n"), folder.SUMMARY, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "summary section not an object": (
        _edit_summary(lambda s: s.update(harness="fast")), folder.SUMMARY, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "summary run section a list": (
        _edit_summary(lambda s: s.update(run=[1])), folder.SUMMARY, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "summary figure missing": (
        _edit_summary(lambda s: s["harness"].pop("success_rate")), folder.SUMMARY, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "summary figure text": (
        _edit_summary(lambda s: s["harness"]["latency_ms"].update(p99="fast")), folder.SUMMARY, EXIT_CHECK_TAMPERED,
        READ_BY_ALL),
    "summary LoadGen errors not text": (
        _edit_summary(lambda s: s["loadgen"].update(errors=[1])), folder.SUMMARY, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "run.yaml not YAML": (_write(folder.RUN_CONFIG, "name: [unclosed\n  : :\n"), folder.RUN_CONFIG, EXIT_CHECK_TAMPERED,
                          READ_BY_ALL),
    "run.yaml a list": (_write(folder.RUN_CONFIG, "- a\n- b\n"), folder.RUN_CONFIG, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "run.yaml binary": (_write(folder.RUN_CONFIG, GARBAGE), folder.RUN_CONFIG, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    # An Offline tensor run's breakdown is in summary.json: report, compare and cost never
    # open its records; check reads every row.
    "records text times": (_text_times, folder.RECORDS, EXIT_CHECK_TAMPERED, ()),
    "records binary": (_write(folder.RECORDS, GARBAGE), folder.RECORDS, EXIT_CHECK_TAMPERED, ()),
    "records cut in half": (_cut(folder.RECORDS), folder.RECORDS, EXIT_CHECK_TAMPERED, ()),
    "records.csv (legacy) bad cell": (_legacy_bad_cell, folder.LEGACY_RECORDS, EXIT_CHECK_TAMPERED, ()),
    "manifest.json binary": (_write(folder.MANIFEST, GARBAGE), folder.MANIFEST, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "manifest.json a list": (_write(folder.MANIFEST, "[]"), folder.MANIFEST, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "system.json binary": (_write(folder.SYSTEM, GARBAGE), folder.SYSTEM, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "cost.json binary": (_write(folder.COST, GARBAGE), folder.COST, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "cost.json a list": (_write(folder.COST, "[0.1]"), folder.COST, EXIT_CHECK_TAMPERED, READ_BY_ALL),
    "child.json garbage": (_write(folder.CHILD, "{not json"), folder.CHILD, EXIT_CHECK_TAMPERED, ()),
    "child.json binary": (_write(folder.CHILD, GARBAGE), folder.CHILD, EXIT_CHECK_TAMPERED, ()),
    # LoadGen's own log: only check reads it back (the summary holds its figures).
    "LoadGen log emptied": (_write(folder.LOADGEN_DETAIL, ""), folder.LOADGEN_DETAIL, EXIT_CHECK_INCOMPLETE, ()),
    "LoadGen log missing": (_remove(folder.LOADGEN_DETAIL), folder.LOADGEN_DETAIL, EXIT_CHECK_INCOMPLETE, ()),
    "LoadGen log text garbage": (
        _write(folder.LOADGEN_DETAIL, "this is not a LoadGen log\n" * 20), folder.LOADGEN_DETAIL, EXIT_CHECK_TAMPERED, ()),
    "LoadGen log binary": (_write(folder.LOADGEN_DETAIL, GARBAGE), folder.LOADGEN_DETAIL, EXIT_CHECK_TAMPERED, ()),
}


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    config = RunConfig(backend="synthetic", scenario="Offline", max_batch=16, min_duration_s=0.1,
                       backend_options={"per_sample_ms": 0.05}, offline_expected_qps=40_000)
    run_dir = runner.run(config, root).run_dir
    sheet = root / "cost.yaml"
    sheet.write_text(SHEET)
    result = CliRunner().invoke(main, ["cost", str(run_dir), "--cost", str(sheet)])  # so there is a cost.json
    assert result.exit_code == 0, result.output
    assert check_run(run_dir).exit_code == 0
    return run_dir


@pytest.fixture(scope="module")
def sheet(good_run: Path) -> Path:
    return good_run.parent / "cost.yaml"


def _damaged(good_run: Path, tmp_path: Path, case: str) -> Path:
    run_dir = Path(shutil.copytree(good_run, tmp_path / good_run.name))
    CASES[case][0](run_dir)
    return run_dir


def _args(command: str, run_dir: Path, good_run: Path, sheet: Path) -> list[str]:
    return {
        "report": ["report", str(run_dir)],
        "check": ["check", str(run_dir), "--no-dataset"],
        "compare": ["compare", str(good_run), str(run_dir)],
        "cost": ["cost", str(run_dir), "--cost", str(sheet)],
    }[command]


@pytest.mark.parametrize("command", ["report", "compare", "cost"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_file_is_one_line_naming_it(good_run: Path, sheet: Path, tmp_path: Path, case: str, command: str):
    _, name, _, readers = CASES[case]
    run_dir = _damaged(good_run, tmp_path, case)
    result = CliRunner().invoke(main, _args(command, run_dir, good_run, sheet))
    assert "Traceback" not in result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if command not in readers:
        assert result.exit_code == EXIT_OK, result.stderr  # it never reads the file
        return
    assert result.exit_code == EXIT_RESULTS, (result.exit_code, result.output, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert name in lines[0]
    assert "internal error" not in lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_check_reports_the_damage_as_its_verdict(good_run: Path, sheet: Path, tmp_path: Path, case: str):
    _, name, code, _ = CASES[case]
    run_dir = _damaged(good_run, tmp_path, case)
    result = CliRunner().invoke(main, _args("check", run_dir, good_run, sheet))
    assert "Traceback" not in result.output + result.stderr
    assert result.exit_code == code, result.output
    verdict = {EXIT_CHECK_TAMPERED: "TAMPERED", EXIT_CHECK_INCOMPLETE: "INCOMPLETE"}[code]
    assert f"\n{verdict} (exit {code}) · " in result.output  # the verdict line, after the findings
    findings = check_run(run_dir, rebuild_dataset=False)
    assert findings.verdict != "valid"
    assert any(name in f.what or name in f.detail for f in findings.problems()), findings.findings


def test_an_intact_copy_passes_every_command(good_run: Path, sheet: Path, tmp_path: Path):
    run_dir = Path(shutil.copytree(good_run, tmp_path / good_run.name))
    for command in ("report", "check", "compare", "cost"):
        result = CliRunner().invoke(main, _args(command, run_dir, good_run, sheet))
        assert result.exit_code == EXIT_OK, (command, result.output, result.stderr)

"""What a run costs before and after its test: the modules `harness run` imports, in the
command's process and in the run's child.

Neither needs pandas or matplotlib for a run and its terminal view, and together they cost
1.4 s of a 3.2 s command on 2 cores (`benchmarks/bench_startup.py`: 3.17 -> 1.78 s): pyarrow's
`pa.array` and `to_numpy` import pandas (harness.results.records avoids both), and the
terminal view once imported the plots module. Every run of a sweep, a capacity search or a
repeat pays this again, so it is checked, from Python's own import log of both processes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

HEAVY = ("pandas", "matplotlib")


def imported(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `python -m harness ARGS` with Python's import log on (the child inherits it), and
    return the process and the top-level packages imported by any of its processes."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", proc.stderr, re.M)
    return proc, set(names)


def test_a_run_and_its_terminal_view_import_neither_pandas_nor_matplotlib(tmp_path: Path) -> None:
    proc, names = imported(["run", "--backend", "synthetic", "--scenario", "Offline", "--set", "min_duration_s=0",
                            "--set", "min_query_count=200", "--output-dir", str(tmp_path / "results")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # both processes' logs were read: the command's own modules and the child's
    assert {"harness.cli.main", "harness.child.main", "pyarrow.parquet", "rich"} <= names, sorted(names)[:40]
    (run,) = (tmp_path / "results").iterdir()
    assert (run / "records.parquet").is_file() and "throughput" in proc.stdout.lower()
    assert {n for n in names if n.split(".")[0] in HEAVY} == set()

    # The same log does show them where a command needs them: the HTML report's plots.
    proc, names = imported(["report", str(run), "--format", "html", "-o", str(tmp_path / "r.html")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "matplotlib" in names

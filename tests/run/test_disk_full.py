"""A full disk: one line, the incomplete run's exit code, whatever fit kept, and `check`
calling the folder incomplete (never tampered). The disk is a real 2 MB tmpfs, so every
ENOSPC comes from the kernel where the harness writes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.errors import EXIT_CHECK_INCOMPLETE, EXIT_INCOMPLETE, EXIT_USAGE

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)


@pytest.fixture
def small_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    size = getattr(request, "param", "2m")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True)
    assert mounted.returncode == 0, f"this test needs to mount a tmpfs (root): {mounted.stderr}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=180)


def test_the_disk_fills_during_the_test(small_disk: Path):
    # ~2.5 M samples of records: far more than 2 MB of frames.
    run = harness("run", "--backend", "synthetic", "--scenario", "Offline", "--set", "max_batch=64",
                  "--set", "offline_expected_qps=200000", "--set", "min_duration_s=2", "--output-dir", str(small_disk))
    assert run.returncode == EXIT_INCOMPLETE, run.stderr
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "no space left on device" in lines[0], run.stderr
    (run_dir,) = small_disk.iterdir()
    assert str(run_dir) in lines[0]
    partial = run_dir / "records.partial"
    assert partial.is_file() and partial.stat().st_size > 1_000_000  # what fit is kept
    assert not (run_dir / "records.parquet").exists()  # never a half file that reads as tampered
    assert not any(p.name.endswith(".tmp") for p in run_dir.iterdir())
    check = harness("check", "--no-dataset", str(run_dir))
    assert check.returncode == EXIT_CHECK_INCOMPLETE, check.stdout + check.stderr
    assert "INCOMPLETE" in check.stdout


@pytest.mark.parametrize("small_disk", ["8k"], indirect=True)
def test_a_disk_too_full_to_start_is_one_line(small_disk: Path):
    run = harness("run", "--backend", "synthetic", "--scenario", "Offline", "--output-dir", str(small_disk))
    assert run.returncode == EXIT_USAGE, run.stderr
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no space left on device writing "), run.stderr

"""Failures are completed to LoadGen, counted apart, and never enter latency; crashes keep records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from harness.records import read_records


def test_backend_exceptions_fail_exactly_their_samples(run_harness):
    run_dir, s = run_harness(
        backend="synthetic",
        scenario="SingleStream",
        backend_options={"service_time_ms": 1.0, "fail_every": 4},
        min_duration_s=0.5,
        single_stream_expected_latency_ms=1.0,
        min_query_count=200,
    )
    ours = s["harness"]
    n = ours["samples"]
    assert n == s["loadgen"]["query_count"]  # every issued sample came back to LoadGen
    assert ours["failed"] == n // 4  # one batch of one sample in four raised
    assert ours["succeeded"] == n - n // 4
    assert ours["success_rate"] == (n - n // 4) / n
    assert ours["failures_by_reason"] == {"RuntimeError": n // 4}
    rec = read_records(run_dir).columns
    bad = rec["status"] == "error"
    assert all("injected failure" in e for e in rec["error"][bad])
    # Failed calls return at once; were they counted, the median would drop below 1 ms.
    assert ours["latency_ms"]["min"] >= 1.0
    assert any("failed" in r for r in s["validity"]["reasons"])


def _child_pid(run_root: Path, timeout: float = 30) -> tuple[int, Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"harness.child" in cmd and str(run_root).encode() in cmd[-2]:
                return int(pid), Path(cmd[-2].decode())
        time.sleep(0.1)
    raise AssertionError("child process never appeared")


def test_killed_child_leaves_an_incomplete_folder_with_its_records(tmp_path):
    root = tmp_path / "results"
    parent = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--backend", "synthetic", "--scenario", "SingleStream",
         "--set", "service_time_ms=1", "--set", "min_duration_s=60", "--output-dir", str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    pid, run_dir = _child_pid(root)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until records have reached the disk
        path = run_dir / "records.csv"
        if path.exists() and path.read_text().count("\n") > 50:
            break
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    out, err = parent.communicate(timeout=60)
    assert parent.returncode == 3, (out, err)
    import json

    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "incomplete"
    assert "SIGKILL" in s["incomplete_reason"]
    assert s["harness"]["samples"] > 50
    rec = read_records(run_dir).columns
    assert len(rec["query_id"]) == s["harness"]["samples"]
    assert np.all(rec["complete_ns"] >= rec["issue_ns"])
    assert "INCOMPLETE" in out

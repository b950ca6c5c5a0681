"""Failures are completed to LoadGen, counted apart, and never enter latency; crashes keep records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.results.records import read_records

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)


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
        path = run_dir / "records.partial"  # rows reach it every 0.25 s during the test
        # > 8 kB holds > 50 samples (a sample's entry marshals to < 90 bytes); 2 kB could be
        # the first flush of ~25, and the kill then came before the count asserted below.
        if path.exists() and path.stat().st_size > 8000:
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
    assert not (run_dir / "records.partial").exists()  # recovered into records.parquet
    assert np.all(rec["complete_ns"] >= rec["issue_ns"])
    assert "INCOMPLETE" in out


def test_records_survive_numpy_values_and_a_cut_frame(tmp_path):
    from harness.child.record_writer import RecordWriter
    from harness.results.folder import PARTIAL_RECORDS as PARTIAL_FILE
    from harness.results.records import frame_bytes, recover

    w = RecordWriter(tmp_path)
    w.add((np.int64(7), 1, 10, 11, 0, 0, 12, 0, 0, 0, 0, "ok", ""))
    w.add((8, 2, 10, 11, 0, 0, 13, 0, 0, 1, 0, "error", 'ValueError: a "quoted", text'))
    w.close()
    rec = read_records(tmp_path).columns
    assert list(rec["query_id"]) == [7, 8] and rec["error"][1] == 'ValueError: a "quoted", text'
    # A crash mid-write leaves half a frame: the whole frames before it are kept.
    (tmp_path / "records.parquet").unlink()
    good = frame_bytes([(1, 1, 1, 1, 0, 0, 2, 0, 0, 0, 0, "ok", "")])
    (tmp_path / PARTIAL_FILE).write_bytes(good + good[: len(good) // 2])
    assert recover(tmp_path) == 1
    assert len(read_records(tmp_path)) == 1


def test_a_backend_call_is_one_entry_made_into_a_row_per_sample(tmp_path):
    from harness.child.record_writer import RecordWriter
    from harness.results.folder import PARTIAL_RECORDS as PARTIAL_FILE
    from harness.results.records import frame_bytes, recover

    w = RecordWriter(tmp_path)
    # (query ids, sample indices, issue times, dispatch, complete, batch id, worker, status, error)
    w.add(((101, 102, 103), (5, 6, 5), (10, 10, 12), 20, 30, 7, 1, "ok", ""))
    w.extend([((104,), (9,), (13,), 31, 40, 8, 0, "error", "RuntimeError: boom")])
    w.close()
    assert w.written == 4  # samples, not entries
    rec = read_records(tmp_path).columns
    assert list(rec["query_id"]) == [101, 102, 103, 104]
    assert list(rec["sample_index"]) == [5, 6, 5, 9]
    assert list(rec["issue_ns"]) == [10, 10, 12, 13]
    assert list(rec["dispatch_ns"]) == [20, 20, 20, 31] and list(rec["complete_ns"]) == [30, 30, 30, 40]
    assert list(rec["batch_id"]) == [7, 7, 7, 8] and list(rec["worker"]) == [1, 1, 1, 0]
    assert list(rec["status"]) == ["ok", "ok", "ok", "error"] and rec["error"][3] == "RuntimeError: boom"
    assert list(rec["first_token_ns"]) == [0, 0, 0, 0]
    # A crash mid-write: the whole frames before the cut are kept, every sample of them.
    (tmp_path / "records.parquet").unlink()
    good = frame_bytes([((1, 2), (0, 1), (5, 5), 6, 7, 0, 0, "ok", "")])
    (tmp_path / PARTIAL_FILE).write_bytes(good + good[: len(good) // 2])
    assert recover(tmp_path) == 2
    assert list(read_records(tmp_path).columns["query_id"]) == [1, 2]


def test_record_writer_close_is_safe_twice_and_from_two_threads(tmp_path):
    """A stop signal's thread and the test's end may both close the records: one wins, the
    other finds them closed; records.parquet is written once, whole."""
    import threading

    from harness.child.record_writer import RecordWriter
    from harness.results.records import read_records

    writer = RecordWriter(tmp_path)
    writer.extend([(i, i, 1, 2, 0, 0, 3, 0, 0, i, 0, "ok", "") for i in range(1000)])
    closers = [threading.Thread(target=writer.close) for _ in range(4)]
    for t in closers:
        t.start()
    for t in closers:
        t.join(timeout=10)
    writer.close()
    assert len(read_records(tmp_path)) == 1000
    assert not (tmp_path / "records.partial").exists()

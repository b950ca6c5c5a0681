"""SIGTERM, SIGHUP and Ctrl-C stop a real run and still leave a complete folder; the child
dies with its parent.

Each test starts `python -m harness run` (synthetic backend, Server, min_duration_s=30) in
its own session, waits until records reach the disk, signals, and bounds every wait. The
`harness` fixture kills whatever is still alive afterwards, pass or fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.config.run_config import RunConfig
from harness.results.records import read_records
from harness.run import runner

RUN = ["--backend", "synthetic", "--scenario", "Server", "--set", "service_time_ms=1", "--set", "target_qps=200",
       "--set", "min_duration_s=30"]
STOP_BOUND_S = 15  # a stop takes well under a second; the parent's SIGKILL fallback is at 10 s


class Harness:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.parent = subprocess.Popen(
            [sys.executable, "-m", "harness", "run", *RUN, "--output-dir", str(root)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,  # its own process group, so a group signal reaches only it
        )
        self.child = _wait_for(lambda: _children(self.parent.pid), 60, "the child process never appeared")[0]
        self.run_dir = _wait_for(lambda: list(root.iterdir()), 10, "no results folder")[0]

    def wait_for_records(self) -> None:
        """Until the test is ~2 s in: > 8 kB of records.partial holds > 50 samples."""
        partial = self.run_dir / "records.partial"
        _wait_for(lambda: partial.exists() and partial.stat().st_size > 8000, 60, "no records reached the disk")

    def finish(self) -> tuple[int, str, str]:
        out, err = self.parent.communicate(timeout=STOP_BOUND_S)
        return self.parent.returncode, out, err

    def cleanup(self) -> None:
        for pid in (self.child, self.parent.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.parent.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError):
            pass


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "results")
    try:
        yield h
    finally:
        h.cleanup()


def _wait_for(probe, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout} s")


def _children(pid: int) -> list[int]:
    try:
        import psutil
    except ImportError:  # /proc: field 4 of /proc/PID/stat is the parent's pid
        found = []
        for entry in os.listdir("/proc"):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if entry.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
        return found
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie (reparented, waiting for a reaper that may never come)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def assert_stopped_folder(h: Harness, rc: int, out: str, err: str, signal_name: str) -> None:
    assert rc == 3, (rc, out, err)
    summary = json.loads((h.run_dir / "summary.json").read_text())
    assert summary["status"] == "incomplete"
    assert summary["incomplete_reason"] == f"stopped by {signal_name}"
    records = read_records(h.run_dir)
    assert len(records) > 0 and len(records) == summary["harness"]["samples"]
    assert not (h.run_dir / "records.partial").exists()  # made into records.csv
    _wait_for(lambda: _gone(h.child), 5, "the child still runs")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_parent_stops_the_run_with_a_summary(harness, sig):
    harness.wait_for_records()
    t0 = time.monotonic()
    harness.parent.send_signal(sig)
    rc, out, err = harness.finish()
    assert time.monotonic() - t0 < 5  # the child stops on the forwarded signal, not on the 10 s kill
    assert_stopped_folder(harness, rc, out, err, sig.name)
    assert "INCOMPLETE" in out


def test_sigterm_to_the_whole_process_group(harness):
    harness.wait_for_records()
    os.killpg(harness.parent.pid, signal.SIGTERM)  # docker stop, or `timeout` of a shell script
    rc, out, err = harness.finish()
    assert_stopped_folder(harness, rc, out, err, "SIGTERM")


def test_two_ctrl_c_in_a_row_still_leave_a_summary(harness):
    harness.wait_for_records()
    for _ in range(2):  # as a terminal delivers Ctrl-C: to the whole group, child included
        os.killpg(harness.parent.pid, signal.SIGINT)
        time.sleep(0.2)
    rc, out, err = harness.finish()
    assert_stopped_folder(harness, rc, out, err, "SIGINT")


def test_the_child_dies_with_a_killed_parent_and_keeps_its_records(harness):
    harness.wait_for_records()
    harness.parent.kill()  # SIGKILL cannot be handled: no summary, but no orphan either
    harness.parent.communicate(timeout=10)
    _wait_for(lambda: _gone(harness.child), 5, "the orphaned child still runs")
    assert not (harness.run_dir / "summary.json").exists()
    assert len(read_records(harness.run_dir)) > 0  # the child flushed them on its way out
    assert not (harness.run_dir / "records.partial").exists()


def test_a_library_callers_handlers_come_back(tmp_path):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set on the main thread")
    caught: list[int] = []
    before = {sig: signal.signal(sig, lambda s, f: caught.append(s)) for sig in (signal.SIGTERM, signal.SIGHUP)}
    mine = signal.getsignal(signal.SIGTERM)
    root = tmp_path / "results"
    stop = threading.Event()

    def signal_once_records_flow() -> None:  # then the run's handlers are surely in place
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            partial = list(root.glob("*/records.partial"))
            if partial and partial[0].exists() and partial[0].stat().st_size > 8000:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.05)

    timer = threading.Thread(target=signal_once_records_flow, daemon=True)
    try:
        timer.start()
        config = RunConfig(backend="synthetic", scenario="Server", target_qps=200, min_duration_s=30,
                           backend_options={"service_time_ms": 1.0})
        t0 = time.monotonic()
        outcome = runner.run(config, root)
        assert time.monotonic() - t0 < 25
        assert outcome.summary["status"] == "incomplete"
        assert outcome.summary["incomplete_reason"] == "stopped by SIGTERM"
        assert signal.getsignal(signal.SIGTERM) is mine  # restored, and not called for the run's signal
        assert caught == []
    finally:
        stop.set()
        timer.join(timeout=5)
        for sig, handler in before.items():
            signal.signal(sig, handler)

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
from tests.support.processes import children as _children
from tests.support.processes import gone as _gone
from tests.support.processes import wait_for as _wait_for

RUN = ["--backend", "synthetic", "--scenario", "Server", "--set", "service_time_ms=1", "--set", "target_qps=200",
       "--set", "min_duration_s=30"]
STOP_BOUND_S = 15  # a stop takes well under a second; the parent's SIGKILL fallback is at 10 s


# The child's stop made slow, so that further signals surely land while the parent is
# stopping it; the parent imports it too, where nothing calls it.
SLOW_STOP = """
import time
from harness.child import main

_real = main.Lifeline.stop


def slow_stop(self, signum):
    time.sleep(3)
    _real(self, signum)


main.Lifeline.stop = slow_stop
"""


class Harness:
    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.parent = subprocess.Popen(
            [sys.executable, "-m", "harness", "run", *RUN, "--output-dir", str(root)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
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


@pytest.fixture
def slow_stopping_harness(tmp_path: Path) -> Iterator[Harness]:
    site = tmp_path / "plant"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_STOP)
    h = Harness(tmp_path / "results", env={**os.environ, "PYTHONPATH": str(site)})
    try:
        yield h
    finally:
        h.cleanup()




def assert_stopped_folder(h: Harness, rc: int, out: str, err: str, signal_name: str) -> None:
    assert rc == 3, (rc, out, err)
    summary = json.loads((h.run_dir / "summary.json").read_text())
    assert summary["status"] == "incomplete"
    assert summary["incomplete_reason"] == f"stopped by {signal_name}"
    records = read_records(h.run_dir)
    assert len(records) > 0 and len(records) == summary["harness"]["samples"]
    assert not (h.run_dir / "records.partial").exists()  # made into records.parquet
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


def test_a_second_ctrl_c_while_stopping_kills_the_child_and_still_leaves_a_summary(slow_stopping_harness):
    h = slow_stopping_harness
    h.wait_for_records()
    t0 = time.monotonic()
    for _ in range(2):  # as a terminal delivers Ctrl-C: to the whole group, child included
        os.killpg(h.parent.pid, signal.SIGINT)
        time.sleep(0.2)
    rc, out, err = h.finish()
    # The second one killed the child, still in its 3 s stop: the parent did not wait for it.
    assert time.monotonic() - t0 < 2.5
    assert_stopped_folder(h, rc, out, err, "SIGINT")  # records: the frames flushed before the kill


def test_three_ctrl_c_in_a_row_leave_a_summary(slow_stopping_harness):
    h = slow_stopping_harness
    h.wait_for_records()
    for _ in range(3):
        os.killpg(h.parent.pid, signal.SIGINT)
        time.sleep(0.05)
    rc, out, err = h.finish()
    # The second kills the child and the summary follows within ~0.1 s, so the third often
    # lands after `runner.run` has returned: the CLI notes it too (harness/cli/run.py) and
    # the command still ends as stopped, never with click's "Aborted!" (exit 1).
    assert rc == 3 and "Aborted" not in err and "Traceback" not in err, (rc, out, err)
    assert_stopped_folder(h, 3, out, err, "SIGINT")


def test_a_stop_while_the_child_starts_up_still_leaves_a_summary(harness):
    harness.parent.send_signal(signal.SIGTERM)  # the child is importing or loading: no test yet
    rc, out, err = harness.finish()
    assert rc == 3, (rc, out, err)
    summary = json.loads((harness.run_dir / "summary.json").read_text())
    assert (summary["status"], summary["incomplete_reason"]) == ("incomplete", "stopped by SIGTERM")
    assert "Traceback" not in err  # a quiet exit of the child, not a KeyboardInterrupt mid-import
    _wait_for(lambda: _gone(harness.child), 5, "the child still runs")


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
        assert outcome.stopped_by == "SIGTERM"  # so a caller running several stops too
        assert signal.getsignal(signal.SIGTERM) is mine  # restored, and not called for the run's signal
        assert caught == []
    finally:
        stop.set()
        timer.join(timeout=5)
        for sig, handler in before.items():
            signal.signal(sig, handler)

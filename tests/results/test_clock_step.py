"""A wall-clock step during the test makes LoadGen's figures wrong: the harness says so.

LoadGen times with the wall clock (libstdc++'s high_resolution_clock); a step of it (NTP,
a VM's time sync) was seen here to turn a 0.5 s test into a "10.5 s" one with every latency
10 s. The step is reproduced by shifting LoadGen's own time stamps in a real run's log as
the step would have: every entry after the start of the timed test moves by the step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.results.summary import write_summary

STEP_MS = 10_000.0


def step_clock(run_dir: Path, step_ms: float) -> None:
    path = run_dir / "mlperf_log_detail.txt"
    out, stepped = [], False
    for line in path.read_text().splitlines(keepends=True):
        if '"key": "generated_query_count"' in line:
            stepped = True
        elif stepped:
            line = re.sub(r'"time_ms": ([0-9.]+)', lambda m: f'"time_ms": {float(m.group(1)) + step_ms:.6f}', line)
        out.append(line)
    path.write_text("".join(out))


def test_a_clock_step_during_the_test_makes_the_run_invalid(run_harness):
    run_dir, summary = run_harness(backend="synthetic", scenario="Offline", min_duration_s=0, min_query_count=200)
    assert summary["validity"]["harness"]["clock_ok"] is True  # the real run: both clocks agree
    assert summary["validity"]["result"] == "VALID"
    step_clock(run_dir, STEP_MS)
    stepped = write_summary(run_dir, {"status": "complete"})
    assert stepped["validity"]["harness"]["clock_ok"] is False
    assert stepped["validity"]["harness"]["result"] == "INVALID"
    assert any("clock was stepped" in r for r in stepped["validity"]["reasons"])
    assert json.loads((run_dir / "summary.json").read_text())["validity"]["harness"]["clock_ok"] is False


def test_a_step_within_the_slack_is_not_called_a_step(run_harness):
    run_dir, _ = run_harness(backend="synthetic", scenario="Offline", min_duration_s=0, min_query_count=200)
    step_clock(run_dir, 300.0)  # 0.3 s: below the 1 s slack (a test's own start-up is in it)
    assert write_summary(run_dir, {"status": "complete"})["validity"]["harness"]["clock_ok"] is True

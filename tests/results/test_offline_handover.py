"""Offline: LoadGen's rate and the harness's differ by where their clocks start.

LoadGen's Offline rate is samples / its longest latency, timed from its own stamp of the one
query; the harness's span starts in its issue callback, after the binding handed the query
over (0.5 s for 275,000 samples seen: the harness/LoadGen throughput ratio was 1.28 with
nothing said). `agreement.issue_delay_ms` is that hand-over, and it must lie between 0 and
the time from the QSL's load (LoadGen starts its clock after it) to the callback.
"""

from __future__ import annotations

import pytest

from harness.config.run_config import RunConfig
from harness.report.figures import headline
from harness.results import folder
from harness.results.records import read_records
from harness.run import runner

# stamps of one run against each other and an identity: no speed of the machine changes the verdict
pytestmark = pytest.mark.parallel


def test_the_offline_query_hand_over_is_measured_and_said(tmp_path):
    outcome = runner.run(RunConfig(backend="synthetic", scenario="Offline", max_batch=1024, min_duration_s=0,
                                   min_query_count=200_000), tmp_path)
    s = outcome.summary
    n = s["harness"]["samples"]
    assert n == 200_000 and s["harness"]["success_rate"] == 1.0
    delay_ms = s["agreement"]["issue_delay_ms"]
    columns = read_records(outcome.run_dir).columns
    loaded_ns = folder.read_json(outcome.run_dir, folder.CHILD)["qsl_loaded_ns"]
    before_callback_ms = (int(columns["issue_ns"].min()) - loaded_ns) / 1e6
    assert 0 < delay_ms <= before_callback_ms, (delay_ms, before_callback_ms)
    # LoadGen's rate is the harness's span plus the hand-over
    span_s = s["harness"]["duration_s"]
    assert abs(n / (span_s + delay_ms / 1e3) / s["loadgen"]["throughput_per_s"] - 1) < 1e-6
    said = [line for line in headline(s, None) if "query hand-over" in line]
    assert bool(said) == (abs(s["agreement"]["throughput"] - 1) > 0.10), (said, s["agreement"])
    if said:
        assert f"{delay_ms / 1e3:,.2f} s before" in said[0]

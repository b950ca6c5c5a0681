"""The `arrivals` setting and trace datasets in the run config: what they size, what they refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.run_config import build_config
from harness.errors import ConfigError


def test_arrivals_size_the_offline_query_from_their_rate():
    config = build_config(overrides=["arrivals.kind=gamma", "arrivals.rate=250", "arrivals.shape=0.5",
                                     "min_duration_s=4"])
    # LoadGen's Offline query: 1.1 x offline_expected_qps x min_duration samples, the schedule 1.1 x 4 s long
    assert config.offline_expected_qps == 250 and config.arrivals.shape == 0.5
    assert config.schedule_lag_limit_ms == 2.0
    trace = build_config(overrides=["dataset=trace:/x.jsonl"])
    assert trace.min_duration_s == 0  # a trace lasts as long as its rows: no sizing pilot


@pytest.mark.parametrize(("settings", "message"), [
    (["arrivals.rate=10", "scenario=Server"], "use scenario Offline"),
    (["arrivals.rate=10", "concurrency=4"], "set one of them"),
    (["arrivals.kind=gamma", "arrivals.rate=10"], "arrivals.shape is the gamma shape"),
    (["arrivals.rate=10", "arrivals.shape=2"], "arrivals.shape is the gamma shape"),
    (["arrivals.rate=10", "arrivals.ramp_s=5"], "a ramp needs both"),
    (["arrivals.rate=10", "dataset=trace:/x.jsonl"], "brings its own arrival times"),
    (["dataset=trace:/x.jsonl", "min_query_count=10"], "drop min_query_count"),
    (["arrivals.rate=10", "distribute.client_processes=2"], "drop distribute"),
])
def test_schedules_that_cannot_hold_are_one_line(settings: list[str], message: str):
    with pytest.raises(ConfigError) as e:
        build_config(overrides=settings)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_bad_arrivals_value_names_its_line(tmp_path: Path):
    path = tmp_path / "run.yaml"
    path.write_text("scenario: Offline\narrivals:\n  kind: bursty\n  rate: 5\n")
    with pytest.raises(ConfigError) as e:
        build_config(path)
    assert f"{path}:2" in str(e.value) and "arrivals.kind" in str(e.value)

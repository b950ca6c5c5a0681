"""Every shipped scenario file validates; quick profiles are quick, MLPerf ones follow the rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import registry
from harness.config.run_config import build_config

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))


@pytest.mark.parallel
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_scenario_file_is_valid(path):
    config = build_config(path, [], {}, registry.option_names)
    if path.name.startswith("mlperf-"):
        assert config.min_duration_s == 600
    elif not path.name.startswith("llm-"):
        assert config.min_duration_s is not None and config.min_duration_s <= 30


@pytest.mark.parallel
def test_every_scenario_has_a_quick_and_an_mlperf_profile():
    names = {p.stem for p in SCENARIOS}
    for s in ("singlestream", "multistream", "server", "offline"):
        assert s in names and f"mlperf-{s}" in names


def test_quick_offline_profile_runs_under_a_minute(run_harness):
    import time

    config = build_config(
        SCENARIOS[[p.name for p in SCENARIOS].index("offline.yaml")],
        ["backend=synthetic", "per_sample_ms=1.0", "max_batch=32", "workers=1"], {}, registry.option_names,
    )
    t0 = time.monotonic()
    _, s = run_harness(**config.model_dump())
    assert time.monotonic() - t0 < 60
    assert s["validity"]["result"] == "VALID", s["validity"]

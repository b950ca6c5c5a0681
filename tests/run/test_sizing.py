"""Offline with no offline_expected_qps is sized from a pilot and VALID the first time; the
fix an INVALID run suggests holds when applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.config.run_config import RunConfig
from harness.run import runner
from harness.run.sizing import MARGIN

# 20 us a sample in batches of 16: tens of thousands of samples a second, so LoadGen's
# default hint (1 sample/s) would issue a query over in milliseconds
FAST = dict(backend="synthetic", scenario="Offline", max_batch=16, backend_options={"per_sample_ms": 0.02})


def test_an_offline_run_with_no_hint_is_sized_from_a_pilot_and_valid(tmp_path: Path):
    outcome = runner.run(RunConfig(**FAST, min_duration_s=1.0), tmp_path)
    s = outcome.summary
    assert s["validity"]["result"] == "VALID", s["validity"]
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    sizing = manifest["sizing"]
    hint = yaml.safe_load((outcome.run_dir / "run.yaml").read_text())["offline_expected_qps"]
    assert hint == sizing["offline_expected_qps"] >= sizing["measured"] * MARGIN  # the value used, recorded
    assert sizing["pilot_s"] >= 0.25  # a first pilot that only measured start-up was run again, longer
    # LoadGen issued the query the hint asks for, and it lasted past min_duration
    assert s["harness"]["samples"] >= round(1.1 * hint * 1.0)
    assert s["loadgen"]["effective_settings"]["target_qps"] == hint
    assert s["harness"]["duration_s"] >= 1.0
    assert [p.name for p in tmp_path.iterdir()] == [outcome.run_dir.name]  # the pilots leave no folder
    # repeating from run.yaml needs no pilot
    again = runner.run(RunConfig(**yaml.safe_load((outcome.run_dir / "run.yaml").read_text())), tmp_path / "again")
    assert "sizing" not in json.loads((again.run_dir / "manifest.json").read_text())


@pytest.mark.parallel
def test_a_given_hint_or_zero_duration_is_left_alone(tmp_path: Path):
    given = runner.run(RunConfig(**FAST, min_duration_s=0.2, offline_expected_qps=5000), tmp_path)
    assert "sizing" not in json.loads((given.run_dir / "manifest.json").read_text())
    counted = runner.run(RunConfig(**FAST, min_duration_s=0, min_query_count=300), tmp_path)
    assert "sizing" not in json.loads((counted.run_dir / "manifest.json").read_text())
    assert counted.summary["harness"]["samples"] == 300


def test_the_fix_an_invalid_offline_run_suggests_holds_when_applied(tmp_path: Path):
    short = runner.run(RunConfig(**FAST, min_duration_s=1.0, offline_expected_qps=2000), tmp_path)
    assert short.summary["validity"]["result"] == "INVALID"
    (fix,) = [f for f in short.summary["validity"]["fixes"] if "offline_expected_qps" in f]
    value = float(fix.split("≈ ")[1].split()[0].replace(",", ""))
    fixed = runner.run(RunConfig(**FAST, min_duration_s=1.0, offline_expected_qps=value), tmp_path)
    assert fixed.summary["validity"]["result"] == "VALID", (fix, fixed.summary["validity"])


def test_a_singlestream_run_with_no_expected_latency_is_sized_and_valid(tmp_path: Path):
    # 2 ms a query: LoadGen's default expected latency would pre-generate too few queries
    outcome = runner.run(RunConfig(backend="synthetic", scenario="SingleStream", min_duration_s=1.0,
                                   backend_options={"service_time_ms": 2.0}), tmp_path)
    s = outcome.summary
    assert s["validity"]["result"] == "VALID", s["validity"]
    sizing = json.loads((outcome.run_dir / "manifest.json").read_text())["sizing"]
    assert 2.0 <= sizing["measured"] <= 3.0  # the pilot's p50, ms
    assert sizing["single_stream_expected_latency_ms"] <= sizing["measured"] / MARGIN
    assert yaml.safe_load((outcome.run_dir / "run.yaml").read_text())["single_stream_expected_latency_ms"] == \
        sizing["single_stream_expected_latency_ms"]


def test_a_timed_run_that_outruns_its_pilot_is_sized_again_from_its_own_rate(tmp_path: Path, monkeypatch):
    """A burst that slows the pilot more than MARGIN covers (a timed run at 604,971 samples/s
    ran out of a query sized from its pilot, in CI) is injected as a margin of 0.25: the
    first timed query then lasts 1.1 x 0.25 of min_duration at the pilot's rate, and runs
    out. That try is the better pilot: the run is sized again from its rate, once, and the
    user gets the VALID run and one folder."""
    import re

    from rich.console import Console

    from harness.report.terminal import render
    from harness.results.explain import FIX_MARGIN

    monkeypatch.setattr("harness.run.sizing.MARGIN", 0.25)
    outcome = runner.run(RunConfig(**FAST, min_duration_s=1.0), tmp_path)
    s = outcome.summary
    assert s["validity"]["result"] == "VALID", s["validity"]
    sizing = json.loads((outcome.run_dir / "manifest.json").read_text())["sizing"]
    first = sizing["first_try"]
    assert first["offline_expected_qps"] < first["pilot_measured"] * 0.25 * 1.1  # the short hint, from the pilot
    assert first["measured"] > 0  # the rate of the try that ran out
    hint = yaml.safe_load((outcome.run_dir / "run.yaml").read_text())["offline_expected_qps"]
    assert hint == sizing["offline_expected_qps"] >= first["measured"] * FIX_MARGIN
    assert sizing["measured"] == first["measured"] and sizing["margin"] == FIX_MARGIN
    assert s["loadgen"]["effective_settings"]["target_qps"] == hint and s["harness"]["duration_s"] >= 1.0
    assert [p.name for p in tmp_path.iterdir()] == [outcome.run_dir.name]  # the try went as pilots go
    console = Console(width=80, record=True, color_system=None)
    render(s, console, str(outcome.run_dir))
    text = console.export_text()
    assert re.search(rf"offline_expected_qps {hint:,g} = try [\d,]+/s x 1\.5 \(none given\)", text), text
    assert f"(a first try at {first['offline_expected_qps']:,g}, from a pilot, ran out before min_duration)" in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80


@pytest.mark.parallel
def test_a_run_that_ran_out_on_the_users_own_hint_is_not_sized_again(tmp_path: Path):
    """The user's offline_expected_qps is theirs to change: the INVALID run stays, its fix says how."""
    from harness.run.sizing import ran_out_only, resize

    short = runner.run(RunConfig(**FAST, min_duration_s=0.5, offline_expected_qps=2000), tmp_path)
    assert short.summary["validity"]["result"] == "INVALID" and ran_out_only(short.summary)
    assert "sizing" not in json.loads((short.run_dir / "manifest.json").read_text())
    assert len(list(tmp_path.iterdir())) == 1
    config = RunConfig(**FAST, min_duration_s=0.5, offline_expected_qps=2000)
    assert resize(config, None, short.summary) is None  # no sizing: the hint was the user's
    # had the harness chosen it, the try's own rate sizes it again, and only once
    again, sizing = resize(config, {"offline_expected_qps": 2000, "measured": 1500, "margin": MARGIN}, short.summary)
    assert again.offline_expected_qps == sizing["offline_expected_qps"] > 2000
    assert sizing["first_try"] == {"offline_expected_qps": 2000, "measured": short.summary["harness"]["throughput_per_s"],
                                   "pilot_measured": 1500}
    assert resize(again, sizing, short.summary) is None


def test_a_singlestream_run_whose_pilot_hint_ran_out_is_sized_again_from_its_p50(tmp_path: Path, monkeypatch):
    """The same burst for SingleStream: a margin of 0.25 makes the expected latency 4 x the
    pilot's p50 of a 2 ms query, so LoadGen pre-generates a quarter of the queries
    min_duration needs. The try's own p50 / 1.5 sizes it again."""
    from harness.results.explain import FIX_MARGIN

    monkeypatch.setattr("harness.run.sizing.MARGIN", 0.25)
    outcome = runner.run(RunConfig(backend="synthetic", scenario="SingleStream", min_duration_s=1.0,
                                   backend_options={"service_time_ms": 2.0}), tmp_path)
    assert outcome.summary["validity"]["result"] == "VALID", outcome.summary["validity"]
    sizing = json.loads((outcome.run_dir / "manifest.json").read_text())["sizing"]
    first = sizing["first_try"]
    assert first["single_stream_expected_latency_ms"] >= first["pilot_measured"] / 0.25 * 0.9  # 4 x, two figures
    assert 2.0 <= first["measured"] == sizing["measured"]  # the try's own p50, no faster than its 2 ms
    assert sizing["single_stream_expected_latency_ms"] <= first["measured"] / FIX_MARGIN
    assert [p.name for p in tmp_path.iterdir()] == [outcome.run_dir.name]

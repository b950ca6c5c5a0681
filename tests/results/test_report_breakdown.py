"""Stages partition each request exactly; the dominant stage and achieved rate are right."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.analysis.run_data import load_run
from harness.config.run_config import RunConfig
from harness.results.breakdown import STAGES, aggregate, rates, stage_times_ns, time_series
from harness.results.records import read_records
from harness.run import runner
from tests.support.report_runs import server_run_with_failures, token_run


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Path:
    return server_run_with_failures(tmp_path_factory.mktemp("breakdown"))


@pytest.mark.parallel
def test_stages_sum_to_end_to_end_per_request(server):
    cols = read_records(server).columns
    t = stage_times_ns(cols)
    assert np.array_equal(t["queue"] + t["service"] + t["generation"], cols["complete_ns"] - cols["issue_ns"])
    assert (t["generation"] == 0).all()  # a tensor backend streams nothing
    assert all((t[s] >= 0).all() for s in STAGES)


@pytest.mark.parallel
def test_aggregate_shares_sum_to_one_and_match_the_summary(server):
    data = load_run(server)
    bd, ours = data.breakdown, data.summary["harness"]
    assert bd["requests"] == ours["succeeded"]
    total = sum(bd["stages"][s]["mean_ms"] for s in STAGES)
    assert total == pytest.approx(bd["e2e"]["mean_ms"], rel=1e-9)
    assert sum(bd["stages"][s]["share"] for s in STAGES) == pytest.approx(1.0)
    # The same records, the same definition as summary.json's queue/service figures.
    assert bd["stages"]["queue"]["mean_ms"] == pytest.approx(ours["queue_ms"]["mean"])
    assert bd["stages"]["service"]["mean_ms"] == pytest.approx(ours["service_ms"]["mean"])
    assert bd["e2e"]["p99_ms"] == pytest.approx(ours["latency_ms"]["p99"])
    # 2 ms of sleep per request: service time is at least that.
    assert bd["stages"]["service"]["p50_ms"] >= 2.0


@pytest.mark.parallel
def test_token_records_split_service_from_generation(server, tmp_path):
    run = token_run(server, tmp_path / "tok")
    cols = read_records(run).columns
    bd = aggregate(cols)
    ok = cols["status"] == "ok"
    gen = (cols["complete_ns"] - cols["first_token_ns"])[ok]
    assert bd["service_ends_at"] == "first token or first byte"
    assert bd["stages"]["generation"]["mean_ms"] == pytest.approx(gen.mean() / 1e6)
    total = sum(bd["stages"][s]["mean_ms"] for s in STAGES)
    assert total == pytest.approx(bd["e2e"]["mean_ms"], rel=1e-9)


def test_saturated_server_shows_queue_dominating_and_rate_shortfall(tmp_path):
    # One worker, 5 ms per sample: at most 200/s served, 400/s offered.
    run = runner.run(
        RunConfig(
            backend="synthetic",
            scenario="Server",
            backend_options={"service_time_ms": 5.0},
            workers=1,
            max_batch=1,  # one sample a call: 400/s against 5 ms saturates
            target_qps=400,
            min_duration_s=1.0,
            min_query_count=100,
        ),
        tmp_path,
    ).run_dir
    data = load_run(run)
    assert data.breakdown["dominant"] == "queue"
    r = data.rates
    assert r["target_per_s"] == 400
    assert r["saturated"] is True
    assert r["completed_per_s"] <= 200 * 1.02  # 1 worker x 1 / 5 ms
    assert r["achieved_ratio"] == pytest.approx(r["completed_per_s"] / 400)
    assert any("saturated" in n for n in r["notes"])


def test_rates_of_a_keeping_up_server(server):
    r = load_run(server).rates
    assert r["target_per_s"] == 300
    assert r["saturated"] is False
    assert 0.9 * 300 <= r["completed_per_s"] <= 1.1 * 300


@pytest.mark.parallel
def test_rates_without_a_target():
    summary = {"run": {"scenario": "SingleStream"}, "loadgen": {}, "harness": {"samples": 10, "duration_s": 2.0,
               "throughput_per_s": 4.5}}
    r = rates(summary)
    assert r["target_per_s"] is None and r["saturated"] is None
    assert r["completed_per_s"] == 5.0


@pytest.mark.parallel
def test_time_series_counts_every_completion(server):
    cols = read_records(server).columns
    ts = time_series(cols, bins=20)
    width = ts["edges_s"][1] - ts["edges_s"][0]
    ok = int((cols["status"] == "ok").sum())
    assert round(ts["ok_per_s"].sum() * width) == ok
    assert round(ts["failed_per_s"].sum() * width) == len(cols["status"]) - ok
    assert round(ts["issued_per_s"].sum() * width) == len(cols["status"])


@pytest.mark.parallel
def test_breakdown_from_the_summary_equals_the_one_from_records(server):
    # Non-streaming runs take the breakdown from summary.json, sparing a re-read of records.parquet.
    from harness.results.breakdown import aggregate_from_summary

    data = load_run(server)
    from_records = aggregate(read_records(server).columns)
    from_summary = aggregate_from_summary(data.summary)
    assert from_summary["dominant"] == from_records["dominant"]
    assert from_summary["requests"] == from_records["requests"]
    for stage in STAGES:
        for k in ("mean_ms", "p50_ms", "p99_ms", "share"):
            assert from_summary["stages"][stage][k] == pytest.approx(from_records["stages"][stage][k], abs=1e-9)
    assert from_summary["e2e"] == pytest.approx(from_records["e2e"])

"""Cost arithmetic on hand-computed cases, price-sheet validation, and cost of real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.analysis.cost import CostSheet, Usage, compute_cost, load_sheet, parse_sheet
from harness.analysis.run_data import load_run
from harness.cli import main
from harness.config.run_config import RunConfig
from harness.errors import ConfigError
from harness.results.records import read_records
from harness.run import runner


def usage(**kw) -> Usage:
    base = dict(
        requests=100,
        succeeded=80,
        run_time_s=100.0,
        input_tokens=0,
        cached_input_tokens=0,
        output_tokens=0,
        failed_input_tokens=0,
        failed_output_tokens=0,
        tool_calls=None,
        success_criterion="status ok",
    )
    return Usage(**(base | kw))


def test_per_request_and_per_successful_task_side_by_side():
    # device: 3.6/h x 1 x 100 s = 0.1; fees: 100 x 0.001 = 0.1; total 0.2.
    c = compute_cost(CostSheet(currency="USD", device_hourly=3.6, per_request=0.001), usage())
    assert c["total"] == pytest.approx(0.2)
    assert c["per_request"] == pytest.approx(0.002)
    assert c["per_1k_requests"] == pytest.approx(2.0)
    # 80 of 100 succeeded: each success carries a quarter more than a request.
    assert c["per_successful_task"] == pytest.approx(0.0025)
    # Failed attempts: 20 fees (0.02) + 20% of device time (0.02).
    assert c["failed_attempts_total"] == pytest.approx(0.04)
    parts = c["per_successful_task_parts"]
    assert parts["serving"] == pytest.approx(0.002)
    assert parts["failed_attempts"] == pytest.approx(0.0005)
    assert parts["serving"] + parts["failed_attempts"] + parts["review"] == pytest.approx(c["per_successful_task"])
    assert {i["item"]: i["amount"] for i in c["items"]} == pytest.approx({"device": 0.1, "requests": 0.1})
    assert c["per_request_includes"] == ["device", "requests"]
    assert c["per_successful_task_includes"] == ["device", "requests", "failed and retried attempts"]
    assert c["per_1m_output_tokens"] is None  # no tokens: no per-token figure, not zero


def test_energy_is_priced_from_the_measured_kwh_and_never_assumed():
    # 7.2 MJ = 2 kWh at 0.30 a kWh: 0.60; 20 of 100 requests failed, so a fifth of it was wasted
    c = compute_cost(CostSheet(energy_per_kwh=0.3), usage(energy_kwh=7.2e6 / 3.6e6))
    assert {i["item"]: i["amount"] for i in c["items"]} == pytest.approx({"energy": 0.6})
    assert c["failed_attempts_total"] == pytest.approx(0.12)
    assert c["per_successful_task"] == pytest.approx(0.6 / 80)
    with pytest.raises(ConfigError, match="measured no energy"):
        compute_cost(CostSheet(energy_per_kwh=0.3), usage())  # not measured: an error, never a zero
    assert compute_cost(CostSheet(device_hourly=1.0), usage())["items"][0]["item"] == "device"  # unpriced: absent


def test_no_failures_makes_both_figures_equal():
    c = compute_cost(CostSheet(device_hourly=3.6, per_request=0.001), usage(succeeded=100))
    assert c["per_request"] == pytest.approx(c["per_successful_task"]) == pytest.approx(0.002)
    assert c["failed_attempts_total"] == 0
    assert c["currency"] == "cost unit"


def test_token_prices_split_cached_from_uncached_input():
    c = compute_cost(
        CostSheet(input_per_1m_tokens=0.15, cached_input_per_1m_tokens=0.075, output_per_1m_tokens=0.6),
        usage(succeeded=100, input_tokens=1_000_000, cached_input_tokens=200_000, output_tokens=500_000),
    )
    items = {i["item"]: i for i in c["items"]}
    assert items["input_tokens"]["quantity"] == 800_000  # prompt counts include the cached ones
    assert items["input_tokens"]["amount"] == pytest.approx(0.12)
    assert items["cached_input_tokens"]["amount"] == pytest.approx(0.015)
    assert items["output_tokens"]["amount"] == pytest.approx(0.3)
    assert c["total"] == pytest.approx(0.435)
    assert c["per_1m_output_tokens"] == pytest.approx(0.87)
    assert c["per_request"] == pytest.approx(0.00435)


def test_failed_requests_tokens_count_as_failed_attempts():
    c = compute_cost(
        CostSheet(output_per_1m_tokens=1.0),
        usage(output_tokens=1_000_000, failed_output_tokens=250_000),
    )
    assert c["total"] == pytest.approx(1.0)
    assert c["failed_attempts_total"] == pytest.approx(0.25)
    assert c["per_successful_task"] == pytest.approx(1.0 / 80)


def test_retries_are_paid_requests():
    # 10 tasks, all succeeded, but the backend resent 5 attempts: 15 fees.
    with_retries = compute_cost(CostSheet(per_request=0.01), usage(requests=10, succeeded=10, retries=5))
    assert with_retries["items"][0]["quantity"] == 15
    assert with_retries["total"] == pytest.approx(0.15)
    assert with_retries["per_request"] == pytest.approx(0.015)
    assert with_retries["per_successful_task"] == pytest.approx(0.015)
    assert with_retries["failed_attempts_total"] == pytest.approx(0.05)
    without = compute_cost(CostSheet(per_request=0.01), usage(requests=10, succeeded=10))
    assert without["total"] == pytest.approx(0.10)
    assert without["per_successful_task"] == pytest.approx(0.01)


def test_review_is_per_successful_task_and_not_in_per_request():
    sheet = CostSheet(device_hourly=3.6, per_request=0.001, review_per_task=0.5)
    c = compute_cost(sheet, usage())
    assert c["review_total"] == pytest.approx(40.0)  # 80 successful tasks x 0.5
    assert c["total"] == pytest.approx(40.2)
    assert c["per_request"] == pytest.approx(0.002)  # review is not part of sending a request
    assert c["per_successful_task"] == pytest.approx(40.2 / 80)
    assert c["per_successful_task_parts"]["review"] == pytest.approx(0.5)
    assert c["per_successful_task_includes"][-1] == "review"
    # Review as minutes x hourly rate: 3 min at 20/h = 1.0 per task.
    by_time = compute_cost(CostSheet(review_minutes_per_task=3, reviewer_hourly=20), usage())
    assert by_time["review_total"] == pytest.approx(80.0)
    assert by_time["per_request"] == 0.0
    assert by_time["per_successful_task"] == pytest.approx(1.0)


def test_device_share_and_device_count():
    c = compute_cost(CostSheet(device_hourly=2.0, devices=4, device_share=0.25), usage(run_time_s=1800))
    # 4 devices x a quarter of their time x 0.5 h x 2.0 = 1.0
    assert c["total"] == pytest.approx(1.0)
    assert c["items"][0]["quantity"] == pytest.approx(0.5)


def test_tool_calls_reported_or_assumed():
    assumed = compute_cost(CostSheet(per_tool_call=0.002, tool_calls_per_request=2), usage())
    assert assumed["total"] == pytest.approx(0.4)  # 100 requests x 2 calls x 0.002
    assert assumed["usage"]["tool_calls_assumed"] is True
    reported = compute_cost(CostSheet(per_tool_call=0.002, tool_calls_per_request=2), usage(tool_calls=50))
    assert reported["total"] == pytest.approx(0.1)
    assert reported["usage"]["tool_calls_assumed"] is False


def test_no_successful_task_has_no_per_task_cost():
    c = compute_cost(CostSheet(per_request=0.01), usage(succeeded=0))
    assert c["per_successful_task"] is None
    assert c["per_request"] == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"device_hourlly": 2.5}, "'device_hourlly' (did you mean 'device_hourly'?)"),
        ({"output_per_1m_tokens": -0.6}, "'output_per_1m_tokens'"),
        ({"devices": -1}, "'devices'"),
        ({"device_share": 1.5}, "'device_share'"),
        ({"review_per_task": 1, "review_minutes_per_task": 2, "reviewer_hourly": 30}, "review_per_task"),
        ({"review_minutes_per_task": 2}, "reviewer_hourly"),
    ],
)
def test_bad_price_sheets_name_the_key(data, named):
    with pytest.raises(ConfigError, match="cost.yaml") as e:
        parse_sheet(data, "cost.yaml")
    assert named in str(e.value)


def test_sheet_from_yaml_file(tmp_path: Path):
    path = tmp_path / "cost.yaml"
    path.write_text("currency: credits\ndevice_hourly: 2.5\ndevices: 1\nper_request: 0.0\n")
    sheet = load_sheet(path)
    assert (sheet.currency, sheet.device_hourly, sheet.devices) == ("credits", 2.5, 1)
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="flat mapping"):
        load_sheet(path)
    with pytest.raises(ConfigError, match="cannot read cost file"):
        load_sheet(tmp_path / "missing.yaml")


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory) -> Path:
    outcome = runner.run(
        RunConfig(
            backend="synthetic",
            scenario="SingleStream",
            backend_options={"service_time_ms": 1.0, "fail_every": 5},
            min_duration_s=0.3,
            single_stream_expected_latency_ms=1.0,
            min_query_count=100,
            cost={"currency": "EUR", "per_request": 0.001},
        ),
        tmp_path_factory.mktemp("cost"),
    )
    return outcome.run_dir


def test_harness_cost_prices_a_real_run_with_failures(failing_run: Path, tmp_path: Path):
    cols = read_records(failing_run).columns
    n, ok = len(cols["status"]), int((cols["status"] == "ok").sum())
    assert n - ok == n // 5  # one call in five raised
    summary = json.loads((failing_run / "summary.json").read_text())
    sheet = tmp_path / "cost.yaml"
    sheet.write_text("currency: USD\ndevice_hourly: 36.0\nper_request: 0.01\n")
    result = CliRunner().invoke(main, ["cost", str(failing_run), "--cost", str(sheet)])
    assert result.exit_code == 0, result.output
    cost = json.loads((failing_run / "cost.json").read_text())
    device = 36.0 * summary["harness"]["duration_s"] / 3600
    assert cost["total"] == pytest.approx(device + 0.01 * n)
    assert cost["per_request"] == pytest.approx((device + 0.01 * n) / n)
    assert cost["per_successful_task"] == pytest.approx((device + 0.01 * n) / ok)
    assert cost["per_successful_task"] > cost["per_request"]
    assert "per successful task" in result.output and "USD" in result.output


def test_cost_section_of_the_config_is_priced_from_the_folder(failing_run: Path):
    (failing_run / "cost.json").unlink(missing_ok=True)
    data = load_run(failing_run)
    n = len(read_records(failing_run).columns["status"])
    assert data.cost is not None and data.cost["currency"] == "EUR"
    assert data.cost["total"] == pytest.approx(0.001 * n)


def test_harness_cost_rejects_unknown_key_before_touching_the_folder(failing_run: Path, tmp_path: Path):
    sheet = tmp_path / "cost.yaml"
    sheet.write_text("per_reqest: 0.01\n")
    result = CliRunner().invoke(main, ["cost", str(failing_run), "--cost", str(sheet)])
    assert result.exit_code == 2
    assert "unknown cost key 'per_reqest'" in result.output

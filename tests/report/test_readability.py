"""Readability of the views (#16): figures shown in units and ranges that make sense."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from harness.report.compare_view import render_aggregate
from harness.results.stats import over_runs


@pytest.mark.parallel
def test_interval_of_a_positive_figure_never_goes_below_zero():
    s = over_runs([0.1, 0.1, 9.0])
    assert s["ci95"] is None or s["ci95"][0] >= 0
    assert s["ci95_note"] and "too few runs" in s["ci95_note"]
    # A tight sample keeps its t interval of the mean.
    tight = over_runs([10.0, 10.5, 11.0])
    assert tight["ci95"] is not None and 0 <= tight["ci95"][0] <= tight["mean"] <= tight["ci95"][1]
    # A figure that can be negative (a difference) keeps its interval across zero.
    assert over_runs([-1.0, 0.5, 2.0])["ci95"][0] < 0


@pytest.mark.parallel
def test_aggregate_view_says_too_few_runs_instead_of_a_negative_bound(tmp_path: Path):
    data = {"n": 3, "metrics": {"latency_p50": over_runs([0.1, 0.1, 9.0])}, "warnings": []}
    console = Console(width=100, record=True, color_system=None)
    render_aggregate(data, console, tmp_path)
    text = console.export_text()
    assert "too few runs" in text and "-0." not in text and "−" not in text


@pytest.mark.parallel
def test_progress_line_shows_slow_rates_and_both_stopping_conditions():
    from harness.child.main import Progress

    line = Progress.line(12.3, 5, 0.148, 60, 100)
    assert "0.148/s" in line and "0/s" not in line.replace("0.148/s", "")
    assert "60 s min" in line and "48 s left" in line and "5 / 100 queries" in line
    # Past the minimum duration, the line says LoadGen now waits for the query count.
    late = Progress.line(75.0, 9, 0.148, 60, 24576)
    assert "min met" in late and "waiting for min_query_count" in late and "46.1 h" in late
    assert "met" in Progress.line(75.0, 30000, 1234.5, 60, 24576).split("|")[1]
    assert [Progress.rate(r) for r in (0.148, 0.15, 12.34, 456.7, 1234.5)] == ["0.148", "0.150", "12.3", "457", "1,234"]


@pytest.mark.parallel
def test_low_rates_keep_three_significant_figures():
    from harness.report import figures as fig

    rows = dict(fig.rate_table({"target_per_s": 0.15, "offered_per_s": 0.14, "completed_per_s": 0.148,
                                "succeeded_per_s": 1234.5, "achieved_ratio": None})[1])  # fmt: skip
    assert rows["target (samples/s)"] == "0.150"
    assert rows["offered by LoadGen (samples/s)"] == "0.140" and rows["completed (samples/s)"] == "0.148"
    assert rows["succeeded (samples/s)"] == "1,234"
    assert [fig.rate(v) for v in (None, 0.0, 12.34, 456.7)] == ["—", "0", "12.3", "457"]


@pytest.mark.parallel
def test_every_default_view_fits_80_columns_with_no_cut_figure_and_no_none_row(tmp_path: Path):
    """#16 item 7: an Offline, a Server and an LLM run rendered on an 80-column console."""
    import re

    from harness.config.run_config import RunConfig
    from harness.report.terminal import render
    from harness.run import runner
    from tests.support.report_runs import http_token_run

    runs = [
        runner.run(RunConfig(backend="synthetic", scenario="Offline", max_batch=16, min_duration_s=0.3,
                             backend_options={"per_sample_ms": 0.05}), tmp_path).run_dir,
        runner.run(RunConfig(backend="synthetic", scenario="Server", target_qps=200, min_duration_s=0.5,
                             min_query_count=100, backend_options={"service_time_ms": 1.0}), tmp_path).run_dir,
        http_token_run(tmp_path / "llm"),
    ]
    import json

    for run_dir in runs:
        console = Console(width=80, record=True, color_system=None)
        render(json.loads((run_dir / "summary.json").read_text()), console, str(run_dir))
        text = console.export_text()
        for line in text.splitlines():
            assert len(line.rstrip()) <= 80, line
            assert not re.search(r"\d…|…\d", line), f"a figure was cut: {line!r}"
            assert not re.search(r"\bNone\b", line), f"a row with no data: {line!r}"
        if (run_dir / "tokens.jsonl").exists():
            # the LLM view leads with what such a run is about
            assert "TTFT p50/p99" in text.splitlines()[2] and "TPOT" in text and "ITL" in text and "E2E" in text
            assert "output tokens/s, total" in text


def test_the_llm_view_shows_ttft_from_dispatch_when_requests_wait_for_a_slot(tmp_path: Path):
    """#16 item 5: Offline with max_in_flight 2 queues 10 of 12 requests in the client; TTFT
    from issue then counts that wait, TTFT from dispatch is the server's 40 ms."""
    import json

    from harness.config.run_config import RunConfig
    from harness.report.terminal import render
    from harness.run import runner
    from tests.support.http_servers import ServerThread, Timing, openai_app

    with ServerThread(openai_app(Timing(ttft_ms=40, tpot_ms=2, tokens=4))) as srv:
        run_dir = runner.run(RunConfig(backend="http", scenario="Offline", dataset="synthetic:isl=8,osl=4,n=12",
                                       backend_options={"protocol": "openai-chat", "url": srv.url + "/v1",
                                                        "max_in_flight": 2},
                                       min_duration_s=0, min_query_count=12), tmp_path).run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    console = Console(width=80, record=True, color_system=None)
    render(summary, console, str(run_dir))
    rows = {line.split("  ")[0].strip(): line for line in console.export_text().splitlines() if line.startswith("TTFT")}
    assert "TTFT from dispatch" in rows, rows
    p50 = float(rows["TTFT from dispatch"].split()[3])
    assert 40 <= p50 < 40 * 1.3  # the server's time to first token
    assert summary["tokens"]["ttft_ms"]["p50"] > 2 * p50  # from issue: mostly the wait for a slot


@pytest.mark.parallel
def test_the_reasoning_split_ttfo_and_tool_calls_show_in_every_view(tmp_path: Path):
    """A reasoning model answering with text or a tool call: the terminal (80 columns), the
    Markdown and the HTML report show TTFO, the reasoning/answer split, the server/client
    reasoning mismatch and the tool calls, each figure the summary's."""
    import json

    from click.testing import CliRunner

    from harness.cli import main
    from harness.config.run_config import RunConfig
    from harness.report.terminal import render
    from harness.run import runner
    from tests.support.http_servers import ServerThread, Timing, openai_app, write_prompts

    prompts = write_prompts(tmp_path / "prompts.jsonl", ["@tool_call", "@ok", "@ok", "@tool_call"])
    timing = Timing(ttft_ms=20, tpot_ms=2, tokens=6, reasoning_tokens=10, reasoning_ms=40, reasoning_usage_extra=1)
    with ServerThread(openai_app(timing)) as srv:
        run_dir = runner.run(RunConfig(backend="http", scenario="Offline", dataset=str(prompts),
                                       backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                                       min_duration_s=0, min_query_count=8), tmp_path).run_dir
    tok = json.loads((run_dir / "summary.json").read_text())["tokens"]
    rs, calls = tok["reasoning"], tok["tool_calls"]
    console = Console(width=80, record=True, color_system=None)
    render(json.loads((run_dir / "summary.json").read_text()), console, str(run_dir))
    text = console.export_text()
    assert all(len(line.rstrip()) <= 80 for line in text.splitlines()), text
    rows = {line[:34].strip(): line[34:].strip() for line in text.splitlines()}
    assert rows["reasoning / answer tokens"].startswith(f"{rs['reasoning_tokens']:,} / {rs['answer_tokens']:,}")
    n = tok["requests"]
    assert rows["server/client reasoning differ"] == f"{n} of {n} requests (x{11 / 10:.3f})"
    assert rows["tool calls"].startswith(f"{calls:,} in {tok['tool_call_requests']:,} requests, {tok['tool_call_tokens']:,} tokens")
    ttfo = next(line for line in text.splitlines() if line.startswith("TTFO (answer)"))
    assert float(ttfo.split()[2].replace(",", "")) == round(tok["ttfo_ms"]["p50"], 3)
    for fmt in ("md", "html"):
        out = tmp_path / f"report.{fmt}"
        assert CliRunner().invoke(main, ["report", str(run_dir), "--format", fmt, "-o", str(out)]).exit_code == 0
        page = out.read_text()
        # the same named rows as the terminal's (one source: figures.llm_tables), no raw keys
        for name in ("TTFO (answer)", "reasoning time", "reasoning / answer tokens", "server/client reasoning differ",
                     "tool calls"):
            assert name in page, (fmt, name)
        assert "ttfo_ms" not in page and "reasoning_mismatch" not in page

"""Every renderer on a run with failures and on a token run; the HTML page opens offline."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from harness.analysis.run_data import load_run
from harness.cli import main
from harness.report import write_report
from harness.report.terminal import render
from harness.results.folder import load_summary
from tests.support.report_runs import http_token_run, server_run_with_failures, token_run

COST = "currency: USD\ndevice_hourly: 2.5\ndevices: 1\nper_request: 0.001\noutput_per_1m_tokens: 0.6\nreview_per_task: 0.01\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("render")
    server = server_run_with_failures(root)
    runs = {"failures": server, "tokens": token_run(server, root / "tokens"), "http": http_token_run(root)}
    sheet = root / "cost.yaml"
    sheet.write_text(COST)
    for run in runs.values():
        result = CliRunner().invoke(main, ["cost", str(run), "--cost", str(sheet)])
        assert result.exit_code == 0, result.output
    return runs


def _terminal(run: Path, details: bool = False) -> str:
    buf = io.StringIO()
    render(load_summary(run), Console(file=buf, width=200, color_system=None), str(run), details=details)
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["failures", "tokens", "http"])
def test_terminal_verdict_first_then_breakdown_and_cost(runs, kind):
    text = _terminal(runs[kind])
    data = load_run(runs[kind])
    first = text.splitlines()[0]
    assert first.startswith(data.summary["validity"]["result"])
    ours = data.summary["harness"]
    assert f"success {ours['success_rate'] * 100:.2f}% ({ours['succeeded']:,} of {ours['samples']:,})" in text
    if ours["failed"]:
        assert "failures: " + ", ".join(f"{k} {v}" for k, v in ours["failures_by_reason"].items()) in text
    else:
        assert "failures:" not in text
    assert f"{data.breakdown['dominant']} ◀ dominant" in text
    t = data.summary["timings_s"]  # setup outside LoadGen's timing is shown, not hidden
    assert f"setup before LoadGen started: load {t['load_s']:.2f} s, warm-up {t['warmup_s']:.2f} s" in text
    assert "per successful task" in text and "per request" in text
    assert f"{data.summary['harness']['latency_ms']['p99']:.3f}" in text
    if kind != "failures":
        # the LLM view names its rows in words, --details too
        assert "TTFT " in text and f"{data.summary['tokens']['ttft_ms']['p50']:.3f}" in text
        details = _terminal(runs[kind], details=True)
        assert "TTFT bound" not in text and f"{data.summary['tokens']['ttft_ms']['p50']:.3f}" in details
        assert ("TTFT from dispatch" in details) == (kind == "http")  # the hand-built section has none
    assert ("goodput" in text) == (kind == "tokens")
    if kind == "http":
        # 10 ms to the first token, then 11 tokens x 2 ms: generation dominates.
        assert "generation ◀ dominant" in text
        assert "TTFT (LoadGen)" in text and "TTFT bound (LoadGen)" in _terminal(runs[kind], details=True)


@pytest.mark.parallel
@pytest.mark.parametrize("kind", ["failures", "tokens", "http"])
def test_markdown_has_the_tables(runs, kind):
    text = write_report(runs[kind], "md")
    data = load_run(runs[kind])
    assert text.startswith(f"## **{data.summary['validity']['result']}")
    for heading in ("### Throughput", "### Latency", "### Validity", "### Reliability", "### Where the time went", "### Cost (USD)"):
        assert heading in text
    assert (f"| failed: RuntimeError | {data.summary['harness']['failed']} |" in text) == (kind != "http")
    assert f"| latency p99.9 (ms) | {data.summary['loadgen']['latency_ms']['p99_9']:.3f} |" in text
    assert ("### Tokens" in text) == (kind != "failures")
    assert "![" not in text  # no images needed in a PR comment


@pytest.mark.parallel
@pytest.mark.parametrize("kind", ["failures", "tokens", "http"])
def test_html_is_self_contained_with_plots(runs, kind, tmp_path):
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(runs[kind]), "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    captions = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', page)
    expected = ["latency CDF", "latency histogram", "latency over time", "throughput over time", "queue vs service breakdown"]
    if kind == "tokens":  # lengths vary; no chunk times were kept, so no ITL
        expected += ["TTFT distribution", "TTFT vs input length", "TPOT vs output length"]
    if kind == "http":  # every request 32 tokens in, 12 out: distributions, not vertical strips
        expected += ["TTFT distribution", "ITL distribution", "TPOT distribution"]
        assert "every request had 32 input tokens: no TTFT vs input length plot" in page
    assert captions == expected
    # Offline: nothing is fetched. The only attribute that loads anything is an inline image.
    assert not re.search(r"<(script|link|iframe|object|embed)\b", page)
    assert not re.search(r"url\(", page)
    assert re.findall(r"\b(?:src|href)=\"([a-z]+):", page) == ["data"] * len(expected)
    if kind == "http":
        # The server's URL is part of the config, shown as text, never loaded.
        assert all(m.start() > page.index("<h2>config (run.yaml)</h2>") for m in re.finditer("http://", page))
    else:
        assert "http://" not in page and "https://" not in page
    for section in ("config (run.yaml)", "system", "versions", "LoadGen effective settings"):
        assert f"<h2>{section}</h2>" in page
    assert "mlcommons-loadgen" in page and ("fail_every: 25" in page) == (kind != "http")


@pytest.mark.parallel
def test_html_default_path_is_in_the_results_folder(runs):
    result = CliRunner().invoke(main, ["report", str(runs["failures"]), "--format", "html"])
    assert result.exit_code == 0, result.output
    assert (runs["failures"] / "report.html").stat().st_size > 10_000


@pytest.mark.parallel
@pytest.mark.parametrize("kind", ["failures", "tokens", "http"])
def test_json_report_carries_summary_breakdown_rates_and_cost(runs, kind):
    doc = json.loads(write_report(runs[kind], "json"))
    assert doc["summary"] == load_summary(runs[kind])
    assert doc["breakdown"]["dominant"] in ("queue", "service", "generation")
    assert doc["rates"]["target_per_s"] == (50 if kind == "http" else 300)
    assert doc["cost"]["total"] == pytest.approx(sum(i["amount"] for i in doc["cost"]["items"]))
    if kind == "tokens":
        # Token totals come from the records; the hand-built tokens section states the same.
        assert doc["cost"]["usage"]["output_tokens"] == doc["summary"]["tokens"]["output_tokens"]
        assert doc["cost"]["per_successful_task"] * doc["summary"]["tokens"]["goodput"]["requests"] == pytest.approx(
            doc["cost"]["total"]
        )


@pytest.mark.parallel
@pytest.mark.parametrize("kind", ["failures", "tokens", "http"])
def test_csv_and_jsonl_export_every_record_with_stage_times(runs, kind):
    summary = load_summary(runs[kind])
    rows = list(csv.DictReader(io.StringIO(write_report(runs[kind], "csv"))))
    assert len(rows) == summary["harness"]["samples"]
    assert sum(r["status"] == "error" for r in rows) == summary["harness"]["failed"]
    for r in rows:
        parts = float(r["queue_ms"]) + float(r["service_ms"]) + float(r["generation_ms"])
        assert parts == pytest.approx(float(r["e2e_ms"]), abs=1e-9)
        assert float(r["e2e_ms"]) == pytest.approx((int(r["complete_ns"]) - int(r["issue_ns"])) / 1e6)
    lines = write_report(runs[kind], "jsonl").splitlines()
    assert len(lines) == len(rows)
    first = json.loads(lines[0])
    assert first["query_id"] == int(rows[0]["query_id"]) and first["e2e_ms"] == pytest.approx(float(rows[0]["e2e_ms"]))
    if kind != "failures":
        assert all(float(r["generation_ms"]) > 0 for r in rows)
    # TTFT per request (#16 item 10), and no "0" standing for a stamp that never came
    for r in rows:
        if r["first_token_ns"]:
            assert float(r["ttft_ms"]) == pytest.approx((int(r["first_token_ns"]) - int(r["issue_ns"])) / 1e6)
        else:
            assert r["ttft_ms"] == "" and r["first_token_ns"] == ""
    assert any(r["ttft_ms"] for r in rows) == (kind != "failures")
    assert json.loads(lines[0])["first_byte_ns"] is None or kind != "failures"


@pytest.mark.parallel
def test_report_cli_prints_text_formats_to_stdout(runs):
    result = CliRunner().invoke(main, ["report", str(runs["failures"]), "--format", "md"])
    assert result.exit_code == 0 and result.output.startswith("## **")
    missing = CliRunner().invoke(main, ["report", str(runs["failures"] / "nope")])
    assert missing.exit_code == 2 and "is not a results folder" in missing.output


def _rows(html_tables: str) -> list[list[str]]:
    """The cells of each row of some HTML tables, unescaped."""
    import html

    return [[html.unescape(c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", tr)]
            for tr in re.findall(r"<tr>(.*?)</tr>", html_tables)]


@pytest.mark.parallel
@pytest.mark.parametrize("kind", ["tokens", "http"])
def test_the_tokens_section_names_its_rows_and_hides_the_empty_ones_in_every_renderer(runs, kind):
    """The HTTP run's summary holds ttft_from_dispatch_ms, mismatch.server_over_client and
    validation, prompt_cache and kv_cache as None: the page shows named rows, no raw key
    and no None, and the same rows as Markdown and the terminal (--details); the default
    terminal view's rows are among them."""
    from harness.report import figures
    from harness.report.html import render_html

    data = load_run(runs[kind])
    tokens = data.summary["tokens"]
    page = render_html(data)
    section = page[page.index("<h2>tokens</h2>"):]
    section = section[:section.index("<h2>", 4)]
    rows = _rows(section)
    assert len(rows) > 10
    text = " ".join(" ".join(r) for r in rows)
    assert "None" not in text
    # snake_case is how summary.json spells its keys (ttft_from_dispatch_ms, server_over_client)
    raw = set(re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b", text))
    assert raw == set(), raw
    assert {k for k in tokens if "_" in k}, "the section has keys of more than one word to leave out"
    # every row has a value: an empty one is left out, not shown blank
    assert all(cell.strip() for r in rows for cell in r[1:]), [r for r in rows if not all(c.strip() for c in r[1:])]
    names = [r[0] for r in rows]
    if kind == "http":
        assert {"TTFT from dispatch", "server/client tokens", "TPOT bound (LoadGen)"} <= set(names)
    # one source of rows: Markdown and the terminal's --details show the very rows of the page
    md = write_report(runs[kind], "md")
    md_section = md[md.index("### Tokens"):]
    md_section = md_section[:md_section.index("\n### ", 5)]
    md_names = [line.split(" | ")[0].lstrip("| ") for line in md_section.splitlines() if line.startswith("| ")]
    assert md_names == names
    details = _terminal(runs[kind], details=True)
    assert all(name in details for name in names if name not in ("latency (ms)", "figure"))
    brief = [r[0] for spec in figures.llm_tables(tokens) for r in [spec[0], *spec[1]]]
    assert set(brief) <= set(names)



def _terminal_line(heading: str, blocks: list) -> str:
    """The line a section starts on in the terminal, which draws no headings: its title, on its
    first untitled table; else its first table's own title, or its first note."""
    from harness.report.sections import Note, Table
    from harness.report.terminal import note

    if any(isinstance(b, Table) and not b.title for b in blocks):
        return heading
    first = next(b for b in blocks if isinstance(b, (Table, Note)))
    return first.title if isinstance(first, Table) else re.sub(r"\[/?[a-z]*\]", "", note(first)).strip()


@pytest.mark.parallel
@pytest.mark.parametrize("kind", ["failures", "tokens", "http"])
def test_terminal_markdown_and_html_draw_the_same_sections_in_the_one_order(runs, kind):
    """Each renderer's sections, read off what it printed (the page's <h2>, Markdown's ###
    headings, the lines the terminal's sections start on), are the one list's in its order,
    less those the list leaves to other formats; a section the run does not call for is in none."""
    import html

    from harness.report import sections
    from harness.report.html import render_html

    data = load_run(runs[kind])
    view = sections.View(data.summary, data, details=True)
    called_for = [s for s in sections.SECTIONS if s.shows(view)]
    page = [html.unescape(t) for t in re.findall(r"<h2>(.*?)</h2>", render_html(data))]
    assert page == [s.heading(view) for s in called_for if sections.HTML in s.formats]
    md = [line.removeprefix("### ") for line in write_report(runs[kind], "md").splitlines() if line.startswith("### ")]
    assert [t[:1].lower() + t[1:] for t in md] == [s.heading(view) for s in called_for if sections.MARKDOWN in s.formats]
    # the terminal: its sections, each found on a line of its own, in the page's order
    drawn = sections.shown(sections.View(data.summary, data, details=False), sections.TERMINAL)
    titles = [s.heading(view) for s, _ in drawn]
    assert titles == [t for t in page if t in titles]
    assert titles[:2] == ["throughput", "latency"] and "cost (USD)" in titles
    lines = [line.strip() for line in _terminal(runs[kind]).splitlines()]
    starts = [lines.index(_terminal_line(s.heading(view), blocks)) for s, blocks in drawn]
    assert starts == sorted(starts), list(zip(titles, starts))
    # what the run does not call for is in no format: tokens here only in token runs; no
    # sessions, telemetry, scale-out, harness-owned schedule or LoadGen errors in any
    absent = {"sessions", "system under test (telemetry)", "scale-out", "arrival schedule", "LoadGen errors"}
    absent |= {"tokens"} if kind == "failures" else set()
    assert not absent & {*page, *(t[:1].lower() + t[1:] for t in md), *lines}
    assert ("tokens" in page) == ("tokens" in lines) == ("Tokens" in md) == (kind != "failures")

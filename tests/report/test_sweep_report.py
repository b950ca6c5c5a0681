"""A sweep folder's Markdown, HTML and JSON reports and its terminal view, from real sweeps.

Three folders, made once: a Server sweep of target_qps on the synthetic backend, an Offline
sweep against the injected-delay OpenAI server (token figures) with max_in_flight, isl and
osl zipped, and a capacity search cut short by its time budget (a capacity section).
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from harness.analysis.diagnosis import diagnose
from harness.analysis.points import load_sweep
from harness.config.run_config import RunConfig
from harness.errors import OutputError
from harness.report.sweep_report import write_sweep_report
from harness.report.sweep_view import render_sweep
from harness.run.sweep import Axis, SweepSpec, new_sweep, run_sweep
from tests.support.http_servers import ServerThread, Timing, openai_app

SERVER = dict(backend="synthetic", scenario="Server", backend_options={"service_time_ms": 2.0}, max_batch=1,
              target_latency_ms=20, min_duration_s=0.5, min_query_count=50)


def _run(spec: SweepSpec, root: Path) -> Path:
    sweep_dir = new_sweep(spec, root)
    run_sweep(spec, sweep_dir)
    return sweep_dir


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sweeps")
    out = {"server": _run(SweepSpec("sweep", RunConfig(**SERVER), [Axis("target_qps", ("100", "300", "700"))]), root)}
    with ServerThread(openai_app(Timing(ttft_ms=10, tpot_ms=3, tokens=8))) as srv:
        llm = RunConfig(backend="http", scenario="Offline", dataset="synthetic:isl=32,osl=8,n=8",
                        backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                        min_duration_s=0.1, min_query_count=8, offline_expected_qps=1,
                        use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000)
        # input length, output length and concurrency rise together: every token curve
        axes = [Axis("max_in_flight", ("1", "2", "4")), Axis("isl", ("16", "64", "256")), Axis("osl", ("4", "8", "16"))]
        out["llm"] = _run(SweepSpec("sweep", llm, axes, zipped=True), root)
    # a pilot and about one try: enough for a capacity section, whatever it found
    search = {"start_qps": 200.0, "need": 1, "of": 1, "budget_s": 1.0}
    out["capacity"] = _run(SweepSpec("capacity", RunConfig(**SERVER), search=search), root)
    return out


def captions(page: str) -> list[str]:
    return re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', page)


def test_markdown_has_the_points_table_the_knee_and_the_diagnosis(sweeps: dict[str, Path], tmp_path: Path):
    d = sweeps["server"]
    data = load_sweep(d)
    out = tmp_path / "sweep.md"
    text = write_sweep_report(d, "md", out)
    assert out.read_text() == text
    assert text.startswith("## sweep · synthetic · Server · finished\n")
    assert "| # | target_qps | done/s | p50 ms | p99 ms | ok % | queue | verdict |" in text
    for value in ("100", "300", "700"):
        assert re.search(rf"^\| \d \| {value} \| ", text, re.M), value
    assert ("- knee: point" in text) == (data["knee"] is not None)
    diagnosis = text.split("### Diagnosis\n\n")[1].split("\n\n")[0].splitlines()
    assert diagnosis == [f"- {f['finding']}" for f in diagnose(data)]
    assert any(line.startswith("- queue time grows with load") for line in diagnosis)
    assert all(p["run"] in text for p in data["points"])
    # the CLI sends a sweep folder here
    cli = subprocess.run([sys.executable, "-m", "harness", "report", str(d), "--format", "md"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and cli.stdout == text, cli.stderr


def test_html_is_one_page_with_the_curves_its_data_supports(sweeps: dict[str, Path]):
    d = sweeps["server"]
    page = write_sweep_report(d, "html", None)
    for section in ("<h2>diagnosis</h2>", "<h2>curves</h2>", "<h2>runs</h2>", "<h2>plan (sweep.yaml)</h2>"):
        assert section in page
    assert "<td>target_qps</td>" not in page and "<th>target_qps</th>" in page
    assert captions(page) == ["throughput vs latency (p50, p99)", "achieved vs target rate",
                              "success rate and goodput vs load", "queue share of latency vs load"]
    for uri in re.findall(r'src="data:image/png;base64,([^"]+)"', page):
        assert base64.b64decode(uri).startswith(b"\x89PNG")
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert page.count("<summary>figures</summary>") == len(diagnose(load_sweep(d))) >= 2


def test_a_token_sweep_draws_the_token_curves_and_no_rate_curve(sweeps: dict[str, Path]):
    d = sweeps["llm"]
    page = write_sweep_report(d, "html", None)
    assert captions(page) == [
        "throughput vs latency (p50, p99)", "TTFT vs input length", "TPOT and E2E vs output length",
        "TPOT and E2E vs max_in_flight", "per-user vs total output tokens/s (labels: point index)",
        "success rate and goodput vs load", "queue share of latency vs load",
    ]  # Offline has no target rate, and no price sheet was given: no rate or cost curve
    # the server's TPOT is the same at any concurrency: nothing may say it grows
    assert "TPOT grows" not in page


def test_json_is_sweep_json_plus_the_diagnosis(sweeps: dict[str, Path]):
    d = sweeps["server"]
    data = json.loads(write_sweep_report(d, "json", None))
    saved = json.loads((d / "sweep.json").read_text())
    assert data.pop("diagnosis") == diagnose(saved)
    assert data == saved


def test_capacity_lines_are_in_every_format(sweeps: dict[str, Path]):
    d = sweeps["capacity"]
    data = load_sweep(d)
    assert data["kind"] == "capacity" and data["capacity"]["stop_reason"]
    md, page = write_sweep_report(d, "md", None), write_sweep_report(d, "html", None)
    assert re.search(r"^- capacity: ", md, re.M) and re.search(r"^- rule: a rate passes when", md, re.M)
    assert "<li>capacity: " in page and "<li>rule: a rate passes when" in page


def test_the_terminal_view_fits_80_columns_and_ends_with_the_diagnosis(sweeps: dict[str, Path]):
    for name, d in sweeps.items():
        buf = io.StringIO()
        data = load_sweep(d)
        render_sweep(data, Console(file=buf, width=80, color_system=None), d)
        lines = buf.getvalue().splitlines()
        assert max(len(line) for line in lines) <= 80, (name, [line for line in lines if len(line) > 80])
        bullets = [i for i, line in enumerate(lines) if line.startswith("  • ")]
        assert len(bullets) == len(diagnose(data)), (name, lines)
        if name == "server":
            assert bullets and lines[bullets[0]].startswith("  • queue time grows with load")
            knee = [i for i, line in enumerate(lines) if line.startswith("  knee: ")]
            assert all(k < bullets[0] for k in knee)


def test_an_unwritable_output_or_unknown_format_is_an_output_error(sweeps: dict[str, Path], tmp_path: Path):
    with pytest.raises(OutputError, match="cannot write report"):
        write_sweep_report(sweeps["server"], "md", tmp_path / "no such folder" / "sweep.md")
    with pytest.raises(OutputError, match="not 'csv'"):
        write_sweep_report(sweeps["server"], "csv", None)

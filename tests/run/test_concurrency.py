"""`concurrency: N`: a closed loop of exactly N requests in flight, for HTTP and tensor
backends, with latencies from dispatch and the slot wait apart; and a concurrency sweep on
a server whose decode slows with the batch recovers that law. On this schedule the harness
owns, the headline (terminal, Markdown, HTML, compare's figures) is timed from dispatch,
LoadGen's issue-based figures are shown labelled apart, and the slot wait is the backlog."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from rich.console import Console

from harness.analysis.compare import compare, side_lines
from harness.analysis.diagnosis import diagnose
from harness.analysis.run_data import load_run
from harness.config.run_config import RunConfig
from harness.errors import EXIT_USAGE
from harness.report import terminal
from harness.report.figures import ms
from harness.report.html import render_html
from harness.report.markdown import render_markdown
from harness.report.sweep_figures import points_table, timing_notes
from harness.results import metrics
from harness.results.records import read_records
from harness.results.schedule import BACKLOG
from harness.results.stats import NS_PER_MS, distribution
from harness.run import runner
from harness.run.sweep import Axis, SweepSpec, new_sweep, run_sweep
from tests.support.http_servers import ServerThread, Timing, openai_app, server_side
from tests.support.report_runs import SCHEMA


def in_flight(run_dir: Path) -> np.ndarray:
    """How many requests were between dispatch and completion, at each dispatch."""
    cols = read_records(run_dir).columns
    start, end = cols["dispatch_ns"], cols["complete_ns"]
    return np.array([int(((start <= t) & (end > t)).sum()) for t in start])


@pytest.fixture
def server():
    # decode slows by 2 ms a token per open request: TPOT = 4 + 2 N in a closed loop of N
    timing = Timing(ttft_ms=10, tpot_ms=4, tpot_ms_per_in_flight=2, tokens=6)
    arrivals: list[tuple[int, list[int]]] = []
    with ServerThread(openai_app(timing, arrivals=arrivals)) as srv:
        yield srv, timing, arrivals


def served_by_the_server(arrivals: list[tuple[int, list[int]]], run_dir: Path) -> dict[str, float]:
    """What the server's own log says of one run's requests (those that arrived between its
    first dispatch and its last completion: not the warm-up's, not another run's): how many
    it had open as each arrived (itself included: its handler ends right after its last
    write, which it reaches without yielding to another), and its own TPOT and E2E (arrival
    to last write), p50 in ms by LoadGen's percentile rule, as the harness's figures."""
    cols = read_records(run_dir).columns
    start, end = int(cols["dispatch_ns"].min()), int(cols["complete_ns"].max())
    log = sorted(arrivals)
    mine = [(a, w) for a, w in log if start <= a <= end]
    assert len(mine) == len(cols["dispatch_ns"]), (len(mine), len(cols["dispatch_ns"]))
    open_at = [sum(1 for b, v in log if b <= a <= v[-1]) for a, _ in mine]
    return {"open_p50": float(np.median(open_at)),
            "tpot": distribution(np.array([(w[-1] - w[0]) / (len(w) - 1) for _, w in mine]), unit=NS_PER_MS)["p50"],
            "e2e": distribution(np.array([w[-1] - a for a, w in mine]), unit=NS_PER_MS)["p50"]}


def test_a_concurrency_sweep_keeps_n_in_flight_and_recovers_the_servers_law(tmp_path: Path, server):
    srv, timing, arrivals = server
    base = RunConfig(backend="http", scenario="Offline", dataset="synthetic:isl=16,osl=6,n=24",
                     backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                     min_duration_s=0, min_query_count=24)
    spec = SweepSpec("sweep", base, [Axis("concurrency", ("1", "2", "4"))])
    sweep_dir = new_sweep(spec, tmp_path)
    data = run_sweep(spec, sweep_dir)
    server_tpots = []
    for p in data["points"]:
        n = int(p["values"]["concurrency"])
        assert p["status"] == "complete" and p["concurrency"] == n and p["latency_from"] == "dispatch"
        depth = in_flight(sweep_dir / p["run"])
        assert depth.max() == n  # never more than N open ...
        assert np.median(depth) == n  # ... and N open for most of the test: a closed loop
        # ... as the server counted them too: so it decoded at its law's TPOT for N
        served = served_by_the_server(arrivals, sweep_dir / p["run"])
        assert served["open_p50"] == n, (n, served)
        server_tpots.append(served["tpot"])
        # TPOT against the server's own (its write stamps: its one thread wakes late on a busy
        # machine, and the client is right to see that): 3 % for the client's reading of a
        # chunk (as tests/backends/test_http_truth.py's 32 streams); a law off by one request
        # in flight is 2 ms, 17-33 %
        tpot = p["metrics"]["tpot_p50"]
        assert abs(tpot - served["tpot"]) <= 0.03 * served["tpot"], (n, tpot, served)
        # Latency counts from dispatch, not from LoadGen's single Offline issue: no less than
        # the server's own E2E (each request left before the server's handler began and was
        # complete after its last write) and no more than it plus the hops both ways and the
        # closing event, 1 ms plus 5 % (0.4-0.5 and 0.1-0.2 ms p50 measured beside a busy
        # core). From issue, the backlog of 24 requests is 2-24 times more.
        assert served["e2e"] <= p["metrics"]["latency_p50"] <= served["e2e"] * 1.05 + 1.0, (n, p["metrics"], served)
        summary = json.loads((sweep_dir / p["run"] / "summary.json").read_text())
        assert p["metrics"]["latency_p50"] < summary["harness"]["latency_ms"]["p50"]  # the slot wait is apart
    # one slot for 24 requests: most of the time from issue is the wait for it ...
    assert data["points"][0]["queue_share"] > 0.8
    # ... which is the backlog the harness holds, not a queue of the server: the table says
    # so, and the diagnosis does not read it as load
    header, _ = points_table(data)
    assert "backlog" in header and "queue" not in header, header
    assert all(p["backlog"] for p in data["points"])
    assert not any(f["finding"].startswith("queue time grows") for f in diagnose(data))
    assert any(line.startswith("latency, TTFT and TPOT are timed from dispatch") for line in timing_notes(data))
    # the diagnosis recovers the law's slope as the server kept it: the same least squares on
    # the server's own TPOTs, to 0.2 ms a request (10 % of the law's 2 ms)
    found = next(f for f in diagnose(data) if f["finding"].startswith("TPOT grows with concurrency"))
    server_b = float(np.polyfit([1, 2, 4], server_tpots, 1)[0])
    assert abs(found["figures"]["b"] - server_b) <= 0.1 * timing.tpot_ms_per_in_flight, (found, server_b)


def test_a_tensor_backend_runs_n_workers_of_one_request(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--backend", "synthetic", "--scenario", "Offline",
         "--set", "service_time_ms=5", "--set", "concurrency=3", "--set", "min_duration_s=0",
         "--set", "min_query_count=60", "--output-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["sut"]["workers"] == 3 and summary["sut"]["max_batch"] == 1
    (run_dir,) = tmp_path.iterdir()
    assert in_flight(run_dir).max() == 3
    # Three 5 ms calls at a time: no more than 600 samples/s (a sleep is never short), and no
    # less than three at a time of the calls as measured (a busy machine stretches a sleep:
    # the machine's) allow, less the harness's own time between calls and LoadGen's
    # hand-over, at most 20 %. Calls run two at a time would be a third short.
    cols = read_records(run_dir).columns
    calls_allow = 3 / (float(np.mean(cols["complete_ns"] - cols["dispatch_ns"])) / 1e9)
    rate = summary["harness"]["throughput_per_s"]
    assert 0.8 * calls_allow < rate <= 600 * 1.02, (rate, calls_allow)


@pytest.mark.parametrize(("settings", "message"), [
    (["--scenario", "Server", "--set", "target_qps=10"], "use scenario Offline"),
    (["--scenario", "Offline", "--set", "max_batch=8"], "drop max_batch"),
    (["--scenario", "Offline", "--set", "workers=2"], "drop workers=2"),
])
@pytest.mark.parallel
def test_concurrency_that_cannot_hold_is_refused(tmp_path: Path, settings: list[str], message: str):
    out = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--backend", "synthetic", "--set", "concurrency=4", *settings,
         "--output-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == EXIT_USAGE and message in out.stderr, out.stderr
    assert not any(tmp_path.rglob("summary.json"))


LABEL = "from LoadGen's Offline issue (includes the backlog):"


def closed_loop_run(tmp_path: Path, timing: Timing, n: int, samples: int, **settings) -> tuple[Path, dict, list]:
    arrivals: list[tuple[int, list[int]]] = []
    with ServerThread(openai_app(timing, arrivals=arrivals)) as srv:
        outcome = runner.run(RunConfig(
            backend="http", scenario="Offline", dataset=f"synthetic:isl=16,osl={timing.tokens},n={samples}",
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"}, concurrency=n,
            min_duration_s=0, min_query_count=samples, **settings), tmp_path)
    return outcome.run_dir, outcome.summary, arrivals


def terminal_view(run_dir: Path, summary: dict) -> str:
    buf = io.StringIO()
    terminal.render(summary, Console(file=buf, width=80, color_system=None), str(run_dir))
    return buf.getvalue()


def test_a_closed_loops_headline_is_timed_from_dispatch(tmp_path: Path):
    timing = Timing(ttft_ms=100, tpot_ms=10, tokens=8)
    n, samples = 4, 24
    # a TTFT target half as long again as the injected TTFT: every request meets it from
    # dispatch (the server's own is within 5 % of 100 ms), few from LoadGen's issue
    run_dir, s, arrivals = closed_loop_run(tmp_path, timing, n, samples, slo={"ttft_ms": 1.5 * timing.ttft_ms})
    assert s["schedule"] == {"owner": "harness", "kind": f"closed loop of {n}", "timed_from": "dispatch"}
    schema = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    assert [e.message for e in schema.iter_errors(json.loads((run_dir / "summary.json").read_text()))] == []
    assert s["harness"]["success_rate"] == 1.0
    # What the server really did for the timed requests (the warm-up's arrived first): its
    # own TTFT, arrival to first write. As in tests/backends/test_http_truth.py the client
    # is never under the injected TTFT, and within 5 % of the server's own.
    server_ttft = server_side(arrivals, samples)["ttft"]
    assert timing.ttft_ms <= server_ttft
    head = metrics.from_summary(s)
    assert timing.ttft_ms <= head["ttft_p50"] and abs(head["ttft_p50"] - server_ttft) <= 0.05 * server_ttft, (head, server_ttft)
    assert head["ttft_p50"] == s["tokens"]["ttft_from_dispatch_ms"]["p50"]
    assert head["latency_p99"] == s["harness"]["service_ms"]["p99"] == s["tokens"]["e2e_from_dispatch_ms"]["p99"]
    # per request, as a user sees it: SLO attainment and per-request tokens/s from dispatch too
    assert s["tokens"]["slo"]["attainment"]["ttft_ms"]["rate"] == 1.0
    per_user = s["tokens"]["request_output_tokens_per_s"]["p50"]
    e2e_p50_s = s["tokens"]["e2e_from_dispatch_ms"]["p50"] / 1e3
    assert abs(per_user - timing.tokens / e2e_p50_s) <= 0.05 * per_user, (per_user, e2e_p50_s)
    # what compare shows and its --fail-if gate reads, and says so
    comparison = compare([run_dir, run_dir])
    assert comparison.sides[0].values["ttft_p50"] == [head["ttft_p50"]]
    assert comparison.sides[0].values["latency_p99"] == [head["latency_p99"]]
    assert f"from dispatch (closed loop of {n})" in side_lines(comparison)[0]
    assert comparison.to_dict()["sides"][0]["timed_from"] == "dispatch"
    # From LoadGen's one Offline issue: the 12 requests dispatched last (index >= 12 of 24)
    # each waited for 9 completions, so for one slot's 3rd, each at least the server's E2E
    # (ttft + 7 tpot = 170 ms, the server is never early). So at most 12 TTFTs from issue are
    # under 3 x 170 + 100 ms, and the p50 (nearest rank: the 13th) is not; one round of that
    # is left as slack. Completion is one E2E later still.
    issue = metrics.from_summary(s, "loadgen")
    server_e2e = timing.ttft_ms + (timing.tokens - 1) * timing.tpot_ms
    assert issue["ttft_p50"] >= timing.ttft_ms + 2 * server_e2e, issue
    assert issue["latency_p50"] == s["loadgen"]["latency_ms"]["p50"] >= 3 * server_e2e
    # the 80-column view: the headline is the dispatch figure, LoadGen's follows, labelled
    view = terminal_view(run_dir, s)
    lines = view.splitlines()
    assert max(len(line) for line in lines) <= 80, view
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("TTFT p50/p99"))
    assert f"TTFT p50/p99 {ms(head['ttft_p50'])}/{ms(head['ttft_p99'])} ms" in lines[first], view
    assert f"timed from dispatch: a closed loop of {n}, the harness holds the backlog" in view
    label = next(i for i, line in enumerate(lines) if LABEL in line)
    assert label > first
    after = " ".join(lines[label:label + 3])
    assert f"TTFT p50/p99 {ms(issue['ttft_p50'])}/{ms(issue['ttft_p99'])} ms" in after, view
    assert f"p50/p99 {ms(issue['latency_p50'])}/{ms(issue['latency_p99'])} ms" in after, view
    assert f"p99 {ms(head['latency_p99'])} ms from dispatch" in view
    assert re.search(r"^TTFT from dispatch +" + re.escape(ms(head["ttft_p50"])), view, re.M), view
    assert re.search(r"^TTFT from issue, \+backlog +" + re.escape(ms(issue["ttft_p50"])), view, re.M), view
    # a summary.json from before the schedule section (an older folder) still renders, with
    # LoadGen's issue-based headline as it was written
    old = {k: v for k, v in s.items() if k != "schedule"}
    assert metrics.from_summary(old)["ttft_p50"] == issue["ttft_p50"]
    old_view = terminal_view(run_dir, old)
    assert f"TTFT p50/p99 {ms(issue['ttft_p50'])}/{ms(issue['ttft_p99'])} ms" in old_view and LABEL not in old_view
    # Markdown and HTML carry the same headline lines
    data = load_run(run_dir)
    for doc in (render_markdown(data), render_html(data)):
        label = LABEL if LABEL in doc else LABEL.replace("'", "&#x27;")  # HTML escapes the quote
        # one bullet: the label and LoadGen's figures together, not a line of its own
        assert f"{label} p50/p99 {ms(issue['latency_p50'])}/{ms(issue['latency_p99'])} ms" in doc, doc
        assert f"TTFT p50/p99 {ms(head['ttft_p50'])}/{ms(head['ttft_p99'])} ms" in doc


@pytest.mark.parallel
def test_at_concurrency_1_the_wait_before_dispatch_is_called_the_backlog(tmp_path: Path):
    run_dir, s, _ = closed_loop_run(tmp_path, Timing(ttft_ms=20, tpot_ms=5, tokens=4), 1, 8)
    bd = load_run(run_dir).breakdown
    assert bd["labels"]["queue"] == BACKLOG
    # one slot for 8 requests: the wait before dispatch dominates, and is named for what it is
    assert bd["dominant"] == "queue"
    view = terminal_view(run_dir, s)
    assert f"where the time went: {BACKLOG} dominates" in view, view
    rows = [line.split()[0] for line in view.splitlines() if line[:1].isalpha()]
    assert "queue" not in rows and "backlog" in rows, view
    assert max(len(line) for line in view.splitlines()) <= 80, view

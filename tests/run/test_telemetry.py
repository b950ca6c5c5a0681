"""Telemetry against ground truth: the injected-delay OpenAI server also serves /metrics (in
vLLM's series names, from prometheus_client) holding exactly what it did, so the scraped
window's counts must equal what the harness sent, its histograms the injected phases, and
the TTFT split must put the injected queue and prefill where they belong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import jsonschema
import numpy as np
import pytest

from harness.config.run_config import RunConfig
from harness.errors import ConfigError
from harness.report.figures import headline
from harness.results import folder
from harness.results.records import read_records
from harness.run import runner
from tests.support.http_servers import ServerThread, Timing, TruthMetrics, openai_app
from tests.support.report_runs import SCHEMA
from tests.support.server_process import free_port, server_process
from tests.support.sleep_probe import SleepProbe

# queue 30 ms before the headers, first token 20 ms after, then 5 ms a token: 8 tokens end at 85 ms
TIMING = Timing(queue_ms=30, ttft_ms=20, tpot_ms=5, tokens=8)


def _server_run(tmp_path: Path, metrics: TruthMetrics, arrivals: list[tuple[int, list[int]]],
                qps: float) -> tuple[Path, dict]:
    with ServerThread(openai_app(TIMING, metrics=metrics, arrivals=arrivals)) as srv:
        outcome = runner.run(RunConfig(
            backend="http", scenario="Server", dataset="synthetic:isl=16,osl=8,n=64",
            backend_options={"protocol": "openai-completions", "url": f"{srv.url}/v1", "warmup_requests": 0},
            target_qps=qps, min_duration_s=4, min_query_count=60, use_token_latencies=True,
            telemetry={"server": [f"{srv.url}/metrics"], "host": True, "interval_s": 0.1},
        ), tmp_path / "results")  # fmt: skip
    return outcome.run_dir, outcome.summary


class TruthRun(NamedTuple):
    run_dir: Path
    summary: dict
    metrics: TruthMetrics
    #: the rate offered: a quarter of what this client completed flat out (`client_rate`), at most 25/s
    qps: float
    #: the truth server's own log: (arrival, chunk write stamps) a request
    arrivals: list[tuple[int, list[int]]]
    #: a thread that only sleeps beside the run: how late this machine woke it meanwhile
    probe: SleepProbe


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory, client_rate: float) -> TruthRun:
    # A load the client keeps up with on any machine: a quarter of the rate its one loop
    # completed flat out in the pilot, whose requests were 2,000 events each (these are 8).
    # 25/s at most: a faster machine gains nothing from more, and the one-thread server less.
    metrics = TruthMetrics(fail_scrapes=(5, 6))
    arrivals: list[tuple[int, list[int]]] = []
    qps = min(25.0, client_rate / 4)
    with SleepProbe() as probe:
        run_dir, summary = _server_run(tmp_path_factory.mktemp("telemetry"), metrics, arrivals, qps)
    return TruthRun(run_dir, summary, metrics, qps, arrivals, probe)


@pytest.fixture(scope="module")
def truth_run(truth: TruthRun) -> tuple[Path, dict, TruthMetrics]:
    return truth.run_dir, truth.summary, truth.metrics


def _served(truth: TruthRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The server's own (arrival, first write, last write) stamps of the run's requests,
    in arrival order (warm-up 0: every request it served was timed)."""
    log = sorted(truth.arrivals)
    assert len(log) == truth.summary["harness"]["samples"]
    return (np.array([a for a, _ in log]), np.array([w[0] for _, w in log]), np.array([w[-1] for _, w in log]))


def test_the_servers_counts_over_the_window_are_what_the_harness_sent(truth_run):
    _, s, _ = truth_run
    server = s["telemetry"]["servers"][0]
    assert server["server"] == "vllm"  # recognised from its series' names
    assert server["brackets_window"] is True
    m = server["metrics"]
    n = s["harness"]["samples"]
    assert s["harness"]["succeeded"] == n >= 60
    assert m["requests_succeeded"]["delta"] == n
    assert m["prompt_tokens"]["delta"] == s["tokens"]["input_tokens"]
    assert m["generation_tokens"]["delta"] == s["tokens"]["output_tokens"] == 8 * n
    assert m["requests_succeeded"]["rate_per_s"] == pytest.approx(n / server["covered_s"])


def test_the_servers_histograms_hold_the_injected_phases(truth_run):
    _, s, _ = truth_run
    m = s["telemetry"]["servers"][0]["metrics"]
    n = s["harness"]["samples"]
    for concept, truth_s in (("server_queue_time", 0.030), ("server_prefill_time", 0.020), ("server_decode_time", 0.035)):
        h = m[concept]
        assert h["count"] == n
        assert h["mean_s"] == pytest.approx(truth_s, rel=1e-6)  # _sum / _count: exact
        lo, hi = h["p50_bucket_s"]
        assert lo < truth_s <= hi and lo <= h["p50_s"] <= hi  # interpolated, inside the truth's bucket


def test_the_ttft_split_puts_the_injected_queue_and_prefill_where_they_belong(truth):
    s = truth.summary
    split = s["telemetry"]["servers"][0]["latency_split"]
    assert split["server_queue_ms"] == pytest.approx(30.0, rel=1e-6)
    assert split["server_prefill_ms"] == pytest.approx(20.0, rel=1e-6)
    parts = split["client_queue_ms"] + split["network_and_http_ms"] + split["server_queue_ms"] + split["server_prefill_ms"]
    assert parts == pytest.approx(split["client_ttft_ms"], rel=1e-9)
    # What is left of the client's TTFT is the server's sleeps' overshoot, which its own log
    # shows (arrival to first write, less the injected 50 ms), and the hops: dispatch to the
    # server's handler, its write to the client's stamp (0.6 ms quiet). The harness may add its
    # send and its read, each at most a turn of its loop: 1 ms, plus what the loop's own
    # lateness probe saw (its mean, for each of the two), plus the server's thread waking for
    # the request (the mean of a thread sleeping beside it). A split that put the queue or
    # the prefill in the wrong place is 20-30 ms off, a first token taken at the second 5 ms.
    c = read_records(truth.run_dir).columns
    arrived, first, last = _served(truth)
    overshoot = float(np.mean(first - arrived)) / 1e6 - 50.0
    lag = s["telemetry"]["client"]["loop_lag_ms"]
    allowance = 1.0 + 2 * lag["mean"] + truth.probe.lateness_ms()["mean"]
    hops = float(np.mean(c["first_token_ns"] - c["dispatch_ns"])) / 1e6 - (overshoot + 50.0)
    measured = f"server's overshoot {overshoot:.3f} ms, hops {hops:.3f} ms, loop lag {lag}, split {split}"
    assert 0 <= overshoot and 0 < hops, measured  # the server sleeps at least 50 ms; a hop takes time
    assert 0 < split["network_and_http_ms"] <= overshoot + allowance, measured
    # decode, first token to last, against the server's own (first write to last): the
    # client's two reads differ by at most the same allowance; a decode that counted the
    # TTFT, or missed the last chunk (5 ms), is off by more
    server_decode = float(np.mean(last - first)) / 1e6
    assert split["client_decode_ms"] == pytest.approx(server_decode, abs=allowance), (server_decode, measured)


def test_the_servers_levels_agree_with_littles_law_on_the_clients_records(truth):
    # The client's mean number in flight is the sum of its latencies over the window (Little's
    # law, exact on the records); the server's running + waiting, sampled every 0.1 s, must
    # estimate the same level. A gauge read wrong (summed twice, never decremented) is far off.
    run_dir, s = truth.run_dir, truth.summary
    c = read_records(run_dir).columns
    window_ns = int(c["complete_ns"].max() - c["issue_ns"].min())
    in_flight = float(np.sum(c["complete_ns"] - c["issue_ns"])) / window_ns
    m = s["telemetry"]["servers"][0]["metrics"]
    level = m["running"]["mean"] + m["queue_depth"]["mean"]
    # λ W, with W the server's own time per request (arrival to last write: the injected
    # 85 ms plus its lateness, measured in this run) and λ the rate offered: 35 % for the
    # Poisson count over the window (60 and more arrivals: 13 % a standard deviation) and
    # the hops around the server's time (under a ms here)
    arrived, _, last = _served(truth)
    w_s = float(np.mean(last - arrived)) / 1e9
    assert in_flight == pytest.approx(truth.qps * w_s, rel=0.35), (in_flight, truth.qps, w_s)
    assert level == pytest.approx(in_flight, rel=0.35)
    assert m["queue_depth"]["mean"] == pytest.approx(level * 30 / 85, rel=0.5)  # 30 of the 85 ms waiting


def test_a_failed_scrape_is_a_gap_and_the_run_goes_on(truth_run):
    run_dir, s, metrics = truth_run
    server = s["telemetry"]["servers"][0]
    assert server["gaps"] == 2 and server["gap_errors"] == ["HTTP 503 Service Unavailable"]
    lines = folder.read_jsonl(run_dir, folder.TELEMETRY)
    scrapes = [e for e in lines if e["source"] == "server"]
    assert len(scrapes) == metrics.scrapes - 1  # every scrape of the run is a line; one was the check before it
    assert [e["ok"] for e in scrapes].count(False) == 2
    assert s["status"] == "complete"
    # stamped on the records' clock: the samples bracket the timed window
    c = read_records(run_dir).columns
    assert scrapes[0]["t_ns"] < c["issue_ns"].min() and scrapes[-1]["t_ns"] > c["complete_ns"].max()


def test_the_loops_lag_is_on_the_records_clock(truth):
    # the loop's time.monotonic() and the records' perf_counter_ns() are one clock here, so
    # its per-second worst lateness spans the timed window, second for second
    run_dir, s = truth.run_dir, truth.summary
    lag = json.loads((run_dir / folder.CHILD).read_text())["loop_lag_ms"]
    seconds = [t for t, _ in lag["per_second_max"]]
    c = read_records(run_dir).columns
    # the probe starts just before the test and runs to just after it; its buckets are whole
    # seconds. Its first sample comes one period (and that sample's lateness) after its start,
    # so the first bucket may be the second after the first issue, when that issue came in
    # the period's last moments before a second's turn
    first_sample_after_start = (lag["period_ms"] + lag["max"]) * 1e6
    assert seconds[0] <= c["issue_ns"].min() + first_sample_after_start
    assert c["issue_ns"].min() < seconds[0] + 3e9
    assert abs(seconds[-1] - c["complete_ns"].max()) < 3e9
    # A quarter of the client's rate: the loop keeps up. Its worst each second may be the machine's
    # worst, which a thread sleeping beside the run saw over the same seconds, plus 50 ms of
    # the harness's own (a loop turn of a second's requests' work is ms): a loop blocked for 100 ms a
    # second (a synchronous write, a scrape on the loop) still fails
    machine = truth.probe.lateness_ms()["max"]
    assert all(v < 50 + machine for _, v in lag["per_second_max"]), (lag["per_second_max"], machine)
    assert "per_second_max" not in s["telemetry"]["client"]["loop_lag_ms"]  # the series stays in child.json


def test_host_telemetry_names_the_clients_threads(truth):
    s = truth.summary
    host = s["telemetry"]["host"]
    names = {t["name"] for t in host["threads"]}
    assert {"event-loop", "LoadGen issue (main)"} <= names
    # The process's share of a core is the machine's to set (a slower core spends more of
    # itself on the same requests): judged against the run's own figures, it was measured at
    # all, holds its event loop's share, and lies within the machine's busy cores over the
    # same window; 2 clock ticks (10 ms each) over the window for the counters' rounding.
    tick = 2 * 0.01 / host["covered_s"]
    loop = max(t["cores"] for t in host["threads"] if t["name"] == "event-loop")
    busy = sum(b for b in host["machine_core_busy"] if b is not None)
    assert 0 < loop <= host["process_cores"] + tick <= busy + 2 * tick, (host, busy)
    assert host["rss_max_bytes"] > 10 * 2**20
    # At a quarter of the client's rate no client thread is near a whole core and LoadGen keeps
    # its schedule, on any machine: the only signal allowed is the loop's lateness, which
    # holds the machine's (the harness's 10 ms threshold is on the loop's whole lateness); the
    # harness's own part of it is bounded below, against a thread sleeping beside the run.
    client = s["telemetry"]["client"]
    assert client["saturated"] is bool(client["signals"]), client
    assert all(sig.startswith("the event loop ran late") for sig in client["signals"]), client
    # on time: at the median, what this machine's wake-ups took (a thread sleeping
    # beside the run, the same seconds) plus 10 ms of the harness's own (the selector's 1 ms
    # rounding and a turn's work); a saturated loop is 100 ms and more late
    machine = truth.probe.lateness_ms()["p50"]
    assert client["loop_lag_ms"]["samples"] >= 40 and client["loop_lag_ms"]["p50"] < 10 + machine, (client, machine)


def test_a_telemetry_summary_follows_the_schema(truth_run):
    run_dir, s, _ = truth_run
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(s)
    assert json.loads((run_dir / folder.SUMMARY).read_text())["telemetry"] == s["telemetry"]


def _harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=180, cwd=cwd)


QUICK = ("run", "--backend", "synthetic", "--scenario", "Offline", "--set", "min_duration_s=0.2",
         "--set", "offline_expected_qps=2000", "--set", "max_batch=8")


def test_an_endpoint_that_does_not_answer_is_one_line_before_the_test(tmp_path):
    proc = _harness(*QUICK, "--telemetry", "server=http://127.0.0.1:9/metrics", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "telemetry server http://127.0.0.1:9/metrics: no answer" in lines[0]
    assert "--telemetry-optional" in lines[0]
    assert not (tmp_path / "results").exists()  # no folder for a run that never started
    with pytest.raises(ConfigError, match="no answer"):
        runner.run(RunConfig(backend="synthetic", telemetry={"server": ["http://127.0.0.1:9/metrics"]}), tmp_path)


def test_with_telemetry_optional_the_run_goes_on_and_says_why_it_has_no_server_figures(tmp_path):
    proc = _harness(*QUICK, "--telemetry", "server=http://127.0.0.1:9/metrics", "--telemetry-optional", "--json",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "warning: telemetry server http://127.0.0.1:9/metrics: no answer" in proc.stderr
    tel = json.loads(proc.stdout)["telemetry"]
    assert tel["notes"] and "no answer" in tel["notes"][0]
    server = tel["servers"][0]
    assert server["scrapes"] == 0 and server["gaps"] >= 1 and server["note"] == "no scrape answered"


def test_a_bad_telemetry_flag_is_a_usage_error(tmp_path):
    proc = _harness(*QUICK, "--telemetry", "prometheus", cwd=tmp_path)
    assert proc.returncode == 2
    assert "expected server=URL, host or gpu" in proc.stderr


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory):
    """benchmarks/noop_server.py in its own process, in its no-op mode: 2,000 SSE events a
    request for the cost of one write, so ~10 ms of the client's parsing per request and
    nearly none of the server's."""
    root = Path(__file__).resolve().parents[2]
    port = free_port()
    cmd = [sys.executable, str(root / "benchmarks" / "noop_server.py"), "--port", str(port), "--tokens", "2000"]
    base = f"http://127.0.0.1:{port}/v1"
    work = tmp_path_factory.mktemp("burst")
    prompts = work / "prompts.jsonl"  # no max_tokens: the server's --tokens decides
    prompts.write_text("".join(json.dumps({"prompt": f"hi {i}"}) + "\n" for i in range(64)))
    with server_process(cmd, base + "/models", work / "server.log", 30):
        yield base, str(prompts)


@pytest.fixture(scope="module")
def client_rate(burst, tmp_path_factory: pytest.TempPathFactory) -> float:
    """Requests a second this client's one loop completes against the no-op server, all
    it can (Offline, 200 requests): ~100 on one machine of this class, more on a faster
    CPU, where a fixed 400 a second once left the loop only 91 ms late."""
    url, prompts = burst
    s = runner.run(RunConfig(
        backend="http", scenario="Offline", dataset=prompts, min_duration_s=0.5, min_query_count=200,
        offline_expected_qps=100, backend_options={"protocol": "openai-completions", "url": url, "warmup_requests": 0},
    ), tmp_path_factory.mktemp("client-rate")).summary  # fmt: skip
    assert s["harness"]["success_rate"] == 1.0
    return s["harness"]["throughput_per_s"]


def _burst_run(burst: tuple[str, str], qps: float, root: Path, duration_s: float) -> dict:
    url, prompts = burst
    return runner.run(RunConfig(
        backend="http", scenario="Server", dataset=prompts, target_qps=qps, min_duration_s=duration_s,
        min_query_count=10,
        backend_options={"protocol": "openai-completions", "url": url, "warmup_requests": 0},
        telemetry={"host": True, "interval_s": 0.2},
    ), root).summary  # fmt: skip


def test_a_client_that_cannot_keep_up_is_called_saturated(burst, client_rate, tmp_path):
    # 4 x what the loop can do, for 1 s: the backlog then takes the loop ~4 s to clear, and
    # the loop, sampled 5 times a second, runs late by far more than 100 ms at the median.
    s = _burst_run(burst, 4 * client_rate, tmp_path, 1)
    client = s["telemetry"]["client"]
    assert client["saturated"] is True, f"offered {4 * client_rate:.0f}/s, 4 x the client's {client_rate:.0f}/s: {client}"
    # the loop's own lateness says it whether or not the thread got a whole core
    assert any(sig.startswith("the event loop ran late") for sig in client["signals"]), client
    assert client["loop_lag_ms"]["p50"] > 100, f"offered {4 * client_rate:.0f}/s: {client}"
    assert any(line.startswith("CLIENT SATURATED") for line in headline(s, None))
    # LoadGen's "the SUT is saturated" gets the part that was: the client
    assert any(r.startswith("the load generator's own side could not keep up") for r in s["validity"]["reasons"])
    # a capacity search or sweep names it as the constraint that bound the point
    from harness.analysis.points import point_entry, verdict

    run_dir = next(p.parent for p in tmp_path.glob("*/summary.json"))
    entry = point_entry(run_dir, {"target_qps": 4 * client_rate})
    assert entry["client_saturated"] is True and entry["client_signals"] == client["signals"]
    assert verdict(entry) == (False, "client saturated")


def test_the_same_client_at_a_rate_it_keeps_up_with_is_not(burst, client_rate, tmp_path):
    s = _burst_run(burst, client_rate / 10, tmp_path, 2)
    client = s["telemetry"]["client"]
    assert client["saturated"] is False, client
    assert not any(line.startswith("CLIENT SATURATED") for line in headline(s, None))
    assert not any("load generator" in r for r in s["validity"]["reasons"])


def test_gpu_telemetry_says_what_it_found(tmp_path):
    outcome = runner.run(RunConfig(backend="synthetic", scenario="Offline", min_duration_s=0.2, offline_expected_qps=2000,
                                   max_batch=8, telemetry={"gpu": True, "interval_s": 0.2}), tmp_path)
    gpu = outcome.summary["telemetry"]["gpu"]
    try:
        import pynvml

        pynvml.nvmlInit()
        present = pynvml.nvmlDeviceGetCount() > 0
    except Exception:  # noqa: BLE001 - no driver, no library: no GPU
        present = False
    if present:
        assert gpu["devices"] and all(d["util_pct"] is not None for d in gpu["devices"])
    else:
        assert gpu["devices"] == [] and ("NVML" in gpu["absent"] or "GPU" in gpu["absent"])
        assert outcome.summary["status"] == "complete"


def test_the_telemetry_tables_fit_80_columns_and_say_where_ttft_went(truth_run):
    from rich.console import Console

    from harness.report.terminal import render

    run_dir, s, _ = truth_run
    console = Console(width=80, record=True, force_terminal=False)
    render(s, console, str(run_dir))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for title in ("server: vllm", "server levels (time-weighted mean)", "server counters (timed window)",
                  "server times, ms", "TTFT split, mean ms", "host (timed window)"):
        assert title in text, title
    split = next(line for line in text.splitlines() if line.startswith("server queue "))
    assert "30.000" in split  # the injected 30 ms, as the server's histogram holds it


def test_the_html_report_has_the_telemetry_section_and_its_plots(truth_run):
    from harness.analysis.run_data import load_run
    from harness.report.html import render_html

    run_dir, s, _ = truth_run
    page = render_html(load_run(run_dir, s))
    section = page[page.index("<h2>system under test (telemetry)</h2>"):page.index("<h2>plots</h2>")]
    # the server's queue vs the client's in flight, tokens/s from both sides, the harness's CPU
    assert section.count("<img") == 3
    for alt in ('alt="server queue vs client in flight', 'alt="tokens/s, server and client', 'alt="harness CPU over time"'):
        assert alt in section, alt
    assert "TTFT split, mean ms" in section


def test_an_edited_telemetry_file_is_tampering(truth_run, tmp_path):
    import shutil

    from harness.analysis.check import EXIT_TAMPERED, check_run

    run_dir, _, _ = truth_run
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    assert {f.what: f.kind for f in check_run(copy, rebuild_dataset=False).findings}["telemetry.jsonl"] == "ok"
    lines = (copy / folder.TELEMETRY).read_text().splitlines()
    lines[1] = lines[1].replace('"ok":true', '"ok":false', 1)  # a scrape made to look failed
    (copy / folder.TELEMETRY).write_text("\n".join(lines) + "\n")
    result = check_run(copy, rebuild_dataset=False)
    assert result.exit_code == EXIT_TAMPERED
    assert {f.what: f.kind for f in result.findings}["telemetry.jsonl"] == "tampered"


def test_a_run_with_telemetry_compares_with_one_without(tmp_path):
    # telemetry is sampled beside the test: it is no difference of the scenario
    from harness.analysis.compare import compare

    common = dict(backend="synthetic", scenario="Offline", min_duration_s=0, min_query_count=2000, max_batch=8)
    plain = runner.run(RunConfig(**common), tmp_path / "a").run_dir
    sampled = runner.run(RunConfig(**common, telemetry={"host": True, "interval_s": 0.2}), tmp_path / "b").run_dir
    assert compare([plain, sampled]).verdict == "comparable: identical settings, data, model, harness and system"


def test_the_telemetry_plots_keep_their_data_off_the_frame_and_levels_from_zero(truth_run):
    """Read off the drawn axes (tests/support/plot_frames.py): no step on the top frame, and
    requests, tokens/s and cores from zero (a queue of 0 to 2 requests is not 1.9 to 2.0)."""
    from harness.analysis.run_data import load_run
    from harness.report.telemetry_plots import telemetry_plots
    from tests.support.plot_frames import check_frames, check_zero

    run_dir, s, _ = truth_run
    data = load_run(run_dir, s)  # what the HTML report hands over
    plots = telemetry_plots(data.telemetry_entries, data.columns, data.child.get("threads") or {},
                            data.child.get("loop_lag_ms"))
    axes = [(cap, ax) for cap, uri in plots.figures for ax in uri.figure.axes]
    assert len(plots.figures) == 3
    assert check_frames(axes) == []
    assert check_zero(axes) == []
    for cap, ax in axes:  # levels and rates: requests, tokens/s, cores, lag
        assert ax.get_ylim()[0] == 0, cap

"""Harness-owned schedules against ground truth: a trace replayed at known times, and
gamma arrivals, through real LoadGen runs (Offline underneath) to the truth server, whose
own receive stamps (tests/support/http_servers.py `receive_log`) say when each request
really arrived."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow.parquet as pq
import pytest

from harness.child.schedule import precise_loop
from harness.results.records import read_records
from harness.results.stats import distribution
from tests.support.http_servers import ServerThread, Timing, openai_app

SCHEMA = jsonschema.Draft202012Validator(
    json.loads((Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json").read_text()))
RATE = 200  # requests a second in the trace: one every 5 ms
ROWS = 300


class LatenessProbe:
    """How late the server's loop runs a timer, every 5 ms: the time its thread waited for a
    core. On a precise loop the figure is not rounded up to a whole millisecond."""

    def __init__(self, loop) -> None:
        self.loop, self.late, self.on = loop, [], True
        loop.call_soon_threadsafe(self._tick, None)

    def _tick(self, due: float | None) -> None:
        now = self.loop.time()
        if due is not None:
            self.late.append(now - due)
        if self.on:
            self.loop.call_at(now + 0.005, self._tick, now + 0.005)

    def p99_ms(self) -> float:
        self.on = False
        return float(distribution(np.array(self.late))["p99"]) * 1e3


@pytest.fixture
def server():
    log: list[int] = []
    with ServerThread(openai_app(Timing(tokens=2)), receive_log=log, loop=precise_loop()) as srv:
        probe = LatenessProbe(srv.loop)
        yield srv, log, probe


def trace(path: Path) -> Path:
    path.write_text("".join(json.dumps({"timestamp": i * 1000 / RATE, "input_length": 8, "output_length": 2,
                                        "hash_ids": [i % 3, 100 + i]}) + "\n" for i in range(ROWS)))
    return path


def replay(run_harness, srv, dataset: str, **settings):
    return run_harness(backend="http", scenario="Offline", dataset=dataset,
                       backend_options={"protocol": "openai-completions", "url": srv.url + "/v1"}, **settings)


def arrival_error_ms(run_dir: Path, log: list[int]) -> np.ndarray:
    """Server receive - harness dispatch per request, ms: both sorted (requests 5 ms apart
    keep their order), the warm-up's receives first and left out."""
    dispatch = np.sort(read_records(run_dir).columns["dispatch_ns"])
    received = np.sort(np.array(log))[-len(dispatch):]
    return (received - dispatch) / 1e6


def bound_ms(run_dir: Path, probe: LatenessProbe) -> float:
    """What may sit between the harness's dispatch stamp and the server's receive stamp:
    the client's own send (building the request, aiohttp writing it on a pooled
    connection), the loopback and the server's epoll wake-up: 0.1-0.3 ms on an idle
    machine here, so 1 ms for the path itself; plus the time either thread waited for a
    core on this shared machine, measured in this run by each loop's lateness probe
    (child.json's loop_lag_ms for the harness, LatenessProbe for the server), at p99."""
    client = json.loads((run_dir / "child.json").read_text())["loop_lag_ms"]["p99"]
    return 1.0 + client + probe.p99_ms()


def test_a_trace_is_dispatched_at_its_times_and_time_scale_halves_it(run_harness, server, tmp_path: Path):
    srv, log, probe = server
    path = trace(tmp_path / "trace.jsonl")
    run_dir, s = replay(run_harness, srv, f"trace:{path},block_size=4")
    sched = s["schedule"]
    SCHEMA.validate(s)  # docs/summary.schema.json, its `schedule` section included
    assert s["harness"]["success_rate"] == 1.0 and sched["requests"] == ROWS
    assert (sched["source"], sched["kind"], sched["timed_from"]) == ("trace:mooncake", "trace replay", "dispatch")
    assert sched["span_s"] == pytest.approx((ROWS - 1) / RATE, abs=1e-9)
    assert sched["offered_per_s"] == pytest.approx(RATE, rel=1e-6)
    # each row was scheduled at issue + its own timestamp, whatever order LoadGen issued it in
    c = read_records(run_dir).columns
    table = pq.read_table(run_dir / "schedule.parquet").to_pydict()
    row_of = dict(zip(c["query_id"].tolist(), c["sample_index"].tolist(), strict=True))
    issue = int(c["issue_ns"][0])
    assert {row_of[q]: t - issue for q, t in zip(table["query_id"], table["scheduled_ns"], strict=True)} == {
        j: round(j / RATE * 1e9) for j in range(ROWS)}
    # the harness's dispatch times are when the server received the requests
    error = arrival_error_ms(run_dir, log)
    bound = bound_ms(run_dir, probe)
    assert error.min() >= 0, error.min()  # a stamp after the request left would be a lie
    assert float(distribution(error)["p99"]) <= bound, (distribution(error), bound)
    # the lag reported is dispatch - scheduled, from the folder alone
    lag = (np.sort(c["dispatch_ns"]) - np.sort(table["scheduled_ns"])) / 1e6
    assert sched["lag_ms"]["p99"] == pytest.approx(float(distribution(lag)["p99"]), abs=1e-6)

    degraded_when_over_its_limit(run_dir, sched)
    # as a sweep point: offered is the schedule's rate, latency counts from dispatch (LoadGen's
    # Offline issue was the start of the whole replay)
    from harness.analysis.points import point_entry

    point = point_entry(run_dir, {"time_scale": "1"})
    assert point["latency_from"] == "dispatch" and point["offered_per_s"] == pytest.approx(RATE, rel=1e-6)
    assert point["metrics"]["latency_p50"] == s["harness"]["service_ms"]["p50"] < s["harness"]["latency_ms"]["p50"]

    log.clear()
    run_dir, fast = replay(run_harness, srv, f"trace:{path},block_size=4,time_scale=2")
    assert fast["schedule"]["span_s"] == pytest.approx(sched["span_s"] / 2, abs=1e-9)
    # the server saw half the span: both ends within the dispatch-to-receive bound
    received = np.sort(np.array(log))[-ROWS:]
    assert abs((received[-1] - received[0]) / 1e9 - sched["span_s"] / 2) * 1e3 <= 2 * bound_ms(run_dir, probe)


def degraded_when_over_its_limit(run_dir: Path, sched: dict) -> None:
    """The same folder's summary rebuilt with a limit under its lag p99 calls it degraded, in
    one line of the terminal report (80 columns), and one above it does not."""
    import yaml
    from rich.console import Console

    from harness.report.terminal import render
    from harness.results.summary import write_summary

    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    for limit, degraded in ((sched["lag_ms"]["p99"] * 0.5, True), (sched["lag_ms"]["p99"] * 2, False)):
        (run_dir / "run.yaml").write_text(yaml.safe_dump({**config, "schedule_lag_limit_ms": limit}))
        summary = write_summary(run_dir, {})
        assert summary["schedule"]["degraded"] is degraded
        console = Console(width=80, record=True, force_terminal=False)
        render(summary, console, str(run_dir))
        text = console.export_text().splitlines()
        lines = [line for line in text if line.startswith("  DEGRADED: send lag p99")]
        assert len(lines) == int(degraded) and all(len(line) <= 80 for line in lines), lines
        # LoadGen's figures labelled: one Offline issue started the whole replay
        assert "  note: from issue (LoadGen's figures, TTFT, queue) includes the scheduled wait" in text
    # the HTML report shows the schedule's table and its offered vs dispatched figure
    from harness.analysis.run_data import load_run
    from harness.report.html import render_html

    page = render_html(load_run(run_dir))
    assert "<h2>arrival schedule</h2>" in page and 'alt="offered vs dispatched load" src="data:image/png;base64,' in page


def test_gamma_arrivals_have_the_cv_of_their_shape(run_harness, server):
    srv, log, probe = server
    shape, rate = 0.5, 400.0
    run_dir, s = replay(run_harness, srv, "synthetic:isl=8,osl=2,n=64",
                        arrivals={"kind": "gamma", "rate": rate, "shape": shape, "seed": 5}, min_duration_s=2)
    sched = s["schedule"]
    n = sched["requests"]
    assert n == 880 and sched["source"] == "gamma" and sched["kind"] == "gamma arrivals at 400/s"  # LoadGen's Offline query: 1.1 x 400/s x 2 s
    due = np.sort(pq.read_table(run_dir / "schedule.parquet")["scheduled_ns"].to_numpy())
    gaps = np.diff(due) / 1e9
    # Var(CV) ~ (k + 1) / (2 k^2 n) for gamma(k) gaps (tests/child/test_schedule.py); four sd
    sd = math.sqrt((shape + 1) / (2 * shape**2 * len(gaps)))
    cv = gaps.std(ddof=1) / gaps.mean()
    assert abs(cv - 1 / math.sqrt(shape)) <= 4 * sd, (cv, sd)
    # the server received that burstiness. Its gap i is the scheduled gap plus the change
    # of each request's offset j (receive - scheduled: the lag, then the send): with v the
    # variance of j, Var(Δj) <= 4 v and |Cov(gap, Δj)| <= sd(gap) 2 sqrt(v) (Cauchy-Schwarz),
    # so the gaps' variance moves by at most 4 v + 4 sd(gap) sqrt(v), whatever the machine did
    received = np.sort(np.array(log))[-n:]
    seen = np.diff(received) / 1e9
    v = float(np.var((received - due) / 1e9))
    seen_cv = seen.std(ddof=1) / seen.mean()
    bound = (4 * v + 4 * gaps.std() * math.sqrt(v)) / gaps.mean() ** 2
    # ... over a mean that moved by (j_last - j_first) / (n - 1): CV^2 scales by (mean / mean')^2
    bound += 3 * cv**2 * abs(seen.mean() - gaps.mean()) / gaps.mean()
    assert abs(seen_cv**2 - cv**2) <= bound, (seen_cv, cv, v)
    schedule_is_hashed(run_dir)


def schedule_is_hashed(run_dir: Path) -> None:
    """`harness check` verifies schedule.parquet as it does the records: the lag is computed
    from it, so a later scheduled time (a flattering edit) is tampering."""
    import pyarrow as pa

    from harness.analysis.check import check_run

    kinds = {f.what: f.kind for f in check_run(run_dir, rebuild_dataset=False).findings}
    assert kinds["schedule.parquet"] == "ok"
    table = pq.read_table(run_dir / "schedule.parquet")
    later = pa.array(table["scheduled_ns"].to_numpy() + 1000)
    pq.write_table(table.set_column(1, "scheduled_ns", later), run_dir / "schedule.parquet")
    kinds = {f.what: f.kind for f in check_run(run_dir, rebuild_dataset=False).findings}
    assert kinds["schedule.parquet"] == "tampered"

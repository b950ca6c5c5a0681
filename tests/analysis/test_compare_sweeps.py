"""`harness compare` on two sweep or two capacity folders, from real sweeps of the synthetic
backend, where two "systems" are two service times.

Truth for the capacity ratio is queueing theory: one worker with a fixed service time S
under LoadGen's Poisson arrivals is an M/D/1 queue, and with the latency bound scaled with
S (L = 10 S) the rate λ* meeting it scales as 1/S, so 4 ms against 2 ms is λ* ratio 0.5
(tests/support/queueing.py computes both λ*; nothing is hard-coded). p90, not p99: 300
queries a try are enough for LoadGen's early stopping to bound a p90, not a p99.

Folders, made once (~45 s): capacity searches at 2 ms / 20 ms and 4 ms / 40 ms, Server
sweeps of target_qps 50,150 at 2 ms and 4 ms, one at 2 ms over 150,300 (other axes), and
two Offline sweeps (isl and osl zipped) against the injected-delay OpenAI server,
one with twice the other's time to first token (token figures).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis.compare import verdict
from harness.analysis.compare_sweeps import compare_sweeps
from harness.config.run_config import RunConfig
from harness.errors import EXIT_NEGATIVE, EXIT_OK, EXIT_USAGE, ConfigError, ResultsError
from harness.report.sweep_compare_view import charts, points_table, sweep_comparison_text
from harness.run.sweep import Axis, SweepSpec, new_sweep, run_sweep
from tests.support.http_servers import ServerThread, Timing, openai_app
from tests.support.queueing import md1_capacity

PERCENTILE = 0.9


def _run(spec: SweepSpec, root: Path) -> Path:
    sweep_dir = new_sweep(spec, root)
    run_sweep(spec, sweep_dir)
    return sweep_dir


def _capacity(service_ms: float, root: Path) -> Path:
    base = RunConfig(backend="synthetic", scenario="Server", backend_options={"service_time_ms": service_ms}, max_batch=1,
                     target_latency_ms=10 * service_ms, target_latency_percentile=PERCENTILE,
                     min_duration_s=0.5, min_query_count=300)
    # another process on a shared machine only ever slows a try: a rate fails only when
    # both of two tries fail (tests/run/test_capacity.py's rule; one try gave 0.63 here).
    # The start scales with 1/S, so both searches try the same rates in units of 1/S with the
    # same arrival seeds: LoadGen's Poisson schedule at twice the rate is the same schedule
    # at half the times, so the two queues walk the same path and meet their bounds alike.
    # (Searched from a pilot instead, each side is its own draw: 300-query tries start from
    # an empty queue and pass p90 above the steady-state λ* by chance, a third of tries at
    # 1.1 λ* in a simulation; CI once saw 0.84 λ* at 2 ms against 1.10 λ* at 4 ms: 0.65.)
    search = {"precision": 0.1, "need": 1, "of": 2, "start_qps": 1000 / service_ms}
    return _run(SweepSpec("capacity", base, search=search), root)


def _sweep(service_ms: float, rates: tuple[str, ...], root: Path) -> Path:
    base = RunConfig(backend="synthetic", scenario="Server", backend_options={"service_time_ms": service_ms}, max_batch=1,
                     target_latency_ms=50, target_latency_percentile=PERCENTILE, min_duration_s=0.5, min_query_count=150)
    return _run(SweepSpec("sweep", base, [Axis("target_qps", rates)]), root)


TTFT_MS, TPOT_MS = 20.0, 3.0


def _llm_sweep(ttft_ms: float, root: Path) -> Path:
    with ServerThread(openai_app(Timing(ttft_ms=ttft_ms, tpot_ms=TPOT_MS))) as srv:
        base = RunConfig(backend="http", scenario="Offline", dataset="synthetic:isl=16,osl=4,n=8",
                         backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "max_in_flight": 8},
                         min_duration_s=0.1, min_query_count=8, offline_expected_qps=1, use_token_latencies=True,
                         ttft_latency_ms=5000, tpot_latency_ms=1000)
        # every request in flight at once: TTFT is the server's, no wait for a slot
        axes = [Axis("isl", ("16", "32")), Axis("osl", ("4", "8"))]
        return _run(SweepSpec("sweep", base, axes, zipped=True), root)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare-sweeps")
    return {
        "cap2": _capacity(2.0, root / "cap2"),
        "cap4": _capacity(4.0, root / "cap4"),
        "sw2": _sweep(2.0, ("50", "150"), root / "sw2"),
        "sw4": _sweep(4.0, ("50", "150"), root / "sw4"),
        "sw2b": _sweep(2.0, ("150", "300"), root / "sw2b"),
        "llm": _llm_sweep(TTFT_MS, root / "llm"),
        "llm2": _llm_sweep(2 * TTFT_MS, root / "llm2"),
    }


def sweep_json(d: Path) -> dict:
    return json.loads((d / "sweep.json").read_text())


def settled(diffs: list) -> list:
    """The differences but the harness's own version: this repository moves while the module
    runs (other work commits on this machine), so the two sides' system.json may record two
    harness_git_commit values; the verdict then says so, and that is right."""
    return [d for d in diffs if d.category != "harness"]


def harness(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=120, env=env)


# --- capacity ---------------------------------------------------------------------------------


def test_the_capacity_ratio_of_a_4ms_to_a_2ms_system_is_the_md1_ratio(folders: dict[str, Path]):
    truth = md1_capacity(4e-3, 40e-3, PERCENTILE) / md1_capacity(2e-3, 20e-3, PERCENTILE)
    assert abs(truth - 0.5) < 1e-6  # λ* scales as 1/S when the bound does
    c = compare_sweeps([folders["cap2"], folders["cap4"]])
    a, b = (sweep_json(folders[k])["capacity"] for k in ("cap2", "cap4"))
    assert a["converged"] and b["converged"], (a["stop_reason"], b["stop_reason"])
    assert c.capacity.ratio == pytest.approx(b["capacity_qps"] / a["capacity_qps"])
    assert abs(c.capacity.ratio - truth) / truth < 0.20, (a["capacity_qps"], b["capacity_qps"])
    # each side's bracket, and the ratios they allow, around the ratio itself
    (alo, ahi), (blo, bhi) = a["bracket_qps"], b["bracket_qps"]
    assert c.capacity.to_dict()["a"]["bracket_qps"] == [alo, ahi] and c.capacity.to_dict()["b"]["bracket_qps"] == [blo, bhi]
    lo, hi = c.capacity.ratio_range
    assert lo == pytest.approx(blo / ahi) and hi == pytest.approx(bhi / alo) and lo <= c.capacity.ratio <= hi
    assert c.capacity.overlap is (max(alo, blo) < min(ahi, bhi)) and c.capacity.overlap is False
    assert "the brackets do not overlap" in c.capacity_line()
    # comparable? the bound was scaled with the service time, and both are said
    assert {(d.category, d.key, d.base, d.other) for d in settled(c.diffs)} == {
        ("scenario", "target_latency_ms", 20.0, 40.0), ("backend", "backend_options.service_time_ms", 2.0, 4.0)}
    assert verdict(settled(c.diffs)) == "not comparable for one question: scenario, backend differ"
    assert c.verdict == verdict(c.diffs)
    assert c.axes.match and c.axes.notes[0].startswith("search settings match: attainment none, need 1, of 2")


def test_a_capacity_gate_fires_beyond_the_brackets_and_not_within_them(folders: dict[str, Path]):
    cap2, cap4 = folders["cap2"], folders["cap4"]
    fired = compare_sweeps([cap2, cap4], ["capacity < -5%", "capacity_qps < -80%"])
    assert [r.fired for r in fired.rules] == [True, False] and fired.failed
    assert fired.rules[0].change == pytest.approx((fired.capacity.ratio - 1) * 100)
    assert not compare_sweeps([cap4, cap2], ["capacity < -5%"]).failed  # twice the capacity is no regression
    # the same search on both sides: no change, and the brackets overlap, so a rule that
    # holds at 0 % is past its threshold but not declared
    same = compare_sweeps([cap2, cap2], ["capacity <= 0%"])
    assert same.capacity.ratio == 1.0 and same.capacity.overlap is True
    assert not same.rules[0].fired and "brackets overlap" in same.rules[0].note
    assert same.verdict.startswith("comparable: identical")
    with pytest.raises(ConfigError, match="capacity comparison gates on its answer"):
        compare_sweeps([cap2, cap4], ["latency_p99 > +10%"])
    with pytest.raises(ConfigError, match="not points"):
        compare_sweeps([cap2, cap4], ["capacity < -1pt"])


# --- sweeps -----------------------------------------------------------------------------------


def test_sweeps_pair_points_by_their_axis_values_with_the_ratios(folders: dict[str, Path]):
    c = compare_sweeps([folders["sw2"], folders["sw4"]])
    a, b = (sweep_json(folders[k]) for k in ("sw2", "sw4"))
    assert [p.label for p in c.matched] == ["target_qps=50", "target_qps=150"] and len(c.pairs) == 2
    assert c.names == ["throughput", "latency_p99"]  # no token figures in a tensor backend's points
    for pair, pa, pb in zip(c.pairs, a["points"], b["points"]):
        figs = pair.figures(c.names)
        assert figs["throughput"]["a"] == pa["completed_per_s"] and figs["throughput"]["b"] == pb["completed_per_s"]
        assert figs["latency_p99"]["ratio"] == pytest.approx(pb["metrics"]["latency_p99"] / pa["metrics"]["latency_p99"])
        # below saturation both systems complete what LoadGen offers
        assert 0.8 < figs["throughput"]["ratio"] < 1.25
    assert c.axes.match and c.axes.notes == ["axes match: target_qps = 50, 150"]
    assert [(d.category, d.key) for d in settled(c.diffs)] == [("backend", "backend_options.service_time_ms")]
    assert verdict(settled(c.diffs)).startswith("comparable as a backend comparison")
    # a rule over the points: every throughput change is below +50 %, none below -50 %
    gated = compare_sweeps([folders["sw2"], folders["sw4"]], ["throughput < +50%", "throughput < -50%"])
    assert [r.fired for r in gated.rules] == [True, False]
    assert "at 2 of 2 matched points" in gated.rules[0].note
    with pytest.raises(ConfigError, match="capacity is a capacity search's answer"):
        compare_sweeps([folders["sw2"], folders["sw4"]], ["capacity < -5%"])


def test_axes_that_differ_are_said_and_only_the_shared_points_pair(folders: dict[str, Path]):
    c = compare_sweeps([folders["sw2"], folders["sw2b"]])
    assert [p.label for p in c.matched] == ["target_qps=150"]
    assert [(p.label, p.a is None, p.b is None) for p in c.pairs if not p.matched] == [
        ("target_qps=50", False, True), ("target_qps=300", True, False)]
    assert not c.axes.match and c.axes.notes == ["axes differ: target_qps values differ (only A 50; only B 300)"]
    assert settled(c.diffs) == []  # same system: only the plan differs
    assert not c.failed
    strict = compare_sweeps([folders["sw2"], folders["sw2b"]], expect=["system"])
    assert strict.unexpected == ["axes"] and strict.failed
    text = sweep_comparison_text(c, "md")
    assert "only in A: target_qps=50; only in B: target_qps=300" in text
    assert re.search(r"^\| 300 \| done/s \| — \| [\d.]+ \| — \|$", text, re.M), text


def test_token_sweeps_show_ttft_and_tpot_p99_side_by_side(folders: dict[str, Path]):
    c = compare_sweeps([folders["llm"], folders["llm2"]])
    assert c.names == ["throughput", "latency_p99", "ttft_p99", "tpot_p99"]
    assert [p.label for p in c.matched] == ["isl=16 osl=4", "isl=32 osl=8"]
    for pair in c.matched:
        figs = pair.figures(c.names)
        # the server's first token takes TTFT_MS longer on B (the client's own time, the
        # same on both, cancels in the difference); its decode is the same
        ttft = figs["ttft_p99"]
        assert 0.5 * TTFT_MS < ttft["b"] - ttft["a"] < 2 * TTFT_MS and ttft["ratio"] > 1.25, figs
        assert 0.5 < figs["tpot_p99"]["ratio"] < 2.0, figs
    # two servers: only their addresses differ in the plans
    assert [(d.category, d.key) for d in settled(c.diffs)] == [("backend", "backend_options.url")]
    assert c.axes.notes == ["axes match: isl = 16, 32; osl = 4, 8"]
    header, rows = points_table(c)
    assert header == ["point", "figure", "A", "B", "B/A"]
    assert [r[1] for r in rows[:5]] == ["done/s", "p99 ms", "TTFT p99 ms", "TPOT p99 ms", "verdict"]
    assert {"throughput vs latency", "B/A at the matched points"} <= {ch.title for ch in charts(c)}
    out = harness("compare", str(folders["llm"]), str(folders["llm2"]), "--fail-if", "ttft_p99 > +20%")
    assert out.returncode == EXIT_NEGATIVE, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    assert re.search(r"^isl=32 osl=8\s+done/s ", out.stdout, re.M) and "TTFT p99 ms" in out.stdout
    # the servers' addresses differ at their ports: a cut value keeps both ends
    (url,) = re.findall(r"^backend\s+backend_options\.url\s+(\S+)\s+(\S+)$", out.stdout, re.M)
    ports = [c.sides[i].base["backend_options"]["url"].split(":")[-1] for i in (0, 1)]
    assert all(v.endswith(p) for v, p in zip(url, ports)), (url, ports)
    assert re.search(r"^  FAIL ttft_p99 > \+20%: \+[\d.]+% · past the threshold at 2 of 2", out.stdout, re.M)


# --- the command: views, formats, mixed inputs --------------------------------------------------


def test_the_terminal_view_fits_80_columns_and_exits_by_the_gate(folders: dict[str, Path]):
    out = harness("compare", str(folders["cap2"]), str(folders["cap4"]), "--fail-if", "capacity < -5%")
    assert out.returncode == EXIT_NEGATIVE, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    ratio = compare_sweeps([folders["cap2"], folders["cap4"]]).capacity.ratio
    assert lines[0] == "FAIL: 1 of 1 rules fired (capacity < -5%)"
    assert f"capacity ratio B/A: {ratio:.3f}" in out.stdout
    assert re.search(r"^bracket \(QPS\)\s+[\d.]+–[\d.]+\s+[\d.]+–[\d.]+\s+[\d.]+–[\d.]+$", out.stdout, re.M), out.stdout
    assert re.search(r"^backend\s+backend_options\.service_time_ms\s+2\.0\s+4\.0$", out.stdout, re.M), out.stdout
    assert "FAIL capacity < -5%:" in out.stdout
    out = harness("compare", str(folders["sw2"]), str(folders["sw4"]))
    assert out.returncode == EXIT_OK, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    p99 = [p["metrics"]["latency_p99"] for p in sweep_json(folders["sw4"])["points"]]
    assert re.search(r"^150\s+done/s\s+\S+\s+\S+\s+[\d.]+$", out.stdout, re.M), out.stdout
    assert all(f"{v:.3f}" in out.stdout for v in p99)
    verdict_text = compare_sweeps([folders["sw2"], folders["sw4"]]).verdict
    assert f"comparable? {verdict_text}" in " ".join(out.stdout.split())


def test_the_html_page_overlays_both_sides_curves(folders: dict[str, Path], tmp_path: Path):
    sw2, sw4 = folders["sw2"], folders["sw4"]
    c = compare_sweeps([sw2, sw4])
    by_title = {ch.title: ch for ch in charts(c)}
    p99 = by_title["p99 latency vs target_qps"]
    for side, d in zip("AB", (sw2, sw4)):
        (series,) = [s for s in p99.series if s.side == side]
        points = sweep_json(d)["points"]
        assert series.xs == [50.0, 150.0] and series.ys == [p["metrics"]["latency_p99"] for p in points]
    assert {s.label for s in by_title["throughput vs latency"].series} == {"A p99", "A p50", "B p99", "B p50"}
    cap = compare_sweeps([folders["cap2"], folders["cap4"]])
    (lat, _) = charts(cap)
    assert [(side, x) for side, x, _ in lat.lines] == [("A", cap.capacity.a["capacity_qps"]), ("B", cap.capacity.b["capacity_qps"])]
    assert [tuple(s[1:]) for s in lat.spans] == [tuple(cap.capacity.a["bracket_qps"]), tuple(cap.capacity.b["bracket_qps"])]
    out = tmp_path / "compare.html"
    run = harness("compare", str(sw2), str(sw4), "--format", "html", "-o", str(out))
    assert run.returncode == EXIT_OK, run.stderr
    page = out.read_text()
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert [alt for alt, _ in images] == [ch.title for ch in charts(c)]
    assert all(base64.b64decode(b).startswith(b"\x89PNG") for _, b in images)
    assert f"comparable? {c.verdict}" in page and "http" not in page.split("<body>")[1]
    # read off the drawn axes (tests/support/plot_frames.py): no point on the frame, rates from zero
    from harness.report.sweep_compare_view import draw
    from tests.support.plot_frames import check_frames, check_zero

    for comparison in (c, cap):
        axes = [(ch.title, ax) for ch in charts(comparison) for ax in draw(ch).figure.axes]
        assert check_frames(axes) == []
        assert check_zero(axes) == []


def test_json_holds_the_comparison(folders: dict[str, Path]):
    c = compare_sweeps([folders["cap2"], folders["cap4"]])
    data = json.loads(sweep_comparison_text(c, "json"))
    assert data["kind"] == "capacity" and data["capacity"]["ratio"] == pytest.approx(c.capacity.ratio)
    assert data["capacity"]["brackets_overlap"] is False and data["points"] == []
    keys = [d["key"] for d in data["comparable"]["differences"] if d["category"] != "harness"]  # see settled()
    assert keys == ["target_latency_ms", "backend_options.service_time_ms"]


def test_mixed_inputs_are_one_line_and_exit_2(folders: dict[str, Path], tmp_path: Path):
    sw2 = folders["sw2"]
    run_dir = sw2 / sweep_json(sw2)["points"][0]["run"]
    out = harness("compare", str(sw2), str(run_dir))
    assert out.returncode == EXIT_USAGE and out.stdout == ""
    assert out.stderr.splitlines() == [f"error: compare: {sw2} is a sweep folder and {run_dir} is not: compare two "
                                       "sweep (or two capacity) folders, or two runs"], out.stderr
    with pytest.raises(ConfigError, match="is a sweep folder and"):
        compare_sweeps([run_dir, sw2])
    with pytest.raises(ConfigError, match="a capacity folder and .* a sweep folder"):
        compare_sweeps([folders["cap2"], sw2])
    with pytest.raises(ConfigError, match="two sweep folders at a time"):
        compare_sweeps([sw2, folders["sw4"], folders["sw2b"]])
    # a sweep folder whose plan is gone is a damaged folder (exit 7), named
    broken = tmp_path / "broken"
    shutil.copytree(sw2, broken)
    (broken / "sweep.yaml").unlink()
    with pytest.raises(ResultsError, match="has no sweep.yaml"):
        compare_sweeps([broken, folders["sw4"]])

"""compare: a planted 20 % slowdown is caught, two identical configs stay quiet, and
runs that differ in more than one respect are reported with every difference."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis.compare import Side, compare, evaluate, parse_rule
from harness.config.run_config import RunConfig
from harness.errors import ConfigError
from harness.run.repeat import run_repeated

# Service time dominated by sleeping (16 ms a batch), so a loaded 2-core box shifts it little.
BASE = dict(backend="synthetic", scenario="Offline", max_batch=16, min_duration_s=0.5, offline_expected_qps=1200)


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    # 1.0 -> 1.25 ms per sample: throughput falls to 0.8x, latency rises 1.25x.
    return {
        "base": run_repeated(RunConfig(**BASE, backend_options={"per_sample_ms": 1.0}), root / "a", 3).repeat_dir,
        "same": run_repeated(RunConfig(**BASE, backend_options={"per_sample_ms": 1.0}), root / "b", 3).repeat_dir,
        "slow": run_repeated(RunConfig(**BASE, backend_options={"per_sample_ms": 1.25}), root / "c", 3).repeat_dir,
    }


RULES = ["throughput < -10%", "p99_latency > +15%", "success_rate < -0.5pt"]


def test_planted_slowdown_is_caught(sides):
    c = compare([sides["base"], sides["slow"]], RULES)
    fired = {r.rule.metric: r for r in c.rules if r.fired}
    assert set(fired) == {"throughput", "p99_latency"}
    assert -25 < fired["throughput"].change < -15
    assert 15 < fired["p99_latency"].change < 35
    assert "beyond the run-to-run spread" in fired["throughput"].note
    assert c.failed
    # The only difference is the planted backend setting.
    assert [(d.category, d.key, d.base, d.other) for d in c.diffs if d.category != "harness"] == [
        ("backend", "backend_options.per_sample_ms", 1.0, 1.25)
    ]
    assert c.verdict.startswith("comparable as a backend comparison")


def test_identical_configs_stay_quiet(sides):
    c = compare([sides["base"], sides["same"]], RULES)
    assert not c.failed and not any(r.fired for r in c.rules)
    throughput = next(r for r in c.rules if r.rule.metric == "throughput")
    assert abs(throughput.change) < 10
    # A commit by someone else between the runs changes the harness version; nothing else may differ.
    assert {d.category for d in c.diffs} <= {"harness"}


def test_incomparable_runs_list_their_differences(sides, tmp_path: Path):
    other = run_repeated(
        RunConfig(**{**BASE, "min_duration_s": 0.3}, dataset="synthetic:n=512", backend_options={"per_sample_ms": 1.0}),
        tmp_path, 2,
    ).repeat_dir
    c = compare([sides["base"], other], [], expect=["system"])
    keys = {(d.category, d.key) for d in c.diffs}
    assert {("scenario", "min_duration_s"), ("scenario", "loadgen.min_duration_ms"), ("dataset", "dataset"),
            ("dataset", "dataset.sha256")} <= keys
    diff = next(d for d in c.diffs if d.key == "min_duration_s")
    assert (diff.base, diff.other) == (0.5, 0.3)
    assert c.verdict.startswith("not comparable") and "scenario" in c.verdict and "dataset" in c.verdict
    assert c.unexpected[:2] == ["scenario", "dataset"] and c.failed


def _side(name: str, values: list[float]) -> Side:
    return Side(Path(name), [Path(f"{name}{i}") for i in range(len(values))], {"throughput": values})


def test_threshold_alone_does_not_fire_inside_the_spread():
    rule = parse_rule("throughput < -5%")
    base = _side("a", [100.0, 90.0, 110.0])
    overlapping = _side("b", [88.0, 92.0, 95.0])  # median -8 %, but 95 > 90: within the spread
    apart = _side("c", [85.0, 88.0, 89.0])  # every run below every base run
    r1, r2 = evaluate(rule, base, overlapping), evaluate(rule, base, apart)
    assert r1.change == pytest.approx(-8.0) and not r1.fired
    assert r2.change == pytest.approx(-12.0) and r2.fired
    single = evaluate(rule, _side("d", [100.0]), _side("e", [94.0]))
    assert single.fired and single.change == pytest.approx(-6.0)


def test_rules_are_parsed_strictly(sides):
    assert parse_rule("success_rate < -0.5pt").relative is False
    assert parse_rule("p99_latency > +10%").threshold == 10.0
    with pytest.raises(ConfigError, match="unknown metric 'thruput'"):
        parse_rule("thruput < -5%")
    with pytest.raises(ConfigError, match="expected METRIC OP CHANGE"):
        parse_rule("throughput drops 5%")
    # A gate on a figure the runs do not have cannot pass silently.
    c = compare([sides["base"], sides["same"]], ["ttft_p99 > +10%"])
    assert c.failed and "not available" in c.rules[0].note


def test_cli_exit_codes_and_markdown(sides):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", "compare", *map(str, args)],
                              capture_output=True, text=True, timeout=60)

    slow = run(sides["base"], sides["slow"], "--fail-if", "throughput < -10%", "--format", "md")
    assert slow.returncode == 1
    assert "| throughput (samples/s) |" in slow.stdout and "❌" in slow.stdout
    same = run(sides["base"], sides["same"], "--fail-if", "throughput < -10%")
    assert same.returncode == 0, same.stdout
    three = run(sides["base"], sides["same"], sides["slow"], "--format", "json")
    assert three.returncode == 0 and three.stdout.count('"path"') == 3


def test_cost_per_success_is_compared_when_priced(sides, tmp_path: Path):
    from harness.analysis.cost import cost_for_run, parse_sheet, write_cost
    from harness.results.folder import load_summary

    sheet = parse_sheet({"device_hourly": 3.6}, "test")  # 0.001 per device-second
    runs = []
    for name in ("base", "slow"):
        agg = json.loads((sides[name] / "aggregate.json").read_text())
        run = Path(shutil.copytree(sides[name] / agg["runs"][0], tmp_path / name))
        write_cost(run, cost_for_run(run, load_summary(run), sheet))
        runs.append(run)
    c = compare(runs, ["cost_per_success > +10%"])
    base, slow = (s.median("cost_per_success") for s in c.sides)
    # Same device price, 0.8x the throughput: each success costs about 1.25x.
    assert 1.1 < slow / base < 1.45
    assert c.rules[0].fired


def test_rerun_repeats_the_resolved_config_and_compares(sides, tmp_path: Path):
    agg = json.loads((sides["base"] / "aggregate.json").read_text())
    first = sides["base"] / agg["runs"][0]
    out = subprocess.run([sys.executable, "-m", "harness", "rerun", str(first), "--output-dir", str(tmp_path),
                          "--format", "json", "--fail-if", "success_rate < -0.5pt"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (new,) = tmp_path.iterdir()
    assert (new / "run.yaml").read_text() == (first / "run.yaml").read_text()
    result = json.loads(out.stdout)
    assert {d["category"] for d in result["comparable"]["differences"]} <= {"harness"}
    assert result["sides"][1]["metrics"]["success_rate"]["median"] == 100.0

"""harness.results.stats against LoadGen's own rule, and the metric vocabulary's old names.

LoadGen (loadgen/results.cc, ProcessLatencies) sorts the latencies and takes
`sorted[sample_count * percentile]` with the percentiles of results.h, as doubles; the
product is truncated to an index. `_loadgen` below is that line, in Python floats (the
same IEEE doubles).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.compare import Side, evaluate, parse_rule
from harness.results import metrics
from harness.results.stats import (
    PERCENTILE_KEYS,
    PERCENTILES,
    distribution,
    median,
    percentile,
    percentile_key,
    rank,
    ratio,
    weighted_distribution,
)
from harness.results.summary import percentiles_ms

ROOT = Path(__file__).resolve().parents[2]
# results.h: latency_percentiles[6] = {{.50}, {.90}, {.95}, {.97}, {.99}, {.999}}
LOADGEN_PERCENTILES = (0.50, 0.90, 0.95, 0.97, 0.99, 0.999)


def _loadgen(values: list[int], q: float) -> int:
    return sorted(values)[int(len(values) * q)]


def _loadgen_ms(values_ns: list[int]) -> dict[str, float]:
    return {percentile_key(p): _loadgen(values_ns, q) / 1e6 for p, q in zip(PERCENTILES, LOADGEN_PERCENTILES, strict=True)}


def test_the_list_is_loadgens():
    assert [p / 100 for p in PERCENTILES] == pytest.approx(list(LOADGEN_PERCENTILES), abs=1e-15)
    assert PERCENTILE_KEYS == ("p50", "p90", "p95", "p97", "p99", "p99_9")


def test_keys_are_summary_jsons():
    schema = json.loads((ROOT / "docs" / "summary.schema.json").read_text())
    latency = schema["$defs"]["latency"]["required"]
    assert tuple(k for k in latency if k not in ("mean", "min", "max")) == PERCENTILE_KEYS
    assert set(percentiles_ms(np.arange(1, 11))) == set(latency)
    assert set(PERCENTILE_KEYS) <= set(schema["$defs"]["stats"]["properties"])


@pytest.mark.parametrize(
    "values",
    [
        [7_000_000],  # n = 1: every percentile is the one value
        [2_000_000, 1_000_000],  # n = 2: p50 is the upper value, not their mean
        list(range(1_000_000, 11_000_000, 1_000_000)),  # n = 10: p99.9 is int(9.99) = 9, the max
        [5_000_000] * 3 + [1_000_000, 9_000_000],  # ties
        list(range(1, 1001)),  # n = 1000: p99.9 is index 999, the max
        list(range(1, 1002)),  # n = 1001: p99.9 is int(999.999) = 999, one below the max
    ],
)
def test_percentiles_equal_loadgens_on_known_arrays(values):
    got = percentiles_ms(np.asarray(values, dtype=np.int64))
    assert {k: got[k] for k in PERCENTILE_KEYS} == _loadgen_ms(values)
    assert got["min"] == min(values) / 1e6 and got["max"] == max(values) / 1e6
    assert got["mean"] == pytest.approx(sum(values) / len(values) / 1e6)


def test_small_n_at_p99_9():
    for n in range(1, 1002):
        assert rank(n, 99.9) == int(n * 0.999)
    assert rank(1, 99.9) == 0 and rank(10, 99.9) == 9 and rank(1001, 99.9) == 999
    assert percentile(np.arange(1001), 99.9) == 999.0 and percentile(np.arange(1000), 99.9) == 999.0


def test_rank_equals_loadgens_literals_for_every_n_to_a_million():
    # p / 100 is one ulp above LoadGen's 0.999 for p99.9; the truncated product must not move.
    n = np.arange(1, 1_000_001, dtype=np.int64)
    for p, q in zip(PERCENTILES, LOADGEN_PERCENTILES, strict=True):
        assert np.array_equal(np.floor(n * (p / 100)), np.floor(n * q)), p


def test_random_arrays_match_loadgen():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 99, 100, 101, 999, 1000, 1001, 4321):
        values = rng.integers(0, 10**9, n).tolist()
        got = percentiles_ms(np.asarray(values, dtype=np.int64))
        assert {k: got[k] for k in PERCENTILE_KEYS} == _loadgen_ms(values), n


def test_empty_is_all_none():
    for d in (distribution(np.array([])), weighted_distribution(np.array([]))):
        assert set(d) == set(PERCENTILE_KEYS) | {"mean", "min", "max"} and all(v is None for v in d.values())
    assert distribution(np.array([]), percentiles=(50, 99)) == {"p50": None, "p99": None, "mean": None, "min": None, "max": None}


def test_weighted_rule_with_unit_weights_is_the_plain_rule():
    rng = np.random.default_rng(1)
    for n in (1, 2, 10, 1000, 1001, 5000):
        ints = rng.integers(0, 10**9, n)
        floats = rng.lognormal(0, 2, n)
        # Integer values: every figure equal, the mean too (the sums are exact).
        assert weighted_distribution(ints, np.ones(n), unit=1e6) == distribution(ints, unit=1e6)
        assert weighted_distribution(ints, None, unit=1e6) == distribution(ints, unit=1e6)
        w, p = weighted_distribution(floats, np.ones(n)), distribution(floats)
        assert {k: w[k] for k in PERCENTILE_KEYS + ("min", "max")} == {k: p[k] for k in PERCENTILE_KEYS + ("min", "max")}
        assert w["mean"] == pytest.approx(p["mean"], rel=1e-12)


def test_integer_weights_count_each_value_that_many_times():
    rng = np.random.default_rng(2)
    for n in (1, 3, 50, 777):
        values = rng.lognormal(0, 1, n)
        weights = rng.integers(1, 12, n)
        w = weighted_distribution(values, weights)
        p = distribution(np.repeat(values, weights))
        assert {k: w[k] for k in PERCENTILE_KEYS} == {k: p[k] for k in PERCENTILE_KEYS}
        assert w["mean"] == pytest.approx(p["mean"], rel=1e-12)


def test_weights_on_a_known_array():
    # Expanded: [1]*8 + [2] + [3]; index int(0.5 * 10) = 5 -> 1, int(0.9 * 10) = 9 -> 3.
    d = weighted_distribution(np.array([3.0, 1.0, 2.0]), np.array([1.0, 8.0, 1.0]))
    assert (d["p50"], d["p90"], d["p99_9"], d["min"], d["max"]) == (1.0, 3.0, 3.0, 1.0, 3.0)
    assert d["mean"] == pytest.approx((3 + 8 + 2) / 10)
    # Fractional shares (ITL's scaled token counts) move the rank by weight, not by count.
    d = weighted_distribution(np.array([1.0, 2.0]), np.array([0.5, 1.5]))
    assert (d["p50"], d["mean"]) == (2.0, pytest.approx((0.5 + 3.0) / 2))


def test_ratio_and_median_say_unknown_with_none():
    assert ratio(3.0, 2.0) == 1.5 and ratio(0.0, 2.0) == 0.0
    assert ratio(None, 2.0) is None and ratio(1.0, None) is None and ratio(1.0, 0.0) is None
    assert median([]) is None and median([1.0, 4.0]) == 2.5


# --- the vocabulary ------------------------------------------------------------------------

OLD_NAMES = {"p50_latency": "latency_p50", "p90_latency": "latency_p90", "p99_latency": "latency_p99",
             "throughput_per_s": "throughput", "latency_p90_ms": "latency_p90", "latency_p99_ms": "latency_p99"}


def test_one_name_per_figure():
    names = [m.name for m in metrics.METRICS]
    aliases = [a for m in metrics.METRICS for a in m.aliases]
    assert len(set(names)) == len(names) and len(set(aliases)) == len(aliases)
    assert not set(names) & set(aliases)
    assert metrics.ALIASES == OLD_NAMES


@pytest.mark.parametrize("alias", sorted(OLD_NAMES))
def test_every_old_alias_resolves_in_a_fail_if_rule(alias):
    rule = parse_rule(f"{alias} > +10%")
    assert rule.canonical == OLD_NAMES[alias] and rule.metric == alias


@pytest.mark.parametrize("name", metrics.NAMES)
def test_every_canonical_name_is_a_rule(name):
    assert parse_rule(f"{name} < -5%").canonical == name


def test_an_alias_rule_gates_the_canonical_figure():
    base = Side(Path("a"), [Path("a0")], {"latency_p99": [10.0]})
    slower = Side(Path("b"), [Path("b0")], {"latency_p99": [12.0]})
    r = evaluate(parse_rule("p99_latency > +10%"), base, slower)
    assert r.fired and r.change == pytest.approx(20.0)


def test_from_summary_names_the_figures():
    summary = {
        "run": {"scenario": "MultiStream"},
        "harness": {"throughput_per_s": 100.0, "success_rate": 0.5, "latency_ms": {"p50": 1.0, "p90": 1.0, "p99": 1.0},
                    "query_latency_ms": {"p50": 2.0, "p90": 3.0, "p99": 4.0}},
        "tokens": None,
    }  # fmt: skip
    got = metrics.from_summary(summary)
    assert set(got) == set(metrics.NAMES) - {"cost_per_success"}
    assert (got["throughput"], got["success_rate"]) == (100.0, 50.0)
    assert (got["latency_p50"], got["latency_p90"], got["latency_p99"]) == (2.0, 3.0, 4.0)  # per query, as LoadGen's
    assert got["ttft_p99"] is None


def test_the_docs_list_every_name():
    text = (ROOT / "docs" / "reproducibility.md").read_text()
    for name in metrics.NAMES + tuple(metrics.ALIASES):
        assert f"`{name}`" in text, name


def test_no_other_module_computes_a_percentile():
    rule = re.compile(r"np\.(percentile|quantile|nanpercentile|nanquantile|median)\(|int\(0\.\d+ \* ")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "harness").rglob("*.py")
                 if p.name != "stats.py" and rule.search(p.read_text())]  # fmt: skip
    assert offenders == []

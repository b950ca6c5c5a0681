"""`harness compare`: headline figures side by side, "comparable?", and a noise-aware gate.

A side is one results folder or a repeat folder (`aggregate.json` + its runs). Figures
are the harness's own (successful samples only; LoadGen's agree within ~1 %, see
docs/architecture.md). With repeats on both sides a --fail-if rule fires only when the
median change passes the threshold *and* the ranges do not overlap (every candidate run
worse than every base run): for 5 vs 5 runs that alone is a one-sided Mann-Whitney test
at p = 1/252 ≈ 0.004, so run-to-run noise does not fail a build.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.cost import read_cost
from harness.errors import ConfigError, ResultsError
from harness.results import folder


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    higher_is_better: bool


METRICS = (
    Metric("throughput", "throughput", "samples/s", True),
    Metric("p50_latency", "latency p50", "ms", False),
    Metric("p90_latency", "latency p90", "ms", False),
    Metric("p99_latency", "latency p99", "ms", False),
    Metric("success_rate", "success rate", "%", True),
    Metric("ttft_p50", "TTFT p50", "ms", False),
    Metric("ttft_p99", "TTFT p99", "ms", False),
    Metric("tpot_p50", "TPOT p50", "ms", False),
    Metric("tpot_p99", "TPOT p99", "ms", False),
    Metric("output_tokens_per_s", "output tokens/s", "tokens/s", True),
    Metric("cost_per_success", "cost per successful task", "", False),
)
METRIC_NAMES = tuple(m.name for m in METRICS)


def headline(run_dir: Path) -> dict[str, float | None]:
    """The figures people compare, from one results folder (None where the run has none)."""
    s = folder.load_summary(run_dir)
    h = s.get("harness") or {}
    lat = h.get("query_latency_ms") if s["run"]["scenario"] == "MultiStream" else h.get("latency_ms")
    lat = lat or {}
    rate = h.get("success_rate")
    out: dict[str, float | None] = {
        "throughput": h.get("throughput_per_s"),
        "p50_latency": lat.get("p50"),
        "p90_latency": lat.get("p90"),
        "p99_latency": lat.get("p99"),
        "success_rate": rate * 100 if rate is not None else None,  # percent, so "pt" means points
    }
    tokens = s.get("tokens") or {}
    for part in ("ttft", "tpot"):
        section = tokens.get(f"{part}_ms") or {}
        out[f"{part}_p50"] = section.get("p50")
        out[f"{part}_p99"] = section.get("p99")
    out["output_tokens_per_s"] = tokens.get("output_tokens_per_s")
    cost = read_cost(run_dir) or {}
    out["cost_per_success"] = cost.get("per_successful_task")
    return out


# --- statistics over repeats -------------------------------------------------------------

# Two-sided 95 % Student t quantiles by degrees of freedom; beyond 30 the normal 1.96.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)


def stats(values: list[float]) -> dict[str, Any]:
    """Median and spread of one figure over runs; ci95 is the t interval of the mean."""
    n = len(values)
    if n == 0:
        return {"n": 0, "values": [], "median": None, "min": None, "max": None, "mean": None, "stdev": None,
                "ci95": None, "relative_spread": None}
    mean = statistics.fmean(values)
    median = statistics.median(values)
    sd = statistics.stdev(values) if n > 1 else None
    ci = None
    if sd is not None:
        half = (_T95[n - 2] if n - 1 <= len(_T95) else 1.96) * sd / math.sqrt(n)
        ci = [mean - half, mean + half]
    return {
        "n": n, "values": values, "median": median, "min": min(values), "max": max(values), "mean": mean,
        "stdev": sd, "ci95": ci,
        "relative_spread": (max(values) - min(values)) / abs(median) if median else None,
    }


# --- a side: one run or a repeat folder ---------------------------------------------------


@dataclass
class Side:
    path: Path
    run_dirs: list[Path]
    values: dict[str, list[float]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.path.name

    @property
    def repeated(self) -> bool:
        return len(self.run_dirs) > 1

    def median(self, metric: str) -> float | None:
        v = self.values.get(metric) or []
        return statistics.median(v) if v else None


def load_side(path: Path) -> Side:
    folder.require_folder(path)
    data = folder.read_json(path, folder.AGGREGATE)
    if data is not None:
        if not isinstance(data.get("runs"), list) or not data["runs"]:
            raise ResultsError(f"{path / folder.AGGREGATE} is damaged: it lists no runs")
        run_dirs = [path / str(name) for name in data["runs"]]
    else:
        run_dirs = [path]
    side = Side(path, run_dirs)
    for run_dir in run_dirs:
        for name, value in headline(run_dir).items():
            if value is not None:
                side.values.setdefault(name, []).append(float(value))
    return side


# --- comparable? ----------------------------------------------------------------------------

_BACKEND_KEYS = ("backend", "backend_options", "workers", "max_batch", "batch_timeout_ms")
_DATASET_KEYS = ("dataset", "seed")
_IGNORED_KEYS = ("name", "cost", "model")  # model: compared by its sha256, not its path
_HARNESS_PACKAGES = ("loadgen-harness", "mlcommons-loadgen")
CATEGORIES = ("scenario", "backend", "dataset", "model", "harness", "system")


@dataclass(frozen=True)
class Difference:
    category: str
    key: str
    base: Any
    other: Any
    run: str


def _facts(run_dir: Path) -> dict[str, dict[str, Any]]:
    """What must match, by category, flattened to key -> value."""
    config = folder.read_run_config(run_dir) or {}
    summary = folder.load_summary(run_dir)
    manifest = folder.read_json(run_dir, folder.MANIFEST) or {}
    system = folder.read_json(run_dir, folder.SYSTEM) or {}
    facts: dict[str, dict[str, Any]] = {c: {} for c in CATEGORIES}
    for key, value in config.items():
        if key in _IGNORED_KEYS:
            continue
        category = "backend" if key in _BACKEND_KEYS else "dataset" if key in _DATASET_KEYS else "scenario"
        if key == "backend_options":
            for k, v in (value or {}).items():
                facts["backend"][f"backend_options.{k}"] = v
        else:
            facts[category][key] = value
    for key, value in (summary["loadgen"].get("effective_settings") or {}).items():
        facts["scenario"][f"loadgen.{key}"] = value
    described = summary.get("backend") or {}
    for key, value in described.items():
        if key not in (config.get("backend_options") or {}) and key != "backend":
            facts["backend"][f"describe.{key}"] = value
    facts["dataset"]["dataset.sha256"] = (summary.get("dataset") or {}).get("sha256")
    facts["model"]["model.sha256"] = manifest.get("sha256", {}).get("model")
    packages = dict(system.get("packages") or {})
    facts["harness"]["harness_version"] = manifest.get("harness_version")
    facts["harness"]["harness_git_commit"] = system.get("harness_git_commit")
    for name in _HARNESS_PACKAGES:
        facts["harness"][f"packages.{name}"] = packages.pop(name, None)
    for key, value in system.items():
        if key not in ("packages", "harness_git_commit"):
            facts["system"][key] = value
    for name, version in packages.items():
        facts["system"][f"packages.{name}"] = version
    return facts


def differences(run_dirs: list[Path]) -> list[Difference]:
    """Every fact in which a run differs from the first one."""
    base = _facts(run_dirs[0])
    found: list[Difference] = []
    for other_dir in run_dirs[1:]:
        other = _facts(other_dir)
        for category in CATEGORIES:
            keys = sorted(set(base[category]) | set(other[category]))
            for key in keys:
                a, b = base[category].get(key), other[category].get(key)
                if a != b:
                    found.append(Difference(category, key, a, b, other_dir.name))
    return found


def verdict(diffs: list[Difference]) -> str:
    cats = sorted({d.category for d in diffs}, key=CATEGORIES.index)
    if not cats:
        return "comparable: identical settings, data, model, harness and system"
    if cats == ["system"]:
        return "comparable as a hardware comparison: only the system differs"
    if set(cats) <= {"backend", "model"}:
        return "comparable as a backend comparison: only the backend (and its model file) differs"
    if cats == ["harness"]:
        return "comparable as a harness/code comparison: only the harness version differs"
    return f"not comparable for one question: {', '.join(cats)} differ"


# --- --fail-if rules ------------------------------------------------------------------------

_RULE = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*([+-]?\d+(?:\.\d+)?)\s*(%|pt)?\s*$")


@dataclass(frozen=True)
class Rule:
    text: str
    metric: str
    op: str
    threshold: float
    relative: bool  # % of the base; else absolute in the metric's unit (success rate: points)


def parse_rule(text: str) -> Rule:
    m = _RULE.match(text)
    if not m:
        raise ConfigError(
            f"--fail-if {text!r}: expected METRIC OP CHANGE, e.g. \"throughput < -5%\" or \"success_rate < -0.5pt\""
        )
    metric, op, value, unit = m.groups()
    if metric not in METRIC_NAMES:
        raise ConfigError(f"--fail-if {text!r}: unknown metric {metric!r}; known: {', '.join(METRIC_NAMES)}")
    return Rule(text.strip(), metric, op, float(value), unit == "%")


@dataclass(frozen=True)
class RuleResult:
    rule: Rule
    side: str
    change: float | None
    fired: bool
    note: str


def _holds(op: str, a: float, b: float) -> bool:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def evaluate(rule: Rule, base: Side, other: Side) -> RuleResult:
    b, c = base.median(rule.metric), other.median(rule.metric)
    if b is None or c is None:
        missing = base.label if b is None else other.label
        return RuleResult(rule, other.label, None, True, f"{rule.metric} is not available in {missing}: the gate cannot pass")
    if rule.relative:
        if b == 0:
            return RuleResult(rule, other.label, None, True, f"{rule.metric} is 0 in the base: a relative change is undefined")
        change = (c / b - 1) * 100
    else:
        change = c - b
    if not _holds(rule.op, change, rule.threshold):
        return RuleResult(rule, other.label, change, False, "within the threshold")
    if base.repeated and other.repeated:
        bv, cv = base.values[rule.metric], other.values[rule.metric]
        # The rule's direction says which way is bad: "<" fires on a fall, ">" on a rise.
        beyond = max(cv) < min(bv) if rule.op in ("<", "<=") else min(cv) > max(bv)
        if not beyond:
            return RuleResult(rule, other.label, change, False,
                              "past the threshold but within run-to-run spread (the ranges overlap): not declared")
        return RuleResult(rule, other.label, change, True, "past the threshold and beyond the run-to-run spread")
    return RuleResult(rule, other.label, change, True, "past the threshold (single runs: spread unknown)")


@dataclass
class Comparison:
    sides: list[Side]
    diffs: list[Difference]
    verdict: str
    rules: list[RuleResult]
    unexpected: list[str]  # categories that differ though not allowed by `expect`

    @property
    def failed(self) -> bool:
        return any(r.fired for r in self.rules) or bool(self.unexpected)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sides": [{"path": str(s.path), "runs": [str(r) for r in s.run_dirs],
                       "metrics": {k: stats(v) for k, v in s.values.items()}} for s in self.sides],
            "comparable": {"verdict": self.verdict, "differences": [d.__dict__ for d in self.diffs],
                           "unexpected_categories": self.unexpected},
            "rules": [{"rule": r.rule.text, "side": r.side, "change": r.change, "fired": r.fired, "note": r.note}
                      for r in self.rules],
            "failed": self.failed,
        }


def compare(paths: list[Path], rules: list[str] = (), expect: list[str] | None = None) -> Comparison:
    """`expect`: the categories allowed to differ (e.g. ["system"]); others make it fail."""
    if len(paths) < 2:
        raise ConfigError("compare needs at least two results folders")
    parsed = [parse_rule(r) for r in rules]
    for cat in expect or []:
        if cat not in CATEGORIES:
            raise ConfigError(f"--expect {cat!r}: known categories are {', '.join(CATEGORIES)}")
    sides = [load_side(p) for p in paths]
    diffs = differences([s.run_dirs[0] for s in sides])
    unexpected = []
    if expect is not None:
        unexpected = sorted({d.category for d in diffs} - set(expect), key=CATEGORIES.index)
    results = [evaluate(rule, sides[0], other) for other in sides[1:] for rule in parsed]
    return Comparison(sides, diffs, verdict(diffs), results, unexpected)


def table(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Header and rows: each side's median (with its range when repeated) and ratio to the first."""
    sides = comparison.sides
    header = ["figure"]
    for i, s in enumerate(sides):
        header.append(s.label + (f" (median of {len(s.run_dirs)})" if s.repeated else ""))
        if i:
            header.append("ratio")
    rows = []
    for m in METRICS:
        if all(s.median(m.name) is None for s in sides):
            continue
        row = [f"{m.label} ({m.unit})" if m.unit else m.label]
        base = sides[0].median(m.name)
        for i, s in enumerate(sides):
            v = s.median(m.name)
            cell = "—" if v is None else _fmt(v)
            if v is not None and s.repeated:
                cell += f" [{_fmt(min(s.values[m.name]))}–{_fmt(max(s.values[m.name]))}]"
            row.append(cell)
            if i:
                row.append(f"{v / base:.3f}" if v is not None and base else "—")
        rows.append(row)
    return header, rows


def _fmt(v: float) -> str:
    if v == 0 or abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def markdown(comparison: Comparison) -> str:
    """A PR comment: table, verdict, differences, and the gate."""
    header, rows = table(comparison)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", f"**{comparison.verdict}**"]
    if comparison.diffs:
        lines += ["", "| category | setting | " + comparison.sides[0].label + " | run | value |", "|---|---|---|---|---|"]
        lines += [f"| {d.category} | `{d.key}` | `{d.base}` | {d.run} | `{d.other}` |" for d in comparison.diffs]
    if comparison.rules:
        lines += ["", "| rule | candidate | change | result |", "|---|---|---|---|"]
        for r in comparison.rules:
            change = "—" if r.change is None else f"{r.change:+.2f}{'%' if r.rule.relative else ''}"
            lines.append(f"| `{r.rule.text}` | {r.side} | {change} | {'❌ ' if r.fired else '✅ '}{r.note} |")
    if comparison.unexpected:
        lines += ["", f"❌ differences outside --expect: {', '.join(comparison.unexpected)}"]
    return "\n".join(lines) + "\n"

"""`harness compare`: headline figures side by side, "comparable?", and a noise-aware gate.

A side is one results folder or a repeat folder (`aggregate.json` + its runs). Figures
are each run's headline (harness.results.metrics.from_summary): LoadGen's where LoadGen
owns the schedule; from dispatch where the harness does (a closed loop), because there
LoadGen's issue-based latency is mostly the backlog the harness holds, which grows with
the sample count over N and would gate on the config, not on the system (docs/ci.md).
With repeats on both sides a --fail-if rule fires only when the median change passes the
threshold *and* the ranges do not overlap (every candidate run worse than every base
run): for 5 vs 5 runs that alone is a one-sided Mann-Whitney test at p = 1/252 ≈ 0.004,
so run-to-run noise does not fail a build.
"""

from __future__ import annotations

import math

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.analysis.cost import read_cost
from harness.analysis.run_data import read_config, read_manifest, read_system
from harness.errors import ConfigError, ResultsError
from harness.results import folder, metrics
from harness.results.metrics import ALIASES, METRICS, NAMES
from harness.results.schedule import schedule_words, timed_from_dispatch
from harness.results.stats import median
from harness.results.stats import over_runs as stats  # noqa: F401  (compare's name for it; tests import it here)
from harness.results.summary import read_summary


def headline(run_dir: Path) -> dict[str, float | None]:
    """The figures people compare, by their vocabulary name (harness.results.metrics), from
    one results folder (None where the run has none)."""
    out = metrics.from_summary(read_summary(run_dir))
    cost = read_cost(run_dir) or {}
    out["cost_per_success"] = cost.get("per_successful_task")
    return out


# --- a side: one run or a repeat folder ---------------------------------------------------


@dataclass
class Side:
    path: Path
    run_dirs: list[Path]
    values: dict[str, list[float]] = field(default_factory=dict)
    #: the harness's own schedule in words when its figures are timed from dispatch ("" when LoadGen's)
    schedule: str = ""

    @property
    def label(self) -> str:
        return self.path.name

    @property
    def repeated(self) -> bool:
        return len(self.run_dirs) > 1

    def median(self, metric: str) -> float | None:
        return median(self.values.get(metrics.canonical(metric) or metric) or [])


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
    first = read_summary(run_dirs[0])
    if timed_from_dispatch(first):
        side.schedule = schedule_words(first) or "the harness's own schedule"
    for run_dir in run_dirs:
        for name, value in headline(run_dir).items():
            if value is not None:
                side.values.setdefault(name, []).append(float(value))
    return side


# --- comparable? ----------------------------------------------------------------------------

_BACKEND_KEYS = ("backend", "backend_options", "workers", "max_batch", "batch_timeout_ms")
_DATASET_KEYS = ("dataset", "seed")
# model: compared by its sha256, not its path; telemetry: sampled beside the test, in the
# parent, so it changes no figure (benchmarks/bench_http.py --telemetry measures that)
_IGNORED_KEYS = ("name", "cost", "model", "telemetry")
_HARNESS_PACKAGES = ("loadgen-harness", "mlcommons-loadgen")
CATEGORIES = ("scenario", "backend", "dataset", "model", "harness", "system")


@dataclass(frozen=True)
class Difference:
    category: str
    key: str
    base: Any
    other: Any
    run: str
    side: int = 1  # the index of the side `other` is of (its letter: LETTERS[side])


def _facts(run_dir: Path) -> dict[str, dict[str, Any]]:
    """What must match, by category, flattened to key -> value."""
    config = read_config(run_dir, required=True)
    summary = read_summary(run_dir)
    manifest = read_manifest(run_dir)
    system = read_system(run_dir)
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
    for index, other_dir in enumerate(run_dirs[1:], start=1):
        other = _facts(other_dir)
        for category in CATEGORIES:
            keys = sorted(set(base[category]) | set(other[category]))
            for key in keys:
                a, b = base[category].get(key), other[category].get(key)
                if a != b:
                    found.append(Difference(category, key, a, b, other_dir.name, index))
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

_RULE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|<|>)\s*([+-]?\d+(?:\.\d+)?)\s*(%|pt)?\s*$")


@dataclass(frozen=True)
class Rule:
    text: str
    metric: str  # as written in the rule: an old alias stays what the user typed
    op: str
    threshold: float
    relative: bool  # % of the base; else absolute in the metric's unit (success rate: points)

    @property
    def canonical(self) -> str:
        """The vocabulary's name of the figure the rule gates (harness.results.metrics)."""
        return metrics.canonical(self.metric) or self.metric


def parse_rule(text: str) -> Rule:
    m = _RULE.match(text)
    if not m:
        raise ConfigError(
            f"--fail-if {text!r}: expected METRIC OP CHANGE, e.g. \"throughput < -5%\" or \"success_rate < -0.5pt\""
        )
    metric, op, value, unit = m.groups()
    if metrics.canonical(metric) is None:
        raise ConfigError(
            f"--fail-if {text!r}: unknown metric {metric!r}; known: {', '.join(NAMES)} "
            f"(old names still accepted: {', '.join(f'{a} = {c}' for a, c in ALIASES.items())})"
        )
    return Rule(text.strip(), metric, op, float(value), unit == "%")


@dataclass(frozen=True)
class RuleResult:
    rule: Rule
    side: str
    change: float | None
    fired: bool
    note: str
    index: int = 1  # the index of the side judged (its letter: LETTERS[index])


def _holds(op: str, a: float, b: float) -> bool:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def evaluate(rule: Rule, base: Side, other: Side) -> RuleResult:
    b, c = base.median(rule.canonical), other.median(rule.canonical)
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
        bv, cv = base.values[rule.canonical], other.values[rule.canonical]
        # The rule's direction says which way is bad: "<" fires on a fall, ">" on a rise.
        beyond = max(cv) < min(bv) if rule.op in ("<", "<=") else min(cv) > max(bv)
        if not beyond:
            return RuleResult(rule, other.label, change, False,
                              "past the threshold but within run-to-run spread (the ranges overlap): not declared")
        return RuleResult(rule, other.label, change, True, "past the threshold and beyond the run-to-run spread")
    return RuleResult(rule, other.label, change, True, "past the threshold (single runs: spread unknown)")


def gate_outcome(rules: list[Any], unexpected: list[str]) -> str:
    """The gate's answer in one line (runs and sweeps alike): FAIL with the rules that fired
    or the differences --expect did not allow, PASS, or that no rule was given."""
    fired = [r for r in rules if r.fired]
    if fired:
        return f"FAIL: {len(fired)} of {len(rules)} rules fired ({', '.join(r.rule.text for r in fired)})"
    if unexpected:
        return f"FAIL: differences outside --expect ({', '.join(unexpected)})"
    if rules:
        return f"PASS: none of {len(rules)} rules fired"
    return "no --fail-if rule given: figures only"


class Gated:
    """What a comparison of runs and one of sweeps share: their gate's verdict, from the
    `rules` evaluated and the `unexpected` differences (fields of the dataclass below)."""

    rules: list[Any]
    unexpected: list[str]

    @property
    def failed(self) -> bool:
        return any(r.fired for r in self.rules) or bool(self.unexpected)

    @property
    def outcome(self) -> str:
        """The gate's answer in one line, the first thing a reader sees."""
        return gate_outcome(self.rules, self.unexpected)


@dataclass
class Comparison(Gated):
    sides: list[Side]
    diffs: list[Difference]
    verdict: str
    rules: list[RuleResult]
    unexpected: list[str]  # categories that differ though not allowed by `expect`


    def to_dict(self) -> dict[str, Any]:
        return {
            "sides": [{"path": str(s.path), "runs": [str(r) for r in s.run_dirs],
                       # where latency, TTFT and TPOT are timed from (docs/ci.md)
                       "timed_from": "dispatch" if s.schedule else "issue",
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
    results = [replace(evaluate(rule, sides[0], other), index=i)
               for i, other in enumerate(sides[1:], start=1) for rule in parsed]
    return Comparison(sides, diffs, verdict(diffs), results, unexpected)


LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def side_lines(comparison: Comparison) -> list[str]:
    """`A = path` per side: columns are headed by letter, since run folder names share a
    long prefix and, cut to a column, were cut exactly where they differ."""
    return [f"{LETTERS[i]} = {s.path}" + (f" (median of {len(s.run_dirs)} runs)" if s.repeated else "")
            + (f" · latency, TTFT, TPOT from dispatch ({s.schedule})" if s.schedule else "")
            for i, s in enumerate(comparison.sides)]


def table(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Header and rows: each side's median (with its range when repeated) and ratio to A.
    A row's figures share one number of decimals, so they line up and read alike."""
    sides = comparison.sides
    header = ["figure"]
    for i, _ in enumerate(sides):
        header.append(LETTERS[i])
        if i:
            header.append(f"{LETTERS[i]}/A")
    rows = []
    for m in METRICS:
        if all(s.median(m.name) is None for s in sides):
            continue
        row = [m.heading]
        base = sides[0].median(m.name)
        shown = [v for s in sides for v in ([s.median(m.name)] + (s.values.get(m.name) or [])) if v is not None]
        fmt = row_format(shown)
        for i, s in enumerate(sides):
            v = s.median(m.name)
            cell = "—" if v is None else fmt(v)
            if v is not None and s.repeated:
                cell += f" [{fmt(min(s.values[m.name]))}–{fmt(max(s.values[m.name]))}]"
            row.append(cell)
            if i:
                row.append(f"{v / base:.3f}" if v is not None and base else "—")
        rows.append(row)
    return header, rows


def row_format(values: list[float]):
    """One format for a row: four significant figures of its largest value (1,295 and 792;
    0.6110 and 0.7000), thousands separated."""
    top = max((abs(v) for v in values), default=0.0)
    decimals = 0 if top == 0 else int(min(4, max(0, 3 - math.floor(math.log10(top)))))
    return lambda v: f"{v:,.{decimals}f}"


def markdown(comparison: Comparison) -> str:
    """A PR comment: table, verdict, differences, and the gate."""
    header, rows = table(comparison)
    lines = [f"**harness compare: {comparison.outcome}**", ""]
    lines += [f"- {line}" for line in side_lines(comparison)] + [""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", f"**{comparison.verdict}**"]
    if comparison.diffs:
        if len(comparison.sides) == 2:
            lines += ["", "| category | setting | A | B |", "|---|---|---|---|"]
            lines += [f"| {d.category} | `{d.key}` | `{d.base}` | `{d.other}` |" for d in comparison.diffs]
        else:
            lines += ["", "| category | setting | A | side | value |", "|---|---|---|---|---|"]
            lines += [f"| {d.category} | `{d.key}` | `{d.base}` | {LETTERS[d.side]} | `{d.other}` |"
                      for d in comparison.diffs]
    if comparison.rules:
        lines += ["", "| rule | candidate | change | result |", "|---|---|---|---|"]
        for r in comparison.rules:
            change = "—" if r.change is None else f"{r.change:+.2f}{'%' if r.rule.relative else ''}"
            lines.append(f"| `{r.rule.text}` | {LETTERS[r.index]} | {change} | {'❌ ' if r.fired else '✅ '}{r.note} |")
    if comparison.unexpected:
        lines += ["", f"❌ differences outside --expect: {', '.join(comparison.unexpected)}"]
    return "\n".join(lines) + "\n"

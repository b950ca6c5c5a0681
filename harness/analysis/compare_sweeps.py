"""`harness compare SWEEP_A SWEEP_B`: two sweep folders, or two capacity searches, side by side.

    compare_sweeps([A, B], rules, expect) -> SweepComparison

Everything comes from the folders (harness.run.sweep): sweep.yaml (the plan: kind, axes,
search settings, base config), sweep.json (one entry per point, harness.analysis.points)
and, for the facts a plan does not hold (system, harness version, model and dataset
hashes, the backend's own description), one run folder of each side.

- **capacity** (two capacity searches): B's capacity over A's, with each side's bracket
  [highest passing, lowest failing] and the range of ratios the brackets allow; when the
  brackets overlap the two capacities are within the searches' resolution.
- **points** (two sweeps): the points with the same axis values, paired, with B/A of
  throughput (done/s: LoadGen's completed rate, as the sweep tables show it), p99
  latency, and TTFT / TPOT p99 where either side has them. `target_qps=auto` sweeps pair
  by point index: the same fraction of each side's own Offline peak.
- **comparable?**: the run comparison's categories and verdict (harness.analysis.compare),
  applied to the two base configs (the axes' own keys left out: the points set them) and to
  the facts of one run of each side; plus whether the axes (a sweep) or the settings that
  define the answer (a capacity search: precision, need/of, attainment) match.
- **--fail-if**: the run comparison's grammar. `capacity < -5%` (or `capacity_qps`) gates
  a capacity comparison on capacity_qps; as with repeats, a change past the threshold is
  declared only when the brackets do not overlap. On sweeps a figure's rule
  (`latency_p99 > +10%`) is tried at every matched point and fires at the worst one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.analysis.compare import (
    _BACKEND_KEYS,
    _DATASET_KEYS,
    _IGNORED_KEYS,
    _RULE,
    CATEGORIES,
    Difference,
    Gated,
    Rule,
    RuleResult,
    differences,
    parse_rule,
    verdict,
)
from harness.analysis.points import bound_of_invalid, load_sweep
from harness.errors import ConfigError, ResultsError
from harness.results import folder, metrics

#: the figures a pair of points shows: (name, heading); ttft/tpot only where either side has them
FIGURES = (("throughput", "done/s"), ("latency_p99", "p99 ms"), ("ttft_p99", "TTFT p99"), ("tpot_p99", "TPOT p99"))
TOKEN_FIGURES = ("ttft_p99", "tpot_p99")
CAPACITY_NAMES = ("capacity", "capacity_qps")
#: a capacity search's settings that change what its answer means (the others: how it ran)
ANSWER_SETTINGS = ("attainment", "need", "of", "precision")
#: categories --expect takes here: the run comparison's, and the sweep's own plan
EXPECT_CATEGORIES = (*CATEGORIES, "axes")
#: run facts that a sweep's plan does not hold; the scenario, backend settings and dataset
#: come from the base config instead (a point's own run.yaml carries its axis values)
_RUN_CATEGORIES = ("model", "harness", "system")


def is_sweep_folder(path: Path) -> bool:
    """A sweep or capacity folder: its plan or its points (a run folder has neither)."""
    return (path / folder.SWEEP_PLAN).is_file() or (path / folder.SWEEP).is_file()


# --- a side -----------------------------------------------------------------------------------


@dataclass
class SweepSide:
    path: Path
    data: dict[str, Any]  # sweep.json
    plan: dict[str, Any]  # sweep.yaml

    @property
    def label(self) -> str:
        return self.path.name

    @property
    def kind(self) -> str:
        return self.data["kind"]

    @property
    def base(self) -> dict[str, Any]:
        return self.plan["base"]

    @property
    def axes(self) -> list[dict[str, Any]]:
        return list(self.plan.get("axes") or [])

    @property
    def auto(self) -> bool:
        return [(a.get("name"), list(a.get("values") or [])) for a in self.axes] == [("target_qps", ["auto"])]

    def points(self) -> list[dict[str, Any]]:
        """The sweep's own points (a pilot is a means, not a point of the curve)."""
        return [p for p in self.data["points"] if p.get("role") != "pilot"]

    def run_dir(self, point: dict[str, Any]) -> Path | None:
        run = point.get("run")
        d = self.path / str(run) if run else None
        return d if d is not None and (d / folder.SUMMARY).is_file() else None


def _read_plan(path: Path) -> dict[str, Any]:
    plan_path = path / folder.SWEEP_PLAN
    if not plan_path.is_file():
        raise ResultsError(f"{path} has no {folder.SWEEP_PLAN}: the sweep's plan (axes, base config) is missing")
    try:
        plan = yaml.safe_load(plan_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ResultsError(f"{plan_path} is damaged: {str(e).splitlines()[0]}") from e
    if not isinstance(plan, dict) or not isinstance(plan.get("base"), dict) or not isinstance(plan.get("axes") or [], list):
        raise ResultsError(f"{plan_path} is damaged: no `base` config mapping or `axes` list")
    return plan


def load_sweep_side(path: Path) -> SweepSide:
    folder.require_folder(path)
    if not (path / folder.SWEEP).is_file():
        raise ResultsError(f"{path} has no {folder.SWEEP}: the sweep has not finished a point yet")
    return SweepSide(path, load_sweep(path), _read_plan(path))


# --- points, paired ---------------------------------------------------------------------------


def _norm(value: Any) -> str:
    """An axis value as a key: "50", "50.0" and 50 are one rate."""
    try:
        return f"{float(value):.6g}"
    except (TypeError, ValueError):
        return str(value)


def point_key(side: SweepSide, point: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    if side.auto:
        return (("point", str(point["index"])),)
    values = point.get("values") or {}
    return tuple(sorted((str(k), _norm(v)) for k, v in values.items() if k != "schedule_rng_seed"))


def figure(point: dict[str, Any] | None, name: str) -> float | None:
    """One figure of a point (None where it has none, or crashed)."""
    if point is None or point.get("status") == "crashed":
        return None
    if name == "throughput":
        done = point.get("completed_per_s")
        return done if done is not None else (point.get("metrics") or {}).get("throughput")
    return (point.get("metrics") or {}).get(name)


def point_state(point: dict[str, Any] | None) -> str:
    """VALID, INVALID with the bound it broke, incomplete or crashed: a point in a word or two."""
    if point is None:
        return "—"
    if point.get("status") != "complete":
        return str(point.get("status"))
    if point.get("validity") == "INVALID":
        return f"INVALID: {bound_of_invalid(point)}"
    return str(point.get("validity") or "—")


def _ratio(a: float | None, b: float | None) -> float | None:
    return b / a if a is not None and b is not None and a != 0 else None


@dataclass
class PointPair:
    key: tuple[tuple[str, str], ...]
    a: dict[str, Any] | None
    b: dict[str, Any] | None

    @property
    def matched(self) -> bool:
        return self.a is not None and self.b is not None

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.key)

    def figures(self, names: list[str]) -> dict[str, dict[str, float | None]]:
        out = {}
        for name in names:
            a, b = figure(self.a, name), figure(self.b, name)
            out[name] = {"a": a, "b": b, "ratio": _ratio(a, b)}
        return out


def pair_points(a: SweepSide, b: SweepSide) -> list[PointPair]:
    """Every point of either side by its axis values, A's order first, then B's leftovers."""
    b_by_key = {point_key(b, p): p for p in b.points()}
    pairs, seen = [], set()
    for p in a.points():
        k = point_key(a, p)
        pairs.append(PointPair(k, p, b_by_key.get(k)))
        seen.add(k)
    pairs += [PointPair(k, None, p) for k, p in b_by_key.items() if k not in seen]
    return pairs


def figure_names(pairs: list[PointPair]) -> list[str]:
    """Throughput and p99 always; TTFT and TPOT p99 where a point of either side has them."""
    names = ["throughput", "latency_p99"]
    for name in TOKEN_FIGURES:
        if any(figure(p, name) is not None for pair in pairs for p in (pair.a, pair.b)):
            names.append(name)
    return names


# --- capacity ---------------------------------------------------------------------------------


@dataclass
class CapacityPair:
    a: dict[str, Any]  # each side's sweep.json `capacity` section
    b: dict[str, Any]

    @staticmethod
    def _bracket(c: dict[str, Any]) -> tuple[float | None, float | None]:
        lo, hi = (list(c.get("bracket_qps") or [None, None]) + [None, None])[:2]
        return lo, hi

    @property
    def ratio(self) -> float | None:
        return _ratio(self.a.get("capacity_qps"), self.b.get("capacity_qps"))

    @property
    def overlap(self) -> bool | None:
        """Whether the two brackets share a rate (each holds its side's true capacity:
        at or above the highest passing rate, below the lowest failing one)."""
        (alo, ahi), (blo, bhi) = self._bracket(self.a), self._bracket(self.b)
        if (alo is None and ahi is None) or (blo is None and bhi is None):
            return None
        low = max(alo or 0.0, blo or 0.0)
        high = min(ahi if ahi is not None else float("inf"), bhi if bhi is not None else float("inf"))
        return low < high

    @property
    def ratio_range(self) -> tuple[float, float | None]:
        """The B/A ratios the brackets allow: B's lowest over A's highest, B's highest over
        A's lowest (0 and None where a bracket is open on that end)."""
        (alo, ahi), (blo, bhi) = self._bracket(self.a), self._bracket(self.b)
        low = (blo or 0.0) / ahi if ahi else 0.0
        high = bhi / alo if bhi is not None and alo else None
        return low, high

    def to_dict(self) -> dict[str, Any]:
        keep = ("capacity_qps", "bracket_qps", "bracket_width", "converged", "stop_reason", "bound_by",
                "criterion", "tries", "rule")
        return {"a": {k: self.a.get(k) for k in keep}, "b": {k: self.b.get(k) for k in keep},
                "ratio": self.ratio, "ratio_range": list(self.ratio_range), "brackets_overlap": self.overlap}


# --- comparable? ------------------------------------------------------------------------------


def _axis_keys(side: SweepSide) -> set[str]:
    """Base-config keys the points set themselves: a sweep's axes, a search's target_qps."""
    names = {str(a.get("name")) for a in side.axes}
    return names | ({"target_qps", "schedule_rng_seed"} if side.kind == "capacity" else set())


def _base_facts(side: SweepSide, skip: set[str]) -> dict[str, dict[str, Any]]:
    """The base config by the run comparison's categories (harness.analysis.compare)."""
    facts: dict[str, dict[str, Any]] = {c: {} for c in CATEGORIES}
    for key, value in side.base.items():
        if key in _IGNORED_KEYS or key in skip:
            continue
        if key == "backend_options":
            for k, v in (value or {}).items():
                if k not in skip:
                    facts["backend"][f"backend_options.{k}"] = v
            continue
        category = "backend" if key in _BACKEND_KEYS else "dataset" if key in _DATASET_KEYS else "scenario"
        facts[category][key] = value
    return facts


def _representatives(a: SweepSide, b: SweepSide, pairs: list[PointPair]) -> tuple[Path, Path] | None:
    """One run folder of each side to read the system and versions from: a matched pair's
    when there is one (same axis values: same dataset, same backend description)."""
    for pair in pairs:
        if pair.matched and (ra := a.run_dir(pair.a)) and (rb := b.run_dir(pair.b)):
            return ra, rb
    ra = next((d for p in a.points() if (d := a.run_dir(p))), None)
    rb = next((d for p in b.points() if (d := b.run_dir(p))), None)
    return (ra, rb) if ra and rb else None


def sweep_differences(a: SweepSide, b: SweepSide, pairs: list[PointPair]) -> tuple[list[Difference], str | None]:
    """Every difference of B from A: the base configs, and one run's facts of each side.
    The second item says what could not be compared, when no run of a side has a summary."""
    skip = _axis_keys(a) | _axis_keys(b)
    fa, fb = _base_facts(a, skip), _base_facts(b, skip)
    found = []
    for category in CATEGORIES:
        for key in sorted(set(fa[category]) | set(fb[category])):
            va, vb = fa[category].get(key), fb[category].get(key)
            if va != vb:
                found.append(Difference(category, key, va, vb, b.label))
    reps = _representatives(a, b, pairs)
    if reps is None:
        return found, "no finished run on one side: system, harness and model not compared"
    for d in differences(list(reps)):
        key = d.key.split(".", 1)[1] if d.key.startswith("describe.") else None
        run_fact = d.category in _RUN_CATEGORIES or d.key == "dataset.sha256" or (key is not None and key not in skip)
        if run_fact:
            found.append(Difference(d.category, d.key, d.base, d.other, b.label))
    return found, None


@dataclass(frozen=True)
class AxesCheck:
    match: bool
    notes: list[str]


def check_axes(a: SweepSide, b: SweepSide) -> AxesCheck:
    """A sweep: the same axes with the same values (and zip); a capacity search: the
    settings that define its answer."""
    if a.kind == "capacity":
        sa, sb = a.plan.get("search") or {}, b.plan.get("search") or {}
        diffs = [f"{k} {sa.get(k)} vs {sb.get(k)}" for k in ANSWER_SETTINGS if sa.get(k) != sb.get(k)]
        if diffs:
            return AxesCheck(False, [f"search settings differ: {'; '.join(diffs)}"])
        shown = ", ".join(f"{k} {'none' if sa.get(k) is None else sa.get(k)}" for k in ANSWER_SETTINGS)
        return AxesCheck(True, [f"search settings match: {shown}"])
    if a.auto or b.auto:
        if a.auto and b.auto:
            return AxesCheck(True, ["axes match: target_qps=auto on both; points paired by index "
                                    "(the same fraction of each side's own Offline peak)"])
        return AxesCheck(False, ["axes differ: one side walks target_qps=auto, the other fixed values"])
    va = {str(x["name"]): [_norm(v) for v in x.get("values") or []] for x in a.axes}
    vb = {str(x["name"]): [_norm(v) for v in x.get("values") or []] for x in b.axes}
    notes = []
    if set(va) != set(vb):
        notes.append(f"axes differ: A varies {', '.join(va) or 'nothing'}, B varies {', '.join(vb) or 'nothing'}: "
                     "no point can be paired")
        return AxesCheck(False, notes)
    for name in va:
        only_a = [v for v in va[name] if v not in vb[name]]
        only_b = [v for v in vb[name] if v not in va[name]]
        if only_a or only_b:
            parts = ([f"only A {', '.join(only_a)}"] if only_a else []) + ([f"only B {', '.join(only_b)}"] if only_b else [])
            notes.append(f"{name} values differ ({'; '.join(parts)})")
    if bool(a.plan.get("zip")) != bool(b.plan.get("zip")):
        notes.append("one side zips its axes, the other makes a grid")
    if notes:
        return AxesCheck(False, ["axes differ: " + "; ".join(notes)])
    return AxesCheck(True, ["axes match: " + "; ".join(f"{n} = {', '.join(v)}" for n, v in va.items())])


# --- --fail-if --------------------------------------------------------------------------------


def parse_sweep_rule(text: str, kind: str) -> Rule:
    """The run comparison's grammar; `capacity` (capacity_qps) names a search's answer."""
    m = _RULE.match(text)
    if m and m.group(1) in CAPACITY_NAMES:
        if kind != "capacity":
            raise ConfigError(f"--fail-if {text!r}: capacity is a capacity search's answer; these are sweeps "
                              f"(gate a sweep on a figure at its points, e.g. \"latency_p99 > +10%\")")
        if m.group(4) == "pt":
            raise ConfigError(f"--fail-if {text!r}: capacity changes in % or in QPS, not points")
        return Rule(text.strip(), m.group(1), m.group(2), float(m.group(3)), m.group(4) == "%")
    if kind == "capacity":
        raise ConfigError(f"--fail-if {text!r}: a capacity comparison gates on its answer, e.g. \"capacity < -5%\"")
    return parse_rule(text)


def _change(rule: Rule, a: float, b: float) -> float | None:
    if rule.relative:
        return None if a == 0 else (b / a - 1) * 100
    return b - a


def _holds(op: str, x: float, y: float) -> bool:
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


def evaluate_capacity(rule: Rule, cap: CapacityPair, side: str) -> RuleResult:
    a, b = cap.a.get("capacity_qps"), cap.b.get("capacity_qps")
    if a is None or b is None:
        return RuleResult(rule, side, None, True, "a side found no capacity: the gate cannot pass")
    change = _change(rule, a, b)
    if change is None:
        return RuleResult(rule, side, None, True, "the base capacity is 0: a relative change is undefined")
    if not _holds(rule.op, change, rule.threshold):
        return RuleResult(rule, side, change, False, "within the threshold")
    if cap.overlap:
        return RuleResult(rule, side, change, False,
                          "past the threshold but within the searches' resolution (the brackets overlap): not declared")
    return RuleResult(rule, side, change, True, "past the threshold and beyond both brackets")


def evaluate_points(rule: Rule, pairs: list[PointPair], side: str) -> RuleResult:
    name = metrics.canonical(rule.metric) or rule.metric
    changes = []
    for pair in pairs:
        a, b = figure(pair.a, name), figure(pair.b, name)
        if pair.matched and a is not None and b is not None and (c := _change(rule, a, b)) is not None:
            changes.append((c, pair.label))
    if not changes:
        return RuleResult(rule, side, None, True, f"{rule.metric} is at no matched point of both sides: the gate cannot pass")
    # the point furthest in the rule's direction: "<" looks for a fall, ">" for a rise
    worst, where = (min if rule.op in ("<", "<=") else max)(changes)
    past = [label for c, label in changes if _holds(rule.op, c, rule.threshold)]
    if not past:
        return RuleResult(rule, side, worst, False, f"within the threshold at all {len(changes)} matched points")
    return RuleResult(rule, side, worst, True,
                      f"past the threshold at {len(past)} of {len(changes)} matched points (worst: {where}; "
                      "one run a point: spread unknown)")


# --- the comparison ---------------------------------------------------------------------------


@dataclass
class SweepComparison(Gated):
    sides: list[SweepSide]
    diffs: list[Difference]
    verdict: str
    axes: AxesCheck
    pairs: list[PointPair]
    capacity: CapacityPair | None
    rules: list[RuleResult]
    unexpected: list[str]
    not_compared: str | None = None
    names: list[str] = field(default_factory=list)  # the figures the point pairs show

    @property
    def kind(self) -> str:
        return self.sides[0].kind

    @property
    def matched(self) -> list[PointPair]:
        return [p for p in self.pairs if p.matched]


    def capacity_line(self) -> str | None:
        """The headline of a capacity comparison in one line."""
        c = self.capacity
        if c is None:
            return None
        if c.ratio is None:
            missing = " and ".join(s for s, d in (("A", c.a), ("B", c.b)) if d.get("capacity_qps") is None)
            return f"capacity ratio B/A: none ({missing} found no capacity)"
        lo, hi = c.ratio_range
        span = f"{lo:.3f}–{hi:.3f}" if hi is not None else f"at least {lo:.3f}"
        overlap = ("the brackets overlap: the capacities are within the searches' resolution"
                   if c.overlap else "the brackets do not overlap")
        return f"capacity ratio B/A: {c.ratio:.3f} (the brackets allow {span}; {overlap})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "sides": [{"label": k, "path": str(s.path), "kind": s.kind, "state": s.data.get("state"),
                       "scenario": s.data.get("scenario"), "backend": s.data.get("backend"),
                       "points": len(s.points())} for k, s in zip("AB", self.sides)],
            "comparable": {"verdict": self.verdict, "differences": [d.__dict__ for d in self.diffs],
                           "unexpected_categories": self.unexpected, "not_compared": self.not_compared},
            "axes": {"match": self.axes.match, "notes": self.axes.notes},
            "capacity": self.capacity.to_dict() if self.capacity else None,
            "points": [{"values": dict(p.key), "matched": p.matched, "a": point_state(p.a), "b": point_state(p.b),
                        "figures": p.figures(self.names)} for p in self.pairs] if self.kind == "sweep" else [],
            "rules": [{"rule": r.rule.text, "side": r.side, "change": r.change, "fired": r.fired, "note": r.note}
                      for r in self.rules],
            "failed": self.failed,
        }


def check_inputs(paths: list[Path]) -> None:
    """Two sweep folders, or two capacity folders: anything else is one line (exit 2)."""
    for p in paths:
        folder.require_folder(p)
    sweeps = [is_sweep_folder(p) for p in paths]
    if not all(sweeps):
        yes = ", ".join(str(p) for p, s in zip(paths, sweeps) if s)
        no = ", ".join(str(p) for p, s in zip(paths, sweeps) if not s)
        raise ConfigError(f"compare: {yes} is a sweep folder and {no} is not: compare two sweep (or two capacity) "
                          "folders, or two runs")
    if len(paths) != 2:
        raise ConfigError(f"compare takes two sweep folders at a time (got {len(paths)})")


def compare_sweeps(paths: list[Path], rules: list[str] = (), expect: list[str] | None = None) -> SweepComparison:
    """`expect`: the categories allowed to differ (the run comparison's, and "axes")."""
    check_inputs(paths)
    for cat in expect or []:
        if cat not in EXPECT_CATEGORIES:
            raise ConfigError(f"--expect {cat!r}: known categories are {', '.join(EXPECT_CATEGORIES)}")
    a, b = (load_sweep_side(p) for p in paths)
    if a.kind != b.kind:
        raise ConfigError(f"compare: {a.path} is a {a.kind} folder and {b.path} a {b.kind} folder: "
                          "compare two sweeps or two capacity searches")
    parsed = [parse_sweep_rule(r, a.kind) for r in rules]
    pairs = pair_points(a, b) if a.kind == "sweep" else []
    diffs, not_compared = sweep_differences(a, b, pairs)
    axes = check_axes(a, b)
    capacity = CapacityPair(a.data.get("capacity") or {}, b.data.get("capacity") or {}) if a.kind == "capacity" else None
    results = [evaluate_capacity(r, capacity, b.label) if capacity is not None else evaluate_points(r, pairs, b.label)
               for r in parsed]
    unexpected = []
    if expect is not None:
        cats = {d.category for d in diffs} | (set() if axes.match else {"axes"})
        unexpected = sorted(cats - set(expect), key=EXPECT_CATEGORIES.index)
    return SweepComparison([a, b], diffs, verdict(diffs), axes, pairs, capacity, results, unexpected,
                           not_compared, figure_names(pairs))


"""`harness sweep` and `harness capacity`: a folder of ordinary runs, one per load point.

    results/<stamp>-<name>-sweep/       (or -capacity)
        sweep.yaml          what to run: the kind, the axes (or the search's settings) and
                            the base config, resolved; `--resume DIR` needs nothing else
        sweep.json          one entry per finished point (harness.analysis.points): its axis
                            values, run folder, validity, headline figures, SLO attainment,
                            goodput, cost; rewritten after every point, so a killed sweep
                            keeps what it finished
        <stamp>-<name>-pNN-<scenario>/      each point: a normal results folder

Each point is a full `harness.run.runner.run`, its own child process and LoadGen test (one
test per process, as LoadGen requires), so `harness check`, `report` and `compare` work on
it as on any run. What runs next is a `Strategy`'s choice from the entries so far:
`Grid` walks a fixed list (`--vary` axes, a product or `--zip`ped), `AutoRate` measures an
Offline pilot and walks target_qps up to saturation, and harness.run.capacity bisects to
the highest passing load. A strategy decides from the entries alone, so resuming replays
them and goes on where the sweep stopped.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from harness.analysis.points import crashed_entry, knee, point_entry, saturated, verdict
from harness.config import registry
from harness.config.run_config import RunConfig, build_config
from harness.data.spec import parse_dataset_spec
from harness.errors import BackendError, ConfigError, DatasetError, ModelError, ResultsError, RunError
from harness.results import folder
from harness.run import runner
from harness.run.capacity import Search
from harness.run.rate_pilot import pilot_values, rate_text

SWEEP_SCHEMA_VERSION = 1
SWEEP_YAML = folder.SWEEP_PLAN
SWEEP_JSON = folder.SWEEP
#: parameters of generated prompt sets that can be an axis, by the set's kind: prompts
#: (`synthetic:isl=..,osl=..`) and images (`synthetic-images:image_size=..`: TTFT by image size)
DATASET_AXES: dict[str, tuple[str, ...]] = {
    "synthetic": ("isl", "osl", "prefix_len", "prefix_groups", "n"),
    "synthetic-images": ("image_size", "images_per_request", "format", "content", "quality", "osl", "n"),
}
#: `target_qps=auto`: these fractions of the pilot's Offline throughput, walked upward
AUTO_FRACTIONS = (0.1, 0.25, 0.5, 0.7, 0.85, 1.0, 1.15)
# A point whose run failed in one of these ways is recorded as crashed and the sweep goes
# on; any other error (a full disk, an unwritable folder) ends the sweep.
POINT_ERRORS = (RunError, BackendError, ModelError, DatasetError)


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[str, ...]  # as `--set` takes them: text, parsed by build_config

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "values": list(self.values)}


def split_values(text: str) -> list[str]:
    """'1,2,lognormal(1024,0.5)' -> ['1', '2', 'lognormal(1024,0.5)']: commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in text + ",":
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch in "([") - (ch in ")]")
        cur += ch
    return out


def parse_vary(item: str) -> Axis:
    name, eq, rest = item.partition("=")
    values = split_values(rest) if eq else []
    if not name.strip() or not values or any(v == "" for v in values):
        raise ConfigError(f"--vary {item!r}: expected KEY=V1,V2,..., e.g. --vary target_qps=100,200,400")
    if len(set(values)) != len(values):
        raise ConfigError(f"--vary {item!r}: a value is listed twice")
    return Axis(name.strip(), tuple(values))


class Strategy(Protocol):
    def next_point(self, entries: list[dict[str, Any]]) -> tuple[int, dict[str, str], str] | None:
        """(point index, axis values, role) of the next run, or None when the sweep is done."""

    def planned(self, entries: list[dict[str, Any]]) -> int | None:
        """How many points the sweep will have, when known (for the progress line)."""


DONE = ("complete", "incomplete")  # finished runs; a crashed point is run again on --resume only


def _entry(entries: list[dict[str, Any]], index: int) -> dict[str, Any] | None:
    return next((e for e in entries if e.get("index") == index), None)


@dataclass
class Grid:
    points: list[dict[str, str]]

    @classmethod
    def of(cls, axes: list[Axis], zipped: bool) -> Grid:
        names = [a.name for a in axes]
        if zipped:
            lengths = {len(a.values) for a in axes}
            if len(lengths) > 1:
                raise ConfigError(f"--zip pairs the axes value by value: they need as many values each (got {sorted(lengths)})")
            combos = list(zip(*(a.values for a in axes)))
        else:
            combos = list(itertools.product(*(a.values for a in axes)))
        return cls([dict(zip(names, combo)) for combo in combos])

    def next_point(self, entries: list[dict[str, Any]]) -> tuple[int, dict[str, str], str] | None:
        for i, values in enumerate(self.points):
            if _entry(entries, i) is None:
                return i, values, "point"
        return None

    def planned(self, entries: list[dict[str, Any]]) -> int | None:
        return len(self.points)


@dataclass
class AutoRate:
    """`--vary target_qps=auto`: an Offline pilot, then these fractions of its throughput
    upward, stopping after the first point that is saturated or breaks its bounds."""

    base: RunConfig
    fractions: tuple[float, ...] = AUTO_FRACTIONS

    def _rates(self, entries: list[dict[str, Any]]) -> list[float] | None:
        pilot = _entry(entries, 0)
        if pilot is None:
            return None
        peak = pilot.get("completed_per_s") or 0.0  # a crashed pilot: no rates to walk
        return [f * peak for f in self.fractions] if pilot.get("status") == "complete" and peak > 0 else []

    def next_point(self, entries: list[dict[str, Any]]) -> tuple[int, dict[str, str], str] | None:
        rates = self._rates(entries)
        if rates is None:
            return 0, pilot_values(self.base), "pilot"
        for i, rate in enumerate(rates, start=1):
            e = _entry(entries, i)
            if e is None:
                return i, {"target_qps": rate_text(rate)}, "point"
            if e.get("status") != "complete" or saturated(e) or not verdict(e)[0]:
                return None  # saturation (or a failure) found: the walk ends here
        return None

    def planned(self, entries: list[dict[str, Any]]) -> int | None:
        return 1 + len(self.fractions)


@dataclass
class SweepSpec:
    """What sweep.yaml holds: enough to run or resume the sweep from the folder alone."""

    kind: str  # "sweep" | "capacity"
    base: RunConfig
    axes: list[Axis] = field(default_factory=list)
    zipped: bool = False
    search: dict[str, Any] | None = None  # harness.run.capacity's settings
    #: `--accuracy`: the dataset must carry references (checked before any point runs), and
    #: the table shows each point's text accuracy
    accuracy: bool = False

    def to_yaml(self) -> str:
        return yaml.safe_dump(
            {
                "sweep_schema_version": SWEEP_SCHEMA_VERSION,
                "kind": self.kind,
                "axes": [a.to_json() for a in self.axes],
                "zip": self.zipped,
                "search": self.search,
                "accuracy": self.accuracy,
                "base": self.base.model_dump(mode="json"),
            },
            sort_keys=False,
        )

    @classmethod
    def load(cls, sweep_dir: Path) -> SweepSpec:
        path = sweep_dir / SWEEP_YAML
        if not path.is_file():
            raise ResultsError(f"{sweep_dir} has no {SWEEP_YAML}: not a sweep folder")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            base = RunConfig(**data["base"])
            axes = [Axis(str(a["name"]), tuple(str(v) for v in a["values"])) for a in data.get("axes") or []]
            return cls(str(data["kind"]), base, axes, bool(data.get("zip")), data.get("search"), bool(data.get("accuracy")))
        except (yaml.YAMLError, KeyError, TypeError, ValueError) as e:
            raise ResultsError(f"{path} is damaged: {str(e).splitlines()[0]}") from e

    def strategy(self) -> Strategy:
        if self.kind == "capacity":
            return Search.from_settings(self.search or {}, self.base)
        if [a.values for a in self.axes] == [("auto",)] and self.axes[0].name == "target_qps":
            return AutoRate(self.base)
        return Grid.of(self.axes, self.zipped)


def point_config(base: RunConfig, values: dict[str, str], index: int, source: str) -> RunConfig:
    """The base config with one point's axis values, validated as `--set` would be."""
    data = base.model_dump(mode="json")
    data["name"] = f"{base.name[:56]}-p{index:02d}"
    overrides = []
    for name, value in values.items():
        kinds = [kind for kind, keys in DATASET_AXES.items() if name in keys]
        if kinds:
            if registry.get(base.backend).kind == "tensor":
                raise ConfigError(f"--vary {name}: {name} is a parameter of prompt sets; backend {base.backend!r} "
                                  "takes tensors (an LLM backend takes --dataset synthetic:isl=..,osl=..)")
            spec = parse_dataset_spec(data["dataset"])
            if spec.kind not in kinds:
                raise ConfigError(
                    f"--vary {name}: {name} is a parameter of generated prompt sets; the dataset is {data['dataset']!r}, "
                    + " or ".join(f"use --dataset {k}:{name}=.." for k in kinds)
                )
            data["dataset"] = str(type(spec)(spec.kind, None, {**spec.params, name: value}))
        else:
            overrides.append(f"{name}={value}")
    from harness.analysis.cost import parse_sheet

    try:
        return build_config(None, overrides, None, registry.option_names, registry.options_class,
                            sections={"cost": parse_sheet}, base=(data, source))
    except ConfigError as e:
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        raise ConfigError(f"point {index} ({shown}): {e}".replace("--set ", "--vary ")) from e


def check_axes(spec: SweepSpec) -> None:
    """Every grid point's config, built before the first run: a bad axis name or value
    costs no run. (Adaptive points are built as they come; their values are the harness's.)"""
    for a in spec.axes:
        if "auto" in a.values and (a.name != "target_qps" or len(spec.axes) > 1 or len(a.values) > 1):
            raise ConfigError("--vary target_qps=auto is a sweep of its own: give it alone, with no other axis or value")
    strategy = spec.strategy()
    configs = [spec.base]
    if isinstance(strategy, Grid):
        configs = [point_config(spec.base, values, i, "sweep base") for i, values in enumerate(strategy.points)]
    if spec.accuracy:
        for dataset in dict.fromkeys(c.dataset for c in configs):
            check_references(dataset)


def check_references(dataset: str) -> None:
    """`--accuracy` on a dataset without reference answers would score no point: refused
    before the first run. MLPerf's files always carry them (their readers require them);
    a JSONL prompt file has them when its rows have `answer`; generated and ShareGPT sets never."""
    spec = parse_dataset_spec(dataset)
    if spec.kind == "mlperf":
        return
    if spec.kind in ("jsonl", "npy") and spec.path is not None and spec.path.suffix == ".jsonl":
        from harness.data.prompts import load_jsonl

        if load_jsonl(spec.path).references() is not None:
            return
    raise ConfigError(
        f"--accuracy: dataset {dataset} carries no reference answers, so no point would be scored: "
        "use a JSONL prompt file whose rows have an `answer` (and optionally a `metric`), or mlperf:SET:PATH"
    )


@dataclass(frozen=True)
class Progress:
    index: int
    position: int  # 1-based count of this run among the sweep's
    planned: int | None
    values: dict[str, str]
    role: str
    eta_s: float | None


def run_sweep(
    spec: SweepSpec,
    sweep_dir: Path,
    on_progress: Callable[[Progress], None] | None = None,
    after_each: Callable[[runner.RunOutcome], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the sweep in `sweep_dir`; returns sweep.json's content."""
    data = folder.read_json(sweep_dir, SWEEP_JSON) or {}
    # Resuming runs a crashed point again (a search's crashed tries stay: they count).
    entries = [e for e in data.get("points") or [] if e.get("status") != "crashed" or e.get("role") == "try"]
    strategy = spec.strategy()
    spent: list[float] = [float(e.get("elapsed_s") or 0.0) for e in entries if e.get("elapsed_s")]
    state = "finished"
    while True:
        nxt = strategy.next_point(entries)
        if nxt is None:
            break
        index, values, role = nxt
        stop = getattr(strategy, "stop_reason", None)
        reason = stop(entries, sum(spent)) if stop is not None else None
        if reason:
            state = reason
            break
        planned = strategy.planned(entries)
        done = sum(1 for e in entries if e.get("status") in DONE)
        left = (planned - done) if planned is not None else None
        eta = (sum(spent) / len(spent)) * left if spent and left is not None else None
        if on_progress is not None:
            on_progress(Progress(index, done + 1, planned, values, role, eta))
        config = point_config(spec.base, values, index, f"{sweep_dir / SWEEP_YAML}")
        started = time.monotonic()
        stopped_by = None
        try:
            outcome = runner.run(config, sweep_dir)
        except POINT_ERRORS as e:
            entry = crashed_entry(values, str(e), None, role)
        else:
            if after_each is not None:
                after_each(outcome)
            entry = point_entry(outcome.run_dir, values, role)
            entry["run"] = outcome.run_dir.name
            stopped_by = outcome.stopped_by
        entry["index"] = index
        entry["elapsed_s"] = round(time.monotonic() - started, 3)
        spent.append(entry["elapsed_s"])
        entries = [e for e in entries if e.get("index") != index] + [entry]
        _write(sweep_dir, spec, entries, "running", strategy)
        if stopped_by is not None:
            state = f"stopped by {stopped_by}"
            break
    return _write(sweep_dir, spec, entries, state, strategy)


def _write(sweep_dir: Path, spec: SweepSpec, entries: list[dict[str, Any]], state: str, strategy: Strategy) -> dict[str, Any]:
    ordered = sorted(entries, key=lambda e: e["index"])
    points = [e for e in ordered if e.get("role") != "pilot"]
    by_load = sorted((e for e in points if e.get("status") == "complete"), key=lambda e: e.get("completed_per_s") or 0.0)
    # A search's tries bisect near one rate; a knee among them would be noise, not a curve.
    k = knee(by_load) if spec.kind == "sweep" else None
    data: dict[str, Any] = {
        "sweep_schema_version": SWEEP_SCHEMA_VERSION,
        "kind": spec.kind,
        "name": spec.base.name,
        "scenario": spec.base.scenario,
        "backend": spec.base.backend,
        "axes": [a.to_json() for a in spec.axes],
        "zip": spec.zipped,
        "accuracy": spec.accuracy,
        "state": state,
        "points": ordered,
        "knee": by_load[k]["index"] if k is not None else None,
    }
    summarize = getattr(strategy, "summarize", None)
    if summarize is not None:
        data["capacity"] = summarize(ordered, state)
    folder.write_text(sweep_dir / SWEEP_JSON, json.dumps(data, indent=2))
    return data


def new_sweep(spec: SweepSpec, output_root: Path) -> Path:
    check_axes(spec)
    sweep_dir = runner.new_results_dir(output_root, f"{spec.base.name}-{spec.kind}")
    folder.write_text(sweep_dir / SWEEP_YAML, spec.to_yaml())
    return sweep_dir
